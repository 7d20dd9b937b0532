// The one-call admission of kvbm/admission.h.

#include "kvbm/admission.h"

#include <utility>

#include "kvbm/error.h"

namespace kvbm {

std::optional<Admission> admit(KvBlockManager& kv, std::span<const SequenceHash> hashes,
                               std::size_t blocks_needed) {
  KVBM_CHECK(blocks_needed >= hashes.size(), "admit: blocks_needed (", blocks_needed,
             ") is less than the request's ", hashes.size(), " full blocks");
  KVBM_CHECK(blocks_needed <= kv.device().total_blocks(), "admit: blocks_needed (", blocks_needed,
             ") exceeds the G1 pool's ", kv.device().total_blocks(), " blocks");
  Admission out;
  if (!hashes.empty()) {
    OnboardHandle onboarding = kv.onboard(hashes);
    out.counts = onboarding.counts();  // waits for the copies
    out.prefix = onboarding.take_blocks();
  }
  auto fresh = kv.device().allocate_blocks(blocks_needed - out.prefix.size());
  if (!fresh) return std::nullopt;  // dropping `out` leaves the prefix cached in G1
  out.fresh = std::move(*fresh);
  return out;
}

std::optional<Admission> admit(KvBlockManager& kv, const TokenBlockSequence& seq) {
  const std::size_t tail = seq.tail_tokens().empty() ? 0 : 1;
  return admit(kv, seq.sequence_hashes(), seq.num_blocks() + tail);
}

}  // namespace kvbm
