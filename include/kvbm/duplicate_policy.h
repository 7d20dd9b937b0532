// kvbm/duplicate_policy.h: what registering a hash a pool already holds does.
//
// A plain enum, shared by the pools (BlockManager<T>::Builder) and the
// facade's config (KvBlockManagerConfig::duplicate_policy), so that the config
// need not include the pool's implementation.

#pragma once

#include <cstdint>

namespace kvbm {

/// What registration does when the tier already holds a block with the same
/// sequence hash.
enum class DuplicatePolicy : std::uint8_t {
  kAllow,   ///< keep the new block as a duplicate; it lives until dropped
  kReject,  ///< return the existing block and free the new one
};

}  // namespace kvbm
