// kvbm/events/kv_event_decoder.h: reads KV event batches off the wire.
//
// decode_kv_event_batch() turns the msgpack payload of one published batch
// (the last frame of a ZeroMQ message, docs/events.md) back into a
// KvEventBatch. It reads what kvbm's encoder writes (kvbm/events/kv_event.h)
// in both layouts, and what vLLM publishes:
//
//   * the batch as an array [ts, events, data_parallel_rank?, ...] or as a
//     map {"ts", "events", "data_parallel_rank" (or "dp_rank")};
//   * each event as a positional array whose first element names its class,
//     or as a map whose "type" key does, in any key order;
//   * the group fields vLLM added for hybrid models (group_idx,
//     kv_cache_spec_kind, kv_cache_spec_sliding_window; a BlockRemoved's
//     group_idx), nil or absent when the publisher names no group;
//   * fields vLLM added that kvbm does not read (lora_name, extra_keys,
//     locality, ...): extra trailing elements and unknown keys are ignored;
//   * fields left out (a short array, a missing key): their defaults, nil
//     parent, no tokens, block_size 0, nil lora_id, medium "GPU";
//   * block hashes as unsigned or signed 64-bit integers (a negative one is
//     taken as its two's complement bits, as Dynamo's router does), or as
//     msgpack bin (vLLM's ExternalBlockHash is `bytes | int`): the bytes read
//     as a big-endian number, keeping its low 64 bits, which is vLLM's own
//     bytes-to-int conversion (int.from_bytes(b, "big") & (2**64 - 1)), so a
//     hash decodes to the same u64 whichever form the engine sent;
//   * the medium: nil, absent or "" mean "GPU" (vLLM publishes device events
//     so, Dynamo reads them so); the legacy "DISK" becomes kMediumDisk
//     ("STORAGE"); any other string is kept as sent.
//
// An event of a class kvbm does not know (vLLM may add more) is skipped and
// counted in KvEventDecodeStats::skipped_events. Anything else that does not
// fit throws DecodeError, whose message says what was wrong and where (the
// path into the batch, e.g. "events[2].block_hashes[0]"). The decoder never
// reads outside `payload`, and bounds what it allocates by the payload's size,
// so any bytes at all are safe to hand it (fuzz/kv_event_decoder_fuzz.cpp).
//
// An AllBlocksCleared carries no medium on the wire; its decoded medium is "".
//
// Thread-safety: pure functions; DecodeError is a value type.

#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kvbm/error.h"
#include "kvbm/events/kv_event.h"

namespace kvbm::events {

/// Thrown when a payload is not a KV event batch. A RuntimeError of kind
/// ErrorKind::kCorrupt: the bytes came from outside, not from a misuse of
/// the API. what() is "KV event batch: <where>: <what was wrong>".
class DecodeError : public RuntimeError {
 public:
  /// `where` is the path into the batch ("" for the payload as a whole).
  DecodeError(std::string where, const std::string& problem);
  /// Returns where the problem was: "events[2].block_hashes[0]", "ts", or ""
  /// for the payload as a whole.
  [[nodiscard]] const std::string& where() const noexcept { return where_; }

 private:
  std::string where_;
};

/// What decoding left out; counts add up over calls.
struct KvEventDecodeStats {
  std::uint64_t skipped_events = 0;  ///< events of a class kvbm does not know
};

/// Decodes one batch; see the file comment. Throws DecodeError.
[[nodiscard]] KvEventBatch decode_kv_event_batch(std::span<const std::uint8_t> payload);

/// As above, adding to `stats` what was skipped.
[[nodiscard]] KvEventBatch decode_kv_event_batch(std::span<const std::uint8_t> payload,
                                                 KvEventDecodeStats& stats);

/// Returns the canonical name of a wire medium: "GPU" for "" (nil or absent
/// decode to ""), kMediumDisk for the legacy "DISK", anything else unchanged.
[[nodiscard]] std::string canonical_medium(std::string medium);

}  // namespace kvbm::events
