// Compile-time checks of the block type-state API: illegal transitions do not
// compile, legal ones do. Every check is a static_assert; the single runtime
// test only makes the binary show up in ctest.

#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "kvbm/blocks/complete_block.h"
#include "kvbm/blocks/immutable_block.h"
#include "kvbm/blocks/mutable_block.h"
#include "kvbm/blocks/weak_block.h"
#include "kvbm/tier.h"

namespace kvbm {
namespace compile_time_test {

struct TokenBlockLike {
  [[nodiscard]] std::vector<std::uint32_t> tokens() const { return {}; }
  [[nodiscard]] SequenceHash sequence_hash() const { return {}; }
};

// ---- Tier markers --------------------------------------------------------

struct EmptyTier {};
struct NamedTier {
  static constexpr std::string_view kName = "named";
};
struct NonEmptyTier {
  int x;
};
struct VirtualTier {
  virtual ~VirtualTier() = default;
};
union UnionTier {};

static_assert(TierMarker<G1> && TierMarker<G2> && TierMarker<G3>);
static_assert(TierMarker<EmptyTier> && TierMarker<NamedTier>);
static_assert(!TierMarker<int>);
static_assert(!TierMarker<int*>);
static_assert(!TierMarker<NonEmptyTier>);
static_assert(!TierMarker<VirtualTier>);
static_assert(!TierMarker<UnionTier>);
static_assert(!TierMarker<void>);
static_assert(tier_name<G1>() == "G1" && tier_name<G2>() == "G2" && tier_name<G3>() == "G3");
static_assert(tier_name<EmptyTier>() == "custom");
static_assert(tier_name<NamedTier>() == "named");

// The handle and manager templates are constrained on TierMarker: naming one
// with a non-marker is ill-formed.
template <class T>
concept HandlesFor = requires {
  typename MutableBlock<T>;
  typename CompleteBlock<T>;
  typename ImmutableBlock<T>;
  typename WeakBlock<T>;
  typename BlockManager<T>;
};
static_assert(HandlesFor<G1> && HandlesFor<EmptyTier>);
static_assert(!HandlesFor<int>);
static_assert(!HandlesFor<NonEmptyTier>);
static_assert(!HandlesFor<VirtualTier>);

// Each check goes through a concept over the (reference) type, so that an
// ill-formed expression is a substitution failure (false), not a hard error.
// B is the type of the object expression: X&& means "called on std::move(x)",
// X& on an lvalue, const X& on a const lvalue.

template <class B>
concept CanStage = requires(const SequenceHash& h) {
  std::declval<B>().stage(h, 16U);
};
template <class B, class Tok>
concept CanComplete = requires(const Tok& t) {
  std::declval<B>().complete(t);
};
template <class B>
concept CanResetToMutable = requires {
  std::declval<B>().reset_to_mutable();
};
template <class B>
concept CanDowngrade = requires {
  std::declval<B>().downgrade();
};
template <class B>
concept HasSequenceHash = requires {
  std::declval<B>().sequence_hash();
};
template <class M, class B>
concept CanRegister = requires(M& m) {
  m.register_block(std::declval<B>());
};
template <class M, class V>
concept CanRegisterAll = requires(M& m) {
  m.register_blocks(std::declval<V>());
};

// ---- MutableBlock --------------------------------------------------------

using M1 = MutableBlock<G1>;
using C1 = CompleteBlock<G1>;
using I1 = ImmutableBlock<G1>;
using W1 = WeakBlock<G1>;

static_assert(!std::is_copy_constructible_v<M1>);
static_assert(!std::is_copy_assignable_v<M1>);
static_assert(std::is_nothrow_move_constructible_v<M1>);
static_assert(std::is_nothrow_move_assignable_v<M1>);
static_assert(std::is_nothrow_destructible_v<M1>);
static_assert(!std::is_default_constructible_v<M1>);
// Only the manager creates blocks.
static_assert(!std::is_constructible_v<M1, detail::BlockStore*, BlockId>);

// stage: only on an rvalue, and it returns a Result carrying the block back.
static_assert(CanStage<M1&&>);
static_assert(std::same_as<decltype(std::declval<M1&&>().stage(SequenceHash{}, 16U)),
                           Result<C1, StageError<G1>>>);
static_assert(!CanStage<M1&>);
static_assert(!CanStage<const M1&>);
static_assert(!CanStage<const M1&&>);
// complete: only on an rvalue, and only from something token-block-like.
static_assert(CanComplete<M1&&, TokenBlockLike>);
static_assert(!CanComplete<M1&, TokenBlockLike>);
static_assert(!CanComplete<M1&&, int>);
static_assert(!CanComplete<M1&&, SequenceHash>);
// A MutableBlock has no reset_to_mutable, sequence_hash or downgrade.
static_assert(!CanResetToMutable<M1&&>);
static_assert(!CanDowngrade<M1&>);
static_assert(!HasSequenceHash<M1&>);
// Handles of different tiers are unrelated types.
static_assert(!std::is_convertible_v<M1, MutableBlock<G2>>);
static_assert(!std::is_constructible_v<MutableBlock<G2>, M1&&>);

// ---- CompleteBlock -------------------------------------------------------

static_assert(!std::is_copy_constructible_v<C1>);
static_assert(!std::is_copy_assignable_v<C1>);
static_assert(std::is_nothrow_move_constructible_v<C1>);
static_assert(std::is_nothrow_move_assignable_v<C1>);
static_assert(!std::is_default_constructible_v<C1>);
static_assert(!std::is_constructible_v<C1, detail::BlockStore*, BlockId, SequenceHash>);

static_assert(CanResetToMutable<C1&&>);
static_assert(std::same_as<decltype(std::declval<C1&&>().reset_to_mutable()), M1>);
static_assert(!CanResetToMutable<C1&>);
static_assert(!CanResetToMutable<const C1&>);
static_assert(HasSequenceHash<const C1&>);
// No staging twice, no downgrade before registration.
static_assert(!CanStage<C1&&>);
static_assert(!CanDowngrade<C1&>);
// Only register_block turns a CompleteBlock into an ImmutableBlock.
static_assert(!std::is_constructible_v<I1, C1&&>);
static_assert(!std::is_convertible_v<M1, C1>);
static_assert(!std::is_convertible_v<C1, M1>);

// ---- ImmutableBlock / WeakBlock ------------------------------------------

static_assert(std::is_copy_constructible_v<I1>);
static_assert(std::is_copy_assignable_v<I1>);
static_assert(std::is_nothrow_copy_constructible_v<I1>);
static_assert(std::is_nothrow_move_constructible_v<I1>);
static_assert(!std::is_default_constructible_v<I1>);
static_assert(!std::is_constructible_v<I1, detail::BlockStore*, BlockId>);
static_assert(requires(const I1& b) {
  { b.downgrade() } -> std::same_as<W1>;
  { b.sequence_hash() } -> std::same_as<const SequenceHash&>;
  { b.use_count() } -> std::same_as<std::uint32_t>;
  { b == b } -> std::same_as<bool>;
});
// Registered blocks cannot go back to a writable state or be staged again.
static_assert(!CanResetToMutable<I1&&>);
static_assert(!CanStage<I1&&>);
static_assert(!std::is_convertible_v<I1, ImmutableBlock<G2>>);

static_assert(std::is_copy_constructible_v<W1>);
static_assert(std::is_nothrow_move_constructible_v<W1>);
static_assert(!std::is_default_constructible_v<W1>);
static_assert(requires(const W1& w) {
  { w.upgrade() } -> std::same_as<std::optional<I1>>;
});
// A weak reference is not a strong one.
static_assert(!std::is_convertible_v<W1, I1>);
static_assert(!std::is_constructible_v<I1, const W1&>);
static_assert(!CanDowngrade<W1&>);

// ---- BlockManager --------------------------------------------------------

static_assert(!std::is_copy_constructible_v<BlockManager<G1>>);
static_assert(!std::is_copy_assignable_v<BlockManager<G1>>);
static_assert(std::is_nothrow_move_constructible_v<BlockManager<G1>>);
static_assert(std::is_nothrow_move_assignable_v<BlockManager<G1>>);

// register_block takes a CompleteBlock of its own tier, by rvalue only.
static_assert(CanRegister<BlockManager<G1>, C1&&>);
static_assert(
    std::same_as<decltype(std::declval<BlockManager<G1>&>().register_block(std::declval<C1&&>())),
                 I1>);
static_assert(!CanRegister<BlockManager<G1>, C1&>);
static_assert(!CanRegister<BlockManager<G1>, const C1&>);
static_assert(!CanRegister<BlockManager<G1>, M1&&>);  // must be staged first
static_assert(!CanRegister<BlockManager<G2>, M1&&>);  // wrong tier
static_assert(!CanRegister<BlockManager<G2>, C1&&>);  // wrong tier
static_assert(!CanRegister<BlockManager<G1>, I1&&>);  // already registered
static_assert(!CanRegister<BlockManager<G1>, I1&>);
static_assert(CanRegisterAll<BlockManager<G1>, std::vector<C1>&&>);
static_assert(!CanRegisterAll<BlockManager<G1>, std::vector<C1>&>);
static_assert(!CanRegisterAll<BlockManager<G1>, std::vector<M1>&&>);
static_assert(!CanRegisterAll<BlockManager<G2>, std::vector<C1>&&>);
static_assert(requires(BlockManager<G1> & m, std::span<const SequenceHash> hs) {
  { m.allocate_blocks(1) } -> std::same_as<std::optional<std::vector<M1>>>;
  { m.match_blocks(hs) } -> std::same_as<std::vector<I1>>;
  { m.scan_matches(hs) } -> std::same_as<std::vector<I1>>;
});
// A custom empty marker works end to end.
static_assert(CanRegister<BlockManager<EmptyTier>, CompleteBlock<EmptyTier>&&>);
static_assert(!CanRegister<BlockManager<EmptyTier>, C1&&>);

// ---- Result --------------------------------------------------------------

static_assert(!std::is_copy_constructible_v<Result<CompleteBlock<G1>, StageError<G1>>>);
static_assert(std::is_move_constructible_v<Result<CompleteBlock<G1>, StageError<G1>>>);
static_assert(std::same_as<decltype(std::declval<Result<C1, StageError<G1>>&&>().value()), C1&&>);
static_assert(
    std::same_as<decltype((std::declval<Result<C1, StageError<G1>>&&>().error().block)), M1&&>);

TEST(CompileTime, TypeStateChecksCompiled) { SUCCEED(); }

TEST(CompileTime, CustomMarkerPoolIsNamedCustom) {
  auto m = BlockManager<EmptyTier>::builder().block_count(1).block_size(1).build();
  EXPECT_EQ(m.pool_name(), "custom");
  auto n = BlockManager<NamedTier>::builder().block_count(1).block_size(1).build();
  EXPECT_EQ(n.pool_name(), "named");
}

}  // namespace compile_time_test
}  // namespace kvbm
