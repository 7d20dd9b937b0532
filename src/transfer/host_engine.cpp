#include "kvbm/transfer/host_engine.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "kvbm/detail/worker.h"
#include "kvbm/error.h"
#include "kvbm/transfer/transfer_metrics.h"

namespace kvbm {
namespace {

constexpr std::size_t kMaxThreads = HostEngineOptions::kMaxThreads;
/// Pieces of a split batch start at multiples of this many bytes into the batch.
constexpr std::size_t kSplitGranule = 4096;

/// One submitted batch: its copies and what to signal when they are done.
struct Batch {
  std::vector<CopyOp> ops;
  std::shared_ptr<TransferCompletion> completion;
  std::atomic<std::size_t> pieces_left{0};
  std::size_t pairs = 0;
  std::size_t bytes = 0;
};

/// A byte range of a batch's ops: from offset `begin_off` of op `begin_op` up
/// to (not including) offset `end_off` of op `end_op`.
struct Piece {
  std::shared_ptr<Batch> batch;
  std::size_t begin_op = 0;
  std::size_t begin_off = 0;
  std::size_t end_op = 0;
  std::size_t end_off = 0;
};

}  // namespace

struct HostTransferEngine::Impl {
  Impl(Layout s, Layout d, HostEngineOptions o)
      : src(std::move(s)), dst(std::move(d)), options(std::move(o)) {}

  const Layout src;
  const Layout dst;
  const HostEngineOptions options;
  std::unique_ptr<TransferMetrics> metrics;

  // The copy threads; the destructor's stop() lets every accepted piece run.
  std::unique_ptr<detail::Worker> workers;

  void run(const Piece& piece) const noexcept;
  void execute(const Piece& piece) const noexcept;
  void finish(Batch& batch) const noexcept;
};

void HostTransferEngine::Impl::run(const Piece& piece) const noexcept {
  execute(piece);
  if (piece.batch->pieces_left.fetch_sub(1, std::memory_order_acq_rel) == 1) finish(*piece.batch);
}

void HostTransferEngine::Impl::execute(const Piece& piece) const noexcept {
  const std::vector<CopyOp>& ops = piece.batch->ops;
  const HostCopyFn copy = options.copy;
  const std::size_t last = std::min(piece.end_op, ops.size() - 1);
  for (std::size_t i = piece.begin_op; i <= last; ++i) {
    const CopyOp& op = ops[i];
    const std::size_t from = i == piece.begin_op ? piece.begin_off : 0;
    const std::size_t to = i == piece.end_op ? piece.end_off : op.size;
    if (to <= from) continue;
    auto* d = reinterpret_cast<void*>(op.dst + from);
    const auto* s = reinterpret_cast<const void*>(op.src + from);
    if (copy == nullptr) {
      std::memcpy(d, s, to - from);
    } else {
      copy(d, s, to - from);
    }
  }
}

void HostTransferEngine::Impl::finish(Batch& batch) const noexcept {
  if (metrics) metrics->add(batch.pairs, batch.bytes, 0);
  // Drop the plan before signalling: a waiter may free the memory right away.
  std::vector<CopyOp>().swap(batch.ops);
  auto completion = std::move(batch.completion);
  completion->complete(TransferOutcome{});
}

HostTransferEngine::HostTransferEngine(Layout src, Layout dst, HostEngineOptions options) {
  KVBM_CHECK(src.config() == dst.config(), "HostTransferEngine '", options.name,
             "': the source and destination layouts have different LayoutConfigs; blocks must "
             "have the same shape on both sides");
  KVBM_CHECK(!options.name.empty(), "HostTransferEngine: options.name must not be empty");
  KVBM_CHECK(options.min_bytes_per_thread > 0, "HostTransferEngine '", options.name,
             "': min_bytes_per_thread must be > 0");
  KVBM_CHECK(options.threads <= kMaxThreads, "HostTransferEngine '", options.name, "': threads (",
             options.threads, ") must be at most ", kMaxThreads, " (0 picks a default)");
  if (options.threads == 0) {
    const unsigned hw = std::thread::hardware_concurrency();
    options.threads = std::clamp<std::size_t>(hw, 1, 4);
  }
  impl_ = std::make_unique<Impl>(std::move(src), std::move(dst), std::move(options));
  Impl& impl = *impl_;
  if (impl.options.registry) {
    impl.metrics = std::make_unique<TransferMetrics>(impl.options.registry, impl.options.name);
  }
  impl.workers = std::make_unique<detail::Worker>("host engine '" + impl.options.name + "'",
                                                  impl.options.threads);
}

HostTransferEngine::~HostTransferEngine() { impl_->workers->stop(); }

std::string_view HostTransferEngine::name() const noexcept { return impl_->options.name; }
std::optional<TransferCounts> HostTransferEngine::counts() const noexcept {
  if (!impl_->metrics) return std::nullopt;
  return impl_->metrics->counts();
}
std::size_t HostTransferEngine::threads() const noexcept { return impl_->workers->threads(); }
const Layout& HostTransferEngine::src() const noexcept { return impl_->src; }
const Layout& HostTransferEngine::dst() const noexcept { return impl_->dst; }

std::shared_ptr<TransferCompletion> HostTransferEngine::submit(
    std::span<const TransferPair> pairs) {
  Impl& impl = *impl_;
  const std::string& name = impl.options.name;
  check_batch(name, pairs, impl.src.num_blocks(), impl.dst.num_blocks());
  std::vector<BlockId> src_ids(pairs.size());
  std::vector<BlockId> dst_ids(pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    src_ids[i] = pairs[i].src;
    dst_ids[i] = pairs[i].dst;
  }

  auto batch = std::make_shared<Batch>();
  plan_copies(impl.src, src_ids, impl.dst, dst_ids, batch->ops);
  batch->pairs = pairs.size();
  batch->bytes = pairs.size() * impl.src.config().block_bytes();
  auto completion = std::make_shared<TransferCompletion>();
  batch->completion = completion;

  // Split by bytes: as many pieces as workers, so far as each gets at least
  // min_bytes_per_thread; piece boundaries at multiples of kSplitGranule.
  const std::size_t total = batch->bytes;
  const std::size_t wanted = std::clamp<std::size_t>(total / impl.options.min_bytes_per_thread, 1,
                                                     impl.workers->threads());
  std::size_t chunk = (total + wanted - 1) / wanted;
  chunk = (chunk + kSplitGranule - 1) / kSplitGranule * kSplitGranule;

  std::vector<Piece> pieces;
  pieces.reserve(wanted);
  {
    Piece cur{batch, 0, 0, 0, 0};
    std::size_t room = chunk;  // bytes the current piece may still take
    const std::vector<CopyOp>& ops = batch->ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      std::size_t off = 0;
      while (ops[i].size - off > room) {  // the piece ends inside op i
        off += room;
        cur.end_op = i;
        cur.end_off = off;
        pieces.push_back(cur);
        cur = Piece{batch, i, off, 0, 0};
        room = chunk;
      }
      room -= ops[i].size - off;
    }
    cur.end_op = ops.size() - 1;
    cur.end_off = ops.back().size;
    if (cur.begin_op < cur.end_op || cur.begin_off < cur.end_off) pieces.push_back(cur);
  }
  batch->pieces_left.store(pieces.size(), std::memory_order_relaxed);
  for (auto& p : pieces) {
    impl.workers->post([&impl, piece = std::move(p)] { impl.run(piece); });
  }
  return completion;
}

}  // namespace kvbm
