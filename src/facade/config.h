// src/facade/config.h (internal): checks a KvBlockManagerConfig.
//
// Every option is checked before anything is built or allocated, so that an
// invalid one fails as "KvBlockManagerConfig.<option>: what is wrong; what to
// do", never with the message of an engine, a pool or a layout deep inside
// build(). Sizes are checked with overflow-safe arithmetic.
//
// The tiers are checked as entries (KvBlockManagerConfig::tiers). A config
// that names them by the older fields (device, host, disk_*, device_to_host,
// ...) has them translated into entries first, in one place
// (tier_entries_from_fields), and each entry keeps the names of the fields it
// came from (TierOptionNames), so that an error names the option the user set.

#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/kv_block_manager.h"
#include "kvbm/tier_array.h"

namespace kvbm::detail {

/// Throws UsageError "KvBlockManagerConfig.<option>: <what>".
[[noreturn]] void config_error(std::string_view option, const std::string& what);

/// How the options of one tier are named in messages: as the named fields it
/// was translated from ("host_to_disk_policy") or as its entry ("tiers[2].policy").
struct TierOptionNames {
  std::string size;       ///< "disk" or "tiers[2].size" (a TierConfig: ".blocks", ".bytes", ...)
  std::string mode;       ///< "host_to_disk" or "tiers[2].mode"
  std::string policy;     ///< "host_to_disk_policy" or "tiers[2].policy"
  std::string pipeline;   ///< "host_to_disk_pipeline" or "tiers[2].pipeline"
  std::string listeners;  ///< "disk_listeners" or "tiers[2].listeners"
  /// The prefix of the tier's own options: "disk_" / "remote." for the named
  /// fields, "tiers[2].disk." / "tiers[3].remote." for an entry.
  std::string own;
};

/// What check_config() found: each tier's blocks (0: absent or no pool) and
/// the names of its options.
struct CheckedTiers {
  TierArray<std::size_t> blocks{};
  TierArray<TierOptionNames> names;
  bool named = true;  ///< the tiers were given by the named fields (translated)
};

/// Returns the entries the named tier fields of `c` describe (the one place
/// they are read): G1 always, G2 and G3 when they have a size, G4 when it has
/// URLs or listeners.
[[nodiscard]] std::vector<TierEntry> tier_entries_from_fields(const KvBlockManagerConfig& c);

/// Checks every option of `c` and returns the tiers' sizes. Normalises `c`:
/// `tiers` holds one entry per tier present, fastest first (translated from
/// the named fields when none were given), a missing metrics registry
/// becomes a new one, and `env` and `clock` are both set (the same clock). Throws UsageError naming
/// the first invalid option.
CheckedTiers check_config(KvBlockManagerConfig& c);

/// Returns the option a tier's size was given by: "<tier>.bytes" or "<tier>.blocks".
[[nodiscard]] std::string tier_size_option(const TierConfig& t, std::string_view tier);

}  // namespace kvbm::detail
