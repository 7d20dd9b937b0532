// replay/option_checks.h: the kvbm-replay options that do not go together.
//
// parse_options() (options.h) reads each option on its own; once the last one
// is read, these checks refuse the combinations that cannot run (--soak with a
// sweep, --persist without --disk-dir, --remote with --metadata-only, router
// options without a router, ...), each with a message that says what to give
// instead. They return "" when the options go together.
//
// Thread-safety: pure functions.

#pragma once

#include <string>

#include "replay/options.h"

namespace kvbm::replay {

/// --soak against --realtime and --sweep.
[[nodiscard]] std::string check_soak(const Options& o);

/// The storage options (--persist, --remote) against the tiers, the instance,
/// router and sweep options together, and --overlap-offload against the modes;
/// the first refusal, or "".
[[nodiscard]] std::string check_together(const Options& o);

}  // namespace kvbm::replay
