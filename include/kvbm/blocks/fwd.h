// kvbm/blocks/fwd.h: forward declarations of the block handle types.
#pragma once

#include "kvbm/tier.h"

namespace kvbm {

template <TierMarker T>
class MutableBlock;
template <TierMarker T>
class CompleteBlock;
template <TierMarker T>
class ImmutableBlock;
template <TierMarker T>
class WeakBlock;
template <TierMarker T>
class BlockManager;

}  // namespace kvbm
