// src/facade/config.h (internal): checks a KvBlockManagerConfig.
//
// Every option is checked before anything is built or allocated, so that an
// invalid one fails as "KvBlockManagerConfig.<option>: what is wrong; what to
// do", never with the message of an engine, a pool or a layout deep inside
// build(). Sizes are checked with overflow-safe arithmetic.

#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "kvbm/kv_block_manager.h"

namespace kvbm::detail {

/// Throws UsageError "KvBlockManagerConfig.<option>: <what>".
[[noreturn]] void config_error(std::string_view option, const std::string& what);

/// The block counts of the three tiers (0: the tier is absent).
struct TierBlocks {
  std::size_t device = 0;
  std::size_t host = 0;
  std::size_t disk = 0;
};

/// Checks every option of `c` and returns the tier sizes. Normalises `c`:
/// the offload mode of a boundary without its lower tier becomes kNone, and
/// a missing metrics registry becomes a new one. Throws UsageError naming
/// the first invalid option.
TierBlocks check_config(KvBlockManagerConfig& c);

/// Returns the option a tier's size was given by: "<tier>.bytes" or "<tier>.blocks".
[[nodiscard]] std::string tier_size_option(const TierConfig& t, std::string_view tier);

}  // namespace kvbm::detail
