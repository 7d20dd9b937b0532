// A randomized concurrent run of the offload pipeline: producers register
// and enqueue blocks (some behind preconditions), a canceller cancels random
// handles, an evictor forces evictions in G1, a signaller meets the
// preconditions, and the engine completes asynchronously, failing some
// copies. The engine tracks contents: at the end every block registered in
// G2 must hold exactly its hash's content (a failed copy is never
// registered), every handle has ended, and both pools are clean.
//
// KVBM_STRESS_SCALE scales the operation counts (sanitizer builds use 0.1);
// the seed is printed (replay with KVBM_TEST_SEED).

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "offload/offload_test_util.h"

namespace kvbm {
namespace offload_stress_test {

using test::scaled;
using test::stress_scale;

using namespace std::chrono_literals;

/// An engine that "copies" a content tag per block on its own thread and
/// fails a random share of the pairs.
class ContentEngine final : public TransferEngine {
 public:
  ContentEngine(std::size_t src_blocks, std::size_t dst_blocks, std::uint32_t seed)
      : src_(src_blocks, 0), dst_(dst_blocks, 0), rng_(seed), worker_([this] { run(); }) {}
  ~ContentEngine() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  std::string_view name() const noexcept override { return "content"; }
  std::shared_ptr<TransferCompletion> submit(std::span<const TransferPair> pairs) override {
    auto c = std::make_shared<TransferCompletion>();
    {
      std::lock_guard lock(mu_);
      queue_.push_back({c, std::vector<TransferPair>(pairs.begin(), pairs.end())});
    }
    cv_.notify_all();
    return c;
  }
  void set_src(BlockId id, std::uint64_t tag) {
    std::lock_guard lock(mu_);
    src_[id] = tag;
  }
  std::uint64_t dst(BlockId id) {
    std::lock_guard lock(mu_);
    return dst_[id];
  }

 private:
  struct Job {
    std::shared_ptr<TransferCompletion> completion;
    std::vector<TransferPair> pairs;
  };
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Job job = std::move(queue_.front());
      queue_.pop_front();
      TransferOutcome o;
      for (std::size_t i = 0; i < job.pairs.size(); ++i) {
        if (rng_() % 20 == 0) {
          o.failed.push_back(i);
          dst_[job.pairs[i].dst] = 0xdeadbeef;  // garbage
        } else {
          dst_[job.pairs[i].dst] = src_[job.pairs[i].src];
        }
      }
      if (!o.failed.empty()) o.error = TransferError{ErrorKind::kIo, 0, "random failure"};
      lock.unlock();
      job.completion->complete(std::move(o));
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::uint64_t> src_, dst_;
  std::deque<Job> queue_;
  std::mt19937 rng_;
  std::thread worker_;
};

TEST(OffloadStress, EnqueueCancelEvictConcurrently) {
  const std::uint32_t seed = test::test_seed();
  constexpr std::uint32_t kChains = 40;
  constexpr std::uint32_t kMaxLen = 6;
  test::Tiers t(192, 96);
  auto engine = std::make_shared<ContentEngine>(192, 96, seed);
  PipelineConfig config;
  config.batch_config.min_batch_size = 4;
  config.batch_config.max_batch_size = 16;
  config.batch_config.flush_interval = 200us;
  config.sweep_interval = 500us;
  config.max_concurrent_transfers = 2;
  auto pipeline = OffloadPipeline<G1, G2>::builder()
                      .source(t.g1)
                      .destination(t.g2)
                      .engine(engine)
                      .policy(std::make_shared<PresencePolicy<G2>>(t.g2.registry()))
                      .config(config)
                      .build();

  std::mutex mu;
  std::vector<TransferHandle> handles;
  std::deque<std::shared_ptr<HostEvent>> events;
  std::atomic<int> producers_left{2};
  const std::size_t ops = scaled(3000, 50);

  auto producer = [&](std::uint32_t id) {
    std::mt19937 rng(seed + id);
    for (std::size_t op = 0; op < ops; ++op) {
      const auto cid = static_cast<std::uint32_t>(rng() % kChains);
      const auto len = static_cast<std::uint32_t>(1 + rng() % kMaxLen);
      auto blocks = t.g1.allocate_blocks(len);
      if (!blocks) continue;
      std::vector<ImmutableBlock<G1>> reg;
      for (std::uint32_t i = 0; i < len; ++i) {
        const SequenceHash h = test::seq(i, cid);
        engine->set_src((*blocks)[i].block_id(), h.value());  // the block's "content"
        reg.push_back(t.g1.register_block(test::stage_ok(std::move((*blocks)[i]), h)));
      }
      std::shared_ptr<HostEvent> event;
      if (rng() % 2 == 0) event = std::make_shared<HostEvent>();
      auto h = pipeline->enqueue(reg, event);
      std::lock_guard lock(mu);
      handles.push_back(h);
      if (event) events.push_back(event);
    }
    --producers_left;
  };
  auto canceller = [&] {
    std::mt19937 rng(seed + 100);
    while (producers_left > 0) {
      TransferHandle h;
      {
        std::lock_guard lock(mu);
        if (!handles.empty()) h = handles[rng() % handles.size()];
      }
      if (h.valid()) h.cancel();
      std::this_thread::yield();
    }
  };
  auto evictor = [&] {
    std::mt19937 rng(seed + 200);
    while (producers_left > 0) {
      const std::size_t n = 1 + rng() % 24;
      auto b = t.g1.allocate_blocks(n);  // evicts inactive blocks, then drops them
      std::this_thread::yield();
    }
  };
  auto signaller = [&] {
    std::mt19937 rng(seed + 300);
    for (;;) {
      std::shared_ptr<HostEvent> e;
      {
        std::lock_guard lock(mu);
        if (events.empty() && producers_left == 0) return;
        if (!events.empty()) {
          const std::size_t i = rng() % events.size();
          e = events[i];
          events.erase(events.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      if (e) e->signal();
      std::this_thread::yield();
    }
  };

  std::vector<std::thread> threads;
  threads.emplace_back(producer, 1);
  threads.emplace_back(producer, 2);
  threads.emplace_back(canceller);
  threads.emplace_back(evictor);
  threads.emplace_back(signaller);
  for (auto& th : threads) th.join();

  std::size_t done = 0, failed = 0, cancelled = 0;
  for (auto& h : handles) {
    ASSERT_TRUE(h.wait_for(30s)) << "a handle never ended (status " << to_string(h.status()) << ")";
    switch (h.status()) {
      case TransferStatus::kDone:
        ++done;
        EXPECT_TRUE(h.failed_blocks().empty());
        break;
      case TransferStatus::kFailed:
        ++failed;
        EXPECT_FALSE(h.failed_blocks().empty());
        break;
      default:
        ++cancelled;
        EXPECT_EQ(h.status(), TransferStatus::kCancelled);
    }
  }
  std::cout << "[offload stress] containers " << handles.size() << ": done " << done << ", failed "
            << failed << ", cancelled " << cancelled << "\n";
  pipeline.reset();
  handles.clear();
  test::expect_clean(t);

  // Every copy registered in G2 holds its hash's content.
  std::size_t checked = 0;
  for (std::uint32_t cid = 0; cid < kChains; ++cid) {
    const auto hashes = test::chain(kMaxLen, cid);
    for (const auto& b : t.g2.scan_matches(hashes)) {
      EXPECT_EQ(engine->dst(b.block_id()), b.sequence_hash().value())
          << "G2 block " << b.block_id() << " was registered without a good copy";
      ++checked;
    }
  }
  std::cout << "[offload stress] G2 blocks checked: " << checked << "\n";
  test::expect_clean(t);
}

}  // namespace offload_stress_test
}  // namespace kvbm
