// kvbm/blocks/block_id.h: the index of a block inside its pool.

#pragma once

#include <cstdint>

namespace kvbm {

/// Dense index of a block inside its pool (0 .. the pool's size - 1); in a disk pool, the slot.
using BlockId = std::uint32_t;

}  // namespace kvbm
