// src/transfer/bounce_engine.cpp: BounceTransferEngine. See kvbm/transfer/bounce_engine.h.

#include "kvbm/transfer/bounce_engine.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "kvbm/detail/mutex.h"
#include "kvbm/detail/worker.h"
#include "kvbm/error.h"

namespace kvbm {

struct BounceTransferEngine::Impl {
  struct Job {
    std::vector<TransferPair> pairs;
    std::shared_ptr<TransferCompletion> completion;
  };

  // One chunk of a batch: pairs [begin, end) staged in bounce blocks
  // [base, base + end - begin).
  struct Chunk {
    std::size_t begin = 0;
    std::size_t end = 0;
    BlockId base = 0;
    std::shared_ptr<TransferCompletion> hop1;
    std::shared_ptr<TransferCompletion> hop2;
    std::vector<std::size_t> hop2_index;  // batch index of each hop-2 pair

    Chunk() = default;
    Chunk(const Chunk&) = delete;
    Chunk& operator=(const Chunk&) = delete;
    // Whatever way the driver leaves a batch, the bounce blocks are free
    // again before the next batch reuses them.
    ~Chunk() {
      if (hop1) static_cast<void>(hop1->wait());
      if (hop2) static_cast<void>(hop2->wait());
    }
  };

  // The state of the batch being driven.
  struct Run {
    const std::vector<TransferPair>& pairs;
    std::vector<char> failed;
    std::optional<TransferError> error;  // the first hop error seen

    void fail(std::size_t i, const std::optional<TransferError>& why) {
      failed[i] = 1;
      if (!error && why) error = *why;
    }
  };

  Impl(TransferEngine& a, TransferEngine& b, BounceEngineOptions opts)
      : first(a), second(b), options(std::move(opts)) {}

  TransferEngine& first;
  TransferEngine& second;
  BounceEngineOptions options;
  std::unique_ptr<detail::Worker> worker;  // drives the batches, one at a time, in order

  // Hop 1: source blocks -> bounce blocks.
  void start_hop1(Run& run, Chunk& c) {
    std::vector<TransferPair> p;
    p.reserve(c.end - c.begin);
    for (std::size_t i = c.begin; i < c.end; ++i) {
      p.push_back(
          {run.pairs[i].src, static_cast<BlockId>(c.base + (i - c.begin)), run.pairs[i].hash});
    }
    c.hop1 = submit_or_refuse(first, p);  // a refused hop fails its pairs in start_hop2
  }

  // Waits for hop 1, then starts hop 2 (bounce -> destination) for the pairs
  // that made it.
  void start_hop2(Run& run, Chunk& c) {
    if (c.hop1) {
      const TransferOutcome& out = c.hop1->wait();
      for (const std::size_t f : out.failed) {
        if (f < c.end - c.begin) run.fail(c.begin + f, out.error);
      }
      c.hop1.reset();
    }
    std::vector<TransferPair> p;
    for (std::size_t i = c.begin; i < c.end; ++i) {
      if (run.failed[i] != 0) continue;
      p.push_back(
          {static_cast<BlockId>(c.base + (i - c.begin)), run.pairs[i].dst, run.pairs[i].hash});
      c.hop2_index.push_back(i);
    }
    if (p.empty()) return;
    c.hop2 = submit_or_refuse(second, p);  // a refused hop fails its pairs in finish_hop2
  }

  // Waits for hop 2; its bounce blocks are free afterwards.
  static void finish_hop2(Run& run, Chunk& c) {
    if (!c.hop2) return;
    const TransferOutcome& out = c.hop2->wait();
    for (const std::size_t f : out.failed) {
      if (f < c.hop2_index.size()) run.fail(c.hop2_index[f], out.error);
    }
    c.hop2.reset();
  }

  TransferOutcome execute(const std::vector<TransferPair>& pairs) {
    Run run{pairs, std::vector<char>(pairs.size(), 0), {}};
    const std::size_t slots = options.bounce_blocks >= 2 ? 2 : 1;
    const std::size_t per_chunk = options.bounce_blocks / slots;
    std::vector<Chunk> chunks((pairs.size() + per_chunk - 1) / per_chunk);
    for (std::size_t k = 0; k < chunks.size(); ++k) {
      chunks[k].begin = k * per_chunk;
      chunks[k].end = std::min(pairs.size(), (k + 1) * per_chunk);
      chunks[k].base = static_cast<BlockId>((k % slots) * per_chunk);
    }
    if (slots == 1) {
      for (Chunk& c : chunks) {
        start_hop1(run, c);
        start_hop2(run, c);
        finish_hop2(run, c);
      }
    } else {
      // Chunk k fills half k % 2 while chunk k - 1 drains the other half.
      for (std::size_t k = 0; k < chunks.size(); ++k) {
        if (k >= 2) finish_hop2(run, chunks[k - 2]);
        start_hop1(run, chunks[k]);
        if (k >= 1) start_hop2(run, chunks[k - 1]);
      }
      start_hop2(run, chunks.back());
      if (chunks.size() >= 2) finish_hop2(run, chunks[chunks.size() - 2]);
      finish_hop2(run, chunks.back());
    }
    TransferOutcome outcome;
    for (std::size_t i = 0; i < run.failed.size(); ++i) {
      if (run.failed[i] != 0) outcome.failed.push_back(i);
    }
    if (!outcome.failed.empty()) {
      outcome.error = run.error ? *run.error
                                : TransferError{ErrorKind::kInternal, 0,
                                                options.name + ": a transfer hop failed"};
    }
    return outcome;
  }

  void drive(Job& job) noexcept {
    TransferOutcome outcome;
    try {
      outcome = execute(job.pairs);
    } catch (const std::bad_alloc&) {
      // Out of memory while driving: whatever ran, nothing is trusted. The
      // hops' own completions were waited for or are owned by the engines.
      // (Nothing else can throw here: a hop's submit goes through
      // submit_or_refuse, and the rest only allocates.)
      outcome = TransferOutcome::all_failed_no_memory(
          job.pairs.size(), "bounce engine: out of memory while driving the batch");
    }
    job.completion->complete(std::move(outcome));
  }
};

BounceTransferEngine::BounceTransferEngine(TransferEngine& first, TransferEngine& second,
                                           BounceEngineOptions options) {
  KVBM_CHECK(options.bounce_blocks > 0, "BounceTransferEngine '", options.name,
             "': bounce_blocks must be > 0 (2 or more lets the hops overlap)");
  KVBM_CHECK(options.src_blocks > 0 && options.dst_blocks > 0, "BounceTransferEngine '",
             options.name,
             "': src_blocks and dst_blocks must be the sizes of the source and "
             "destination layouts (> 0)");
  KVBM_CHECK(!options.name.empty(), "BounceTransferEngine: options.name must not be empty");
  impl_ = std::make_unique<Impl>(first, second, std::move(options));
  impl_->worker = std::make_unique<detail::Worker>("bounce engine '" + impl_->options.name + "'");
}

BounceTransferEngine::~BounceTransferEngine() {
  if (impl_ && impl_->worker) impl_->worker->stop();  // every accepted batch completes first
}

std::string_view BounceTransferEngine::name() const noexcept { return impl_->options.name; }

std::shared_ptr<TransferCompletion> BounceTransferEngine::submit(
    std::span<const TransferPair> pairs) {
  Impl& im = *impl_;
  check_batch(im.options.name, pairs, im.options.src_blocks, im.options.dst_blocks);
  Impl::Job job{std::vector<TransferPair>(pairs.begin(), pairs.end()),
                std::make_shared<TransferCompletion>()};
  auto completion = job.completion;
  const bool posted = im.worker->post([&im, job = std::move(job)]() mutable { im.drive(job); });
  KVBM_CHECK(posted, "BounceTransferEngine '", im.options.name,
             "': submit() after the engine began to shut down");
  return completion;
}

}  // namespace kvbm
