// kvbm/transfer/stage_and_register.h: the last step of every copy into a pool.
//
// A transfer has copied bytes into fresh destination blocks (MutableBlock<T>);
// stage_and_register_copies() stages each copy under the hash it was copied
// for and registers it in the destination pool, so that it becomes matchable.
// The offload pipeline's executor and the remote tier's landing end this way.
// The on-eviction copier (src/facade/eviction_copier.h) and onboarding
// (src/facade/onboard_state.cpp) stage every copy first and register them in
// one batch (BlockManager::register_copies: one lock, the index's misses
// overlapped); folding that batch into this function would serve all four.
//
// A copy that failed (failed[i]) is not registered: its block is dropped,
// back to the destination's reset pool. A copy that cannot be staged (a
// block size mismatch) is dropped too. Registration goes through
// BlockManager::register_copy (no on_register hook: the copy's own path hands
// it on). An exception from staging or registering is caught as a
// std::exception, the copy counted as not registered, and logged once per
// call (with the number of copies it hit): nothing is thrown, so the caller
// may be an engine's completion thread.
//
// Thread-safety: as the destination pool's members (any thread).

#pragma once

#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvbm/block_manager.h"
#include "kvbm/blocks/immutable_block.h"
#include "kvbm/blocks/mutable_block.h"
#include "kvbm/sequence_hash.h"
#include "kvbm/tier.h"

namespace kvbm {

namespace detail {
/// Logs (error) that `count` copies into `pool` could not be registered; `what`
/// is the first exception's message. Out of line: the header stays spdlog-free.
void log_unregistered_copies(std::string_view pool, std::size_t count,
                             std::string_view what) noexcept;
}  // namespace detail

/// Stages and registers each copy in `dst`, in order; see the file comment.
/// `hash_of(i)` returns the hash copy i was made for; `failed` has an entry
/// per copy or is empty (none failed). Calls `each(i, registered)` for every
/// copy, in order, right after its registration: `registered` holds the new
/// handle, or nullopt when the copy failed or was not registered (dropping
/// the handle inside `each` releases it at once, as a loop would). `copies`
/// is left with moved-from blocks.
template <TierMarker T, class HashOf, class Each>
void stage_and_register_copies(BlockManager<T>& dst, std::vector<MutableBlock<T>>& copies,
                               const std::vector<bool>& failed, HashOf&& hash_of,
                               Each&& each) noexcept {
  std::size_t errors = 0;
  std::string first_error;
  const std::uint32_t block_size = dst.block_size();
  for (std::size_t i = 0; i < copies.size(); ++i) {
    std::optional<ImmutableBlock<T>> registered;
    if (failed.empty() || !failed[i]) {
      try {
        auto staged = std::move(copies[i]).stage(hash_of(i), block_size);
        if (staged.ok()) registered.emplace(dst.register_copy(std::move(staged).value()));
      } catch (const std::exception& e) {
        if (errors++ == 0) first_error = e.what();
      }
    }
    each(i, std::move(registered));
  }
  if (errors > 0) detail::log_unregistered_copies(tier_name<T>(), errors, first_error);
}

}  // namespace kvbm
