// fuzz/kv_event_decoder_fuzz.cpp: the KV event decoder
// (include/kvbm/events/kv_event_decoder.h).
//
// Input: the payload of one published batch, any bytes.
//
// Invariants:
//   * decode_kv_event_batch() returns a batch or throws DecodeError, nothing
//     else (no crash, no read outside the input, no other exception), and
//     DecodeError's message starts "KV event batch" and its kind is kCorrupt;
//   * decoding is deterministic: the same batch (or the same error), and the
//     same count of skipped events;
//   * a decoded batch round-trips: encoded again in either layout it decodes
//     to itself (media are canonical already, so nothing changes twice).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "fuzz_check.h"
#include "kvbm/events/kv_event.h"
#include "kvbm/events/kv_event_decoder.h"

namespace {

using kvbm::events::DecodeError;
using kvbm::events::KvEventBatch;
using kvbm::events::KvEventDecodeStats;

struct Outcome {
  bool ok = false;
  KvEventBatch batch;
  std::string error;
  std::uint64_t skipped = 0;
};

Outcome run(std::span<const std::uint8_t> payload) {
  Outcome out;
  KvEventDecodeStats stats;
  try {
    out.batch = kvbm::events::decode_kv_event_batch(payload, stats);
    out.ok = true;
  } catch (const DecodeError& e) {
    out.error = e.what();
    KVBM_FUZZ_CHECK(out.error.rfind("KV event batch", 0) == 0,
                    "a DecodeError's message starts with \"KV event batch\"");
    KVBM_FUZZ_CHECK(e.kind() == kvbm::ErrorKind::kCorrupt, "a DecodeError is of kind kCorrupt");
  } catch (...) {
    KVBM_FUZZ_CHECK(false, "decode_kv_event_batch threw something other than DecodeError");
  }
  out.skipped = stats.skipped_events;
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> payload(data, size);
  const Outcome first = run(payload);
  const Outcome again = run(payload);
  KVBM_FUZZ_CHECK(
      first.ok == again.ok && first.error == again.error && first.skipped == again.skipped,
      "decoding is deterministic");
  if (!first.ok) return 0;
  const bool nan = std::isnan(first.batch.ts);
  if (!nan) KVBM_FUZZ_CHECK(first.batch == again.batch, "decoding is deterministic");
  for (const auto layout : {kvbm::events::WireLayout::kArray, kvbm::events::WireLayout::kMap}) {
    const auto bytes = kvbm::events::encode_kv_event_batch(first.batch, layout);
    const Outcome back = run(bytes);
    KVBM_FUZZ_CHECK(back.ok, "a decoded batch, encoded again, decodes");
    KVBM_FUZZ_CHECK(back.skipped == 0, "kvbm's encoder writes only events it knows");
    if (!nan) KVBM_FUZZ_CHECK(back.batch == first.batch, "a decoded batch round-trips");
  }
  return 0;
}
