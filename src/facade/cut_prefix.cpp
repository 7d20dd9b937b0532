// src/facade/cut_prefix.cpp: the prefix a cut onboarding hands back (facade/cut_prefix.h).

#include "facade/cut_prefix.h"

#include <exception>
#include <utility>

#include "kvbm/blocks/release_order.h"
#include "kvbm/transfer/stage_and_register.h"

namespace kvbm::facade {

void CutPrefix::take(OnboardRecords& records, std::size_t k) {
  blocks_.resize(k);
  from_.reserve(k);
  for (std::size_t i = 0; i < k; ++i) {
    OnboardRecord& r = records[i];
    from_.push_back(r.from);
    if (r.block) {
      blocks_[i] = std::move(*r.block);
      r.block.reset();
    } else if (r.target) {
      targets_.push_back(std::move(*r.target));
      r.target.reset();
      hashes_.push_back(r.hash);
      at_.push_back(i);
    }
  }
}

std::vector<ImmutableBlock<G1>> CutPrefix::register_in(BlockManager<G1>& g1,
                                                       TierArray<std::size_t>& per_tier,
                                                       std::vector<TierId>& origins) noexcept {
  const std::size_t copies = targets_.size();
  try {
    std::vector<CompleteBlock<G1>> staged;
    std::vector<std::size_t> at;
    for (std::size_t j = 0; j < copies; ++j) {
      auto s = std::move(targets_[j]).stage(hashes_[j], g1.block_size());
      if (!s.ok()) continue;
      staged.push_back(std::move(s).value());
      at.push_back(at_[j]);
    }
    auto registered = g1.register_copies(std::move(staged));
    for (std::size_t j = 0; j < registered.size(); ++j) blocks_[at[j]] = std::move(registered[j]);
  } catch (const std::exception& e) {
    detail::log_unregistered_copies(tier_name<G1>(), copies, e.what());
  }
  targets_.clear();
  std::vector<ImmutableBlock<G1>> out;
  std::vector<ImmutableBlock<G1>> after_gap;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    if (!blocks_[i]) continue;
    if (out.size() < i) {
      after_gap.push_back(std::move(*blocks_[i]));
      continue;
    }
    out.push_back(std::move(*blocks_[i]));
    origins.push_back(from_[i]);
    ++per_tier[from_[i]];
  }
  blocks_.clear();
  release_tail_first(after_gap);
  return out;
}

}  // namespace kvbm::facade
