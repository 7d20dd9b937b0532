// tests/transfer/transfer_engine_test.cpp: what every engine shares: the one
// batch check (TransferEngine::check_batch), submit_or_refuse() and the
// outcome's helpers.

#include "kvbm/transfer/transfer_engine.h"

#include <memory>
#include <new>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvbm/error.h"

namespace kvbm {
namespace transfer_engine_test {

using ::testing::HasSubstr;

/// An engine of 4 source and 6 destination blocks that checks its batches
/// and completes them at once; `thrown` makes submit() throw first.
class CheckingEngine final : public TransferEngine {
 public:
  enum class Throw { kNothing, kUsage, kNoMemory };
  Throw thrown = Throw::kNothing;
  std::size_t submitted = 0;

  [[nodiscard]] std::string_view name() const noexcept override { return "checking"; }
  std::shared_ptr<TransferCompletion> submit(std::span<const TransferPair> pairs) override {
    if (thrown == Throw::kNoMemory) throw std::bad_alloc();
    if (thrown == Throw::kUsage) throw UsageError("refused on purpose");
    check_batch(name(), pairs, 4, 6);
    ++submitted;
    auto c = std::make_shared<TransferCompletion>();
    c->complete({});
    return c;
  }
};

std::string refusal(CheckingEngine& e, const std::vector<TransferPair>& pairs) {
  try {
    (void)e.submit(pairs);
  } catch (const UsageError& err) {
    return err.what();
  }
  return "";
}

TEST(TransferEngineCheckBatch, RefusesEveryMalformedBatchBeforeStartingIt) {
  CheckingEngine e;
  EXPECT_THAT(refusal(e, {}),
              HasSubstr("transfer engine 'checking': submit() needs at least one pair"));
  EXPECT_THAT(refusal(e, {{0, 0}, {4, 1}}), HasSubstr("source block 4 (pair 1) out of range"));
  EXPECT_THAT(refusal(e, {{0, 0}, {1, 6}}), HasSubstr("destination block 6 (pair 1) out of range"));
  EXPECT_THAT(refusal(e, {{0, 5}, {1, 2}, {2, 5}}), HasSubstr("destination block 5 appears twice"));
  EXPECT_THAT(refusal(e, {{0, 1}, {0xFFFFFFFFU, 2}}), HasSubstr("out of range"));
  EXPECT_EQ(e.submitted, 0U);
  // The same source twice is allowed (one block copied to two places), and
  // the last ids in range pass.
  EXPECT_EQ(refusal(e, {{3, 5}, {3, 0}}), "");
  EXPECT_EQ(e.submitted, 1U);
}

TEST(SubmitOrRefuse, PassesAnAcceptedBatchThrough) {
  CheckingEngine e;
  const std::vector<TransferPair> pairs = {{0, 0}, {1, 1}};
  EXPECT_TRUE(submit_or_refuse(e, pairs)->wait().ok());
  EXPECT_EQ(e.submitted, 1U);
}

TEST(SubmitOrRefuse, TurnsARefusalIntoAFailedOutcome) {
  CheckingEngine e;
  const std::vector<TransferPair> pairs = {{0, 0}, {1, 1}, {2, 2}};
  e.thrown = CheckingEngine::Throw::kUsage;
  auto refused = submit_or_refuse(e, pairs);
  ASSERT_TRUE(refused->done()) << "complete before it is returned";
  const TransferOutcome& o = refused->wait();
  EXPECT_EQ(o.failed, (std::vector<std::size_t>{0, 1, 2}));
  ASSERT_TRUE(o.error.has_value());
  EXPECT_EQ(o.error->kind, ErrorKind::kRefused);
  EXPECT_THAT(std::string(o.message()), HasSubstr("refused the batch: refused on purpose"));

  e.thrown = CheckingEngine::Throw::kNoMemory;
  const TransferOutcome oom =
      submit_or_refuse(e, pairs)->wait();  // a copy: the completion is a temporary
  EXPECT_EQ(oom.failed.size(), 3U);
  ASSERT_TRUE(oom.error.has_value());
  EXPECT_EQ(oom.error->kind, ErrorKind::kNoMemory);
  EXPECT_THAT(std::string(oom.message()), HasSubstr("checking"));

  e.thrown = CheckingEngine::Throw::kNothing;
  const std::vector<TransferPair> bad = {{9, 0}};
  const TransferOutcome checked = submit_or_refuse(e, bad)->wait();
  EXPECT_EQ(checked.failed, (std::vector<std::size_t>{0}));
  EXPECT_THAT(std::string(checked.message()), HasSubstr("source block 9 (pair 0) out of range"));
}

TEST(TransferOutcome, AllFailedNamesEveryPairInOrder) {
  const TransferOutcome o = TransferOutcome::all_failed(3, {ErrorKind::kDevice, 700, "boom"});
  EXPECT_FALSE(o.ok());
  EXPECT_EQ(o.failed, (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(o.message(), "boom");
  EXPECT_EQ(o.error->code, 700);
  const TransferOutcome q = TransferOutcome::all_failed_no_memory(2, "no memory");
  EXPECT_EQ(q.failed, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(q.error->kind, ErrorKind::kNoMemory);
  const TransferOutcome none;
  EXPECT_TRUE(none.ok());
  EXPECT_EQ(none.message(), "");
}

}  // namespace transfer_engine_test
}  // namespace kvbm
