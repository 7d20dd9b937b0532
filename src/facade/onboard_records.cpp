// src/facade/onboard_records.cpp: an onboarding's records (facade/onboard_records.h).

#include "facade/onboard_records.h"

#include <utility>

#include "kvbm/blocks/release_order.h"

namespace kvbm::facade {

OnboardRecords& OnboardRecords::operator=(OnboardRecords&& other) noexcept {
  if (this != &other) {
    release();
    records_ = std::move(other.records_);
    holds_ = std::move(other.holds_);
    other.records_.clear();
    other.holds_.clear();
  }
  return *this;
}

void OnboardRecords::add_hits(std::span<const SequenceHash> hashes,
                              std::vector<ImmutableBlock<G1>>&& blocks) {
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    OnboardRecord& r = records_.emplace_back();
    r.hash = hashes[k];
    r.block = std::move(blocks[k]);
  }
  blocks.clear();
}

void OnboardRecords::add_taken(std::span<const SequenceHash> hashes, TierId from, Taken&& taken) {
  if (taken.ids.empty()) return;  // its Hold (if any) holds nothing
  for (std::size_t k = 0; k < taken.ids.size(); ++k) {
    OnboardRecord& r = records_.emplace_back();
    r.hash = hashes[k];
    r.from = from;
    r.at = taken.at;
    r.source = taken.ids[k];
    r.hold = holds_.size();
  }
  holds_.push_back(std::move(taken.hold));
}

void OnboardRecords::append(OnboardRecords&& more) {
  const std::size_t shift = holds_.size();
  records_.reserve(records_.size() + more.records_.size());
  for (auto& r : more.records_) {
    records_.push_back(std::move(r));
    records_.back().hold += shift;
  }
  for (auto& h : more.holds_) holds_.push_back(std::move(h));
  more.records_.clear();
  more.holds_.clear();
}

std::size_t OnboardRecords::below() const noexcept {
  std::size_t n = 0;
  for (const auto& r : records_) n += r.below() ? 1 : 0;
  return n;
}

void OnboardRecords::give_targets(std::vector<MutableBlock<G1>>&& targets) {
  std::size_t next = 0;
  for (std::size_t i = 0; i < records_.size(); ++i) {
    if (!records_[i].below()) continue;
    if (next == targets.size()) {
      keep_first(i);
      break;
    }
    records_[i].target = std::move(targets[next++]);
  }
  targets.clear();
}

void OnboardRecords::keep_first(std::size_t n) noexcept {
  if (n >= records_.size()) return;
  std::vector<std::size_t> keep(holds_.size(), 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (records_[i].below()) ++keep[records_[i].hold];
  }
  {
    detail::ReleaseBatch batch;
    for (std::size_t i = records_.size(); i > n; --i) {
      if (records_[i - 1].block) batch.add(*records_[i - 1].block);
    }
  }
  records_.erase(records_.begin() + static_cast<std::ptrdiff_t>(n), records_.end());
  // The Holds are in position order: those after the cut are the last ones.
  while (!holds_.empty() && keep[holds_.size() - 1] == 0) holds_.pop_back();
  for (std::size_t h = holds_.size(); h > 0; --h) {
    if (holds_[h - 1]) holds_[h - 1]->keep_first(keep[h - 1]);
  }
}

void OnboardRecords::release() noexcept {
  {
    detail::ReleaseBatch batch;
    for (std::size_t i = records_.size(); i > 0; --i) {
      if (records_[i - 1].block) batch.add(*records_[i - 1].block);
    }
  }
  records_.clear();  // the targets go back to the reset pool
  while (!holds_.empty()) holds_.pop_back();
}

}  // namespace kvbm::facade
