// src/transfer/transfer_cost_estimator.cpp: a copy path's learned cost
// (kvbm/transfer/transfer_cost_estimator.h).

#include "kvbm/transfer/transfer_cost_estimator.h"

#include <algorithm>
#include <cmath>
#include <new>

#include "kvbm/error.h"

namespace kvbm {
namespace {

using std::chrono::nanoseconds;

// The nearest-rank quantile `q` of `v` (not empty); reorders `v`.
double quantile(std::vector<double>& v, double q) {
  const auto n = static_cast<double>(v.size());
  auto rank = static_cast<std::size_t>(std::ceil(q * n));
  rank = std::clamp<std::size_t>(rank, 1, v.size());
  auto at = v.begin() + static_cast<std::ptrdiff_t>(rank - 1);
  std::nth_element(v.begin(), at, v.end());
  return *at;
}

nanoseconds to_ns(double seconds) {
  return nanoseconds(static_cast<std::int64_t>(std::llround(std::max(0.0, seconds) * 1e9)));
}

// The line of the file comment through (blocks, seconds).
void fit_line(const std::vector<double>& b, const std::vector<double>& d, TransferCostModel& m) {
  const auto n = static_cast<double>(b.size());
  double sb = 0, sd = 0, sbb = 0, sbd = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    sb += b[i];
    sd += d[i];
    sbb += b[i] * b[i];
    sbd += b[i] * d[i];
  }
  const double mb = sb / n, md = sd / n;
  const double var = sbb - n * mb * mb;
  const bool one_size = var <= 1e-9 * std::max(1.0, sbb);
  if (!one_size) {
    m.per_block_s = (sbd - n * mb * md) / var;
    m.latency_s = md - m.per_block_s * mb;
    if (m.per_block_s < 0) {
      m.per_block_s = 0;
      m.latency_s = md;
      return;
    }
  }
  if (one_size || m.latency_s < 0) {
    m.latency_s = 0;
    m.per_block_s = sbb > 0 ? sbd / sbb : 0;
  }
}

}  // namespace

TransferCostPrediction TransferCostModel::predict(std::size_t blocks) const noexcept {
  if (!known) return {};
  if (blocks == 0) return {.known = true};
  const double line = latency_s + per_block_s * static_cast<double>(blocks);
  return {.known = true,
          .expected = to_ns(line * ratio_p50),
          .tail = to_ns(line * std::max(ratio_p50, ratio_p99))};
}

TransferCostEstimator::TransferCostEstimator(std::size_t window) : window_(window) {
  KVBM_CHECK(window >= 1, "TransferCostEstimator: the window must hold at least one batch");
}

void TransferCostEstimator::record(std::size_t blocks, std::size_t block_bytes,
                                   nanoseconds duration) noexcept {
  if (blocks == 0) return;
  const Sample sample{blocks, std::max<std::int64_t>(0, duration.count())};
  try {
    detail::LockGuard lock(mu_);
    Size& s = sizes_[block_bytes];
    if (s.ring.size() < window_) {
      s.ring.push_back(sample);
    } else {
      s.ring[s.next] = sample;
      s.next = (s.next + 1) % window_;
    }
    ++s.recorded;
    s.dirty = true;
  } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): the batch goes unmeasured
  }
}

// Refits `s` when a batch was recorded since the last fit.
const TransferCostSummary& TransferCostEstimator::refit(std::size_t block_bytes, Size& s) const {
  if (!s.dirty) return s.fitted;
  s.dirty = false;
  TransferCostSummary& out = s.fitted;
  out = TransferCostSummary{};
  out.block_bytes = block_bytes;
  out.batches = s.ring.size();
  out.recorded = s.recorded;
  if (s.ring.empty()) return out;
  std::vector<double> b, d;
  b.reserve(s.ring.size());
  d.reserve(s.ring.size());
  double blocks = 0, seconds = 0;
  for (const Sample& x : s.ring) {
    b.push_back(static_cast<double>(x.blocks));
    d.push_back(static_cast<double>(x.ns) * 1e-9);
    blocks += b.back();
    seconds += d.back();
  }
  TransferCostModel& m = out.model;
  m.known = true;
  fit_line(b, d, m);
  std::vector<double> ratios;
  ratios.reserve(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) {
    const double line = m.latency_s + m.per_block_s * b[i];
    ratios.push_back(line > 0 ? d[i] / line : 1.0);
  }
  m.ratio_p50 = quantile(ratios, 0.5);
  m.ratio_p99 = quantile(ratios, 0.99);
  out.bytes_per_second = seconds > 0 ? blocks * static_cast<double>(block_bytes) / seconds : 0.0;
  out.p50 = to_ns(quantile(d, 0.5));
  out.p99 = to_ns(quantile(d, 0.99));
  return out;
}

// The size's own model, else the busiest size's with its time per block
// scaled by the bytes.
TransferCostModel TransferCostEstimator::model_locked(std::size_t block_bytes) const {
  if (auto it = sizes_.find(block_bytes); it != sizes_.end()) {
    return refit(block_bytes, it->second).model;
  }
  std::pair<const std::size_t, Size>* busiest = nullptr;
  for (auto& entry : sizes_) {
    if (busiest == nullptr || entry.second.ring.size() > busiest->second.ring.size()) {
      busiest = &entry;
    }
  }
  if (busiest == nullptr) return {};
  TransferCostModel m = refit(busiest->first, busiest->second).model;
  if (busiest->first > 0) {
    m.per_block_s *= static_cast<double>(block_bytes) / static_cast<double>(busiest->first);
  }
  return m;
}

TransferCostModel TransferCostEstimator::model(std::size_t block_bytes) const {
  detail::LockGuard lock(mu_);
  return model_locked(block_bytes);
}

TransferCostPrediction TransferCostEstimator::predict(std::size_t blocks,
                                                      std::size_t block_bytes) const {
  return model(block_bytes).predict(blocks);
}

std::vector<TransferCostSummary> TransferCostEstimator::summary() const {
  detail::LockGuard lock(mu_);
  std::vector<TransferCostSummary> out;
  out.reserve(sizes_.size());
  for (auto& [bytes, s] : sizes_) out.push_back(refit(bytes, s));
  return out;
}

}  // namespace kvbm
