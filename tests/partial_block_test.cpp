// Tests for kvbm/partial_block.h: every legal transition, every illegal call
// in every state, and agreement with TokenBlockSequence hashes.

#include "kvbm/partial_block.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/error.h"
#include "kvbm/hashing.h"
#include "kvbm/token_block_sequence.h"

namespace kvbm {
namespace partial_block_test {

using State = PartialBlockState;

// Taking the tokens must be spelled std::move(b).into_token_block().
template <class B>
concept TakesFromLvalue = requires(B& b) {
  b.into_token_block();
};
template <class B>
concept TakesFromRvalue = requires(B& b) {
  std::move(b).into_token_block();
};
static_assert(!TakesFromLvalue<PartialBlock>);
static_assert(TakesFromRvalue<PartialBlock>);
static_assert(!std::is_copy_constructible_v<PartialBlock>);
static_assert(!std::is_copy_assignable_v<PartialBlock>);
static_assert(std::is_nothrow_move_constructible_v<PartialBlock>);
static_assert(std::is_nothrow_move_assignable_v<PartialBlock>);

constexpr std::uint32_t kBs = 4;
const std::vector<Token> kTokens = {11, 12, 13, 14, 15, 16};

PartialBlock make_in(State state) {
  PartialBlock b(kBs);
  if (state == State::kEmpty) return b;
  b.initialize(kNoSalt, std::nullopt);
  if (state == State::kPartial) return b;
  if (state == State::kComplete) {
    b.add_tokens(kTokens);
    b.schedule_compute();
    b.compute_done();
    return b;
  }
  b.add_tokens(std::span<const Token>(kTokens).first(2));
  if (state == State::kReadyForScheduling) return b;
  b.schedule_compute();
  return b;
}

enum class Call {
  kInitialize,
  kAddTokens,
  kScheduleCompute,
  kCancelSchedule,
  kComputeDone,
  kIntoTokenBlock,
  kBlockHash,
  kSequenceHash
};
constexpr std::array kAllCalls = {Call::kInitialize,     Call::kAddTokens,   Call::kScheduleCompute,
                                  Call::kCancelSchedule, Call::kComputeDone, Call::kIntoTokenBlock,
                                  Call::kBlockHash,      Call::kSequenceHash};
constexpr std::array kAllStates = {State::kEmpty, State::kPartial, State::kReadyForScheduling,
                                   State::kInflight, State::kComplete};

const char* name(Call c) {
  switch (c) {
    case Call::kInitialize:
      return "initialize";
    case Call::kAddTokens:
      return "add_tokens";
    case Call::kScheduleCompute:
      return "schedule_compute";
    case Call::kCancelSchedule:
      return "cancel_schedule";
    case Call::kComputeDone:
      return "compute_done";
    case Call::kIntoTokenBlock:
      return "into_token_block";
    case Call::kBlockHash:
      return "block_hash";
    case Call::kSequenceHash:
      return "sequence_hash";
  }
  return "?";
}

bool legal(Call c, State s) {
  switch (c) {
    case Call::kInitialize:
      return s == State::kEmpty;
    case Call::kAddTokens:
      return s == State::kPartial || s == State::kReadyForScheduling;
    case Call::kScheduleCompute:
      return s == State::kReadyForScheduling;
    case Call::kCancelSchedule:
      return s == State::kReadyForScheduling || s == State::kInflight;
    case Call::kComputeDone:
      return s == State::kInflight;
    case Call::kIntoTokenBlock:
    case Call::kBlockHash:
    case Call::kSequenceHash:
      return s == State::kComplete;
  }
  return false;
}

void invoke(Call c, PartialBlock& b) {
  switch (c) {
    case Call::kInitialize:
      b.initialize(kNoSalt, std::nullopt);
      return;
    case Call::kAddTokens:
      (void)b.add_tokens(std::span<const Token>(kTokens).first(1));
      return;
    case Call::kScheduleCompute:
      b.schedule_compute();
      return;
    case Call::kCancelSchedule:
      (void)b.cancel_schedule();
      return;
    case Call::kComputeDone:
      b.compute_done();
      return;
    case Call::kIntoTokenBlock:
      (void)std::move(b).into_token_block();
      return;
    case Call::kBlockHash:
      (void)b.block_hash();
      return;
    case Call::kSequenceHash:
      (void)b.sequence_hash();
      return;
  }
}

TEST(PartialBlockTest, MakeInReachesEveryState) {
  for (State s : kAllStates) EXPECT_EQ(make_in(s).state(), s) << to_string(s);
}

TEST(PartialBlockTest, EveryIllegalCallThrowsNamingCallAndStateAndChangesNothing) {
  int illegal = 0;
  for (State s : kAllStates) {
    for (Call c : kAllCalls) {
      if (legal(c, s)) continue;
      ++illegal;
      SCOPED_TRACE(std::string(name(c)) + " in " + std::string(to_string(s)));
      PartialBlock b = make_in(s);
      const std::vector<Token> before(b.tokens().begin(), b.tokens().end());
      const std::size_t computed = b.computed_tokens();
      try {
        invoke(c, b);
        ADD_FAILURE() << "no exception";
      } catch (const UsageError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(std::string("PartialBlock::") + name(c) + "()"), std::string::npos)
            << msg;
        EXPECT_NE(msg.find(std::string("state ") + std::string(to_string(s))), std::string::npos)
            << msg;
      }
      EXPECT_EQ(b.state(), s);
      EXPECT_TRUE(std::ranges::equal(b.tokens(), before));
      EXPECT_EQ(b.computed_tokens(), computed);
    }
  }
  EXPECT_EQ(illegal, 5 * 8 - 10);
}

TEST(PartialBlockTest, EveryLegalCallSucceeds) {
  for (State s : kAllStates) {
    for (Call c : kAllCalls) {
      if (!legal(c, s)) continue;
      SCOPED_TRACE(std::string(name(c)) + " in " + std::string(to_string(s)));
      PartialBlock b = make_in(s);
      EXPECT_NO_THROW(invoke(c, b));
    }
  }
}

TEST(PartialBlockTest, InitializeMovesEmptyToPartial) {
  PartialBlock b(kBs);
  EXPECT_EQ(b.state(), State::kEmpty);
  const SequenceHash parent = chain(std::nullopt, 42);
  b.initialize(SaltHash(7), parent);
  EXPECT_EQ(b.state(), State::kPartial);
  EXPECT_EQ(b.salt(), SaltHash(7));
  EXPECT_EQ(b.parent(), parent);
  EXPECT_EQ(b.remaining(), kBs);
  EXPECT_EQ(b.block_size(), kBs);
}

TEST(PartialBlockTest, AddTokensAcceptsUpToRemainingSpace) {
  PartialBlock b = make_in(State::kPartial);
  EXPECT_EQ(b.add_tokens({}), 0U);  // nothing accepted: stays Partial
  EXPECT_EQ(b.state(), State::kPartial);
  EXPECT_EQ(b.add_tokens(std::span<const Token>(kTokens).first(1)), 1U);
  EXPECT_EQ(b.state(), State::kReadyForScheduling);
  EXPECT_EQ(b.add_tokens(kTokens), 3U);  // only 3 fit
  EXPECT_EQ(b.state(), State::kReadyForScheduling);
  EXPECT_EQ(b.remaining(), 0U);
  EXPECT_EQ(b.add_tokens(kTokens), 0U);  // full: accepts none
  EXPECT_EQ(b.state(), State::kReadyForScheduling);
  EXPECT_EQ(b.pending_tokens().size(), 4U);
  EXPECT_EQ(b.computed_tokens(), 0U);
}

TEST(PartialBlockTest, ComputeDoneOnPartFillReturnsToPartial) {
  PartialBlock b = make_in(State::kInflight);  // 2 pending
  b.compute_done();
  EXPECT_EQ(b.state(), State::kPartial);
  EXPECT_EQ(b.computed_tokens(), 2U);
  EXPECT_TRUE(b.pending_tokens().empty());
  EXPECT_EQ(b.add_tokens(std::span<const Token>(kTokens).subspan(2)), 2U);
  EXPECT_EQ(b.pending_tokens().size(), 2U);
  b.schedule_compute();
  b.compute_done();
  EXPECT_EQ(b.state(), State::kComplete);
  EXPECT_EQ(b.computed_tokens(), kBs);
}

TEST(PartialBlockTest, CancelFromReadyOrInflightDiscardsOnlyPendingTokens) {
  for (State from : {State::kReadyForScheduling, State::kInflight}) {
    SCOPED_TRACE(to_string(from));
    PartialBlock b = make_in(State::kInflight);
    b.compute_done();  // 2 computed
    b.add_tokens(std::span<const Token>(kTokens).subspan(2, 1));
    if (from == State::kInflight) b.schedule_compute();
    ASSERT_EQ(b.state(), from);
    EXPECT_EQ(b.cancel_schedule(), 1U);
    EXPECT_EQ(b.state(), State::kPartial);
    EXPECT_EQ(b.size(), 2U);
    EXPECT_EQ(b.computed_tokens(), 2U);
  }
}

TEST(PartialBlockTest, CompleteBlockBecomesATokenBlockWithItsHashes) {
  const SaltHash salt = SaltBuilder().lora("l").build();
  const SequenceHash parent = chain(std::nullopt, 1234);
  PartialBlock b(kBs);
  b.initialize(salt, parent);
  b.add_tokens(kTokens);
  b.schedule_compute();
  b.compute_done();
  ASSERT_EQ(b.state(), State::kComplete);
  const TokenBlock expected = TokenBlock::compute({11, 12, 13, 14}, salt, parent);
  EXPECT_EQ(b.block_hash(), expected.block_hash());
  EXPECT_EQ(b.sequence_hash(), expected.sequence_hash());
  EXPECT_EQ(b.sequence_hash().parent(), parent.value());
  const TokenBlock block = std::move(b).into_token_block();
  EXPECT_EQ(block, expected);
  EXPECT_EQ(b.state(), State::kEmpty);  // NOLINT(bugprone-use-after-move): documented to be Empty
  EXPECT_EQ(b.size(), 0U);              // NOLINT(bugprone-use-after-move)
  b.initialize(salt, block.sequence_hash());  // reusable
  EXPECT_EQ(b.state(), State::kPartial);
}

TEST(PartialBlockTest, MovedFromBlockIsEmpty) {
  PartialBlock a = make_in(State::kInflight);
  PartialBlock b(std::move(a));
  EXPECT_EQ(b.state(), State::kInflight);
  EXPECT_EQ(b.size(), 2U);
  EXPECT_EQ(a.state(), State::kEmpty);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.size(), 0U);              // NOLINT(bugprone-use-after-move)
  PartialBlock c(kBs);
  c = std::move(b);
  EXPECT_EQ(c.state(), State::kInflight);
  EXPECT_EQ(b.state(), State::kEmpty);  // NOLINT(bugprone-use-after-move)
}

TEST(PartialBlockTest, BlockKeysJoinTheHash) {
  PartialBlock b(kBs);
  b.initialize(kNoSalt, std::nullopt, {ExtraKey::multimodal(2, 9), ExtraKey::multimodal(1, 8)});
  b.add_tokens(kTokens);
  b.schedule_compute();
  b.compute_done();
  const std::vector<ExtraKey> sorted = {ExtraKey::multimodal(1, 8), ExtraKey::multimodal(2, 9)};
  EXPECT_EQ(b.block_hash(), block_hash(std::vector<Token>{11, 12, 13, 14}, kNoSalt, sorted));
  EXPECT_NE(b.block_hash(), block_hash(std::vector<Token>{11, 12, 13, 14}, kNoSalt));
}

TEST(PartialBlockTest, WrongKindOfKeyOrOffsetThrows) {
  PartialBlock b(kBs);
  try {
    b.initialize(kNoSalt, std::nullopt, {ExtraKey::lora("x")});
    ADD_FAILURE() << "no exception";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("wrong kind"), std::string::npos) << e.what();
  }
  EXPECT_THROW(b.initialize(kNoSalt, std::nullopt, {ExtraKey::multimodal(kBs, 1)}), UsageError);
  EXPECT_EQ(b.state(), State::kEmpty);
  EXPECT_THROW(PartialBlock(0), UsageError);
}

TEST(PartialBlockTest, ChainOfPartialBlocksMatchesTokenBlockSequence) {
  std::vector<Token> stream(50);
  std::iota(stream.begin(), stream.end(), 300);
  const SaltHash salt = SaltBuilder().cache_salt("tenant").build();
  TokenBlockSequence seq(8, salt);
  seq.extend(stream);

  std::vector<SequenceHash> hashes;
  std::optional<SequenceHash> parent;
  PartialBlock b(8);
  b.initialize(salt, parent);
  std::span<const Token> rest(stream);
  int step = 0;
  while (!rest.empty()) {
    // Feed 3 tokens per step, computing each step, cancelling every fifth.
    const std::size_t accepted = b.add_tokens(rest.first(std::min<std::size_t>(3, rest.size())));
    if (++step % 5 == 0) {
      EXPECT_EQ(b.cancel_schedule(), accepted);
      continue;
    }
    rest = rest.subspan(accepted);
    b.schedule_compute();
    b.compute_done();
    if (b.state() == State::kComplete) {
      TokenBlock done = std::move(b).into_token_block();
      hashes.push_back(done.sequence_hash());
      parent = done.sequence_hash();
      b.initialize(salt, parent);
    }
  }
  EXPECT_TRUE(std::ranges::equal(hashes, seq.sequence_hashes()));
  EXPECT_TRUE(std::ranges::equal(b.tokens(), seq.tail_tokens()));
}

TEST(PartialBlockTest, StateNames) {
  EXPECT_EQ(to_string(State::kEmpty), "Empty");
  EXPECT_EQ(to_string(State::kPartial), "Partial");
  EXPECT_EQ(to_string(State::kReadyForScheduling), "ReadyForScheduling");
  EXPECT_EQ(to_string(State::kInflight), "Inflight");
  EXPECT_EQ(to_string(State::kComplete), "Complete");
}

}  // namespace partial_block_test
}  // namespace kvbm
