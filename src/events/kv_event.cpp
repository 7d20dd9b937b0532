// src/events/kv_event.cpp: msgpack encoding of KV event batches (kvbm/events/kv_event.h).
//
// The layout follows vLLM's event structs field by field; docs/events.md lists
// it. Integers take msgpack's smallest form, the timestamp is always a float64,
// and hashes are unsigned (uint64 once they reach 2^63), as vLLM writes them.
// Every field vLLM declares without a default is written, nil or not (msgspec
// writes required fields always); the fields vLLM declares with a default of
// None (extra_keys, group_idx, the cache-spec fields, locality) are never
// written, which is what omit_defaults makes of them when they are None.

#include "kvbm/events/kv_event.h"

#include <bit>
#include <msgpack.hpp>
#include <string_view>

namespace kvbm::events {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void pack_str(Packer& p, std::string_view s) {
  p.pack_str(static_cast<std::uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
}

// Always a float64, as vLLM writes its timestamps: msgpack-cxx's pack_double
// would write a whole number as an integer.
void pack_float64(msgpack::sbuffer& buffer, double value) {
  std::uint64_t bits = std::bit_cast<std::uint64_t>(value);
  char out[9];
  out[0] = static_cast<char>(0xcb);
  for (int i = 8; i >= 1; --i) {
    out[i] = static_cast<char>(bits & 0xffU);
    bits >>= 8;
  }
  buffer.write(out, sizeof(out));
}

template <class Int>
void pack_ints(Packer& p, const std::vector<Int>& values) {
  p.pack_array(static_cast<std::uint32_t>(values.size()));
  for (const Int v : values) p.pack(v);
}

template <class Int>
void pack_optional(Packer& p, const std::optional<Int>& value) {
  if (value) {
    p.pack(*value);
  } else {
    p.pack_nil();
  }
}

// Each event's fields in vLLM's declaration order: the array layout writes the
// values only, the map layout a key before each value.
void pack_event(Packer& p, const BlockStored& e, WireLayout layout) {
  const bool map = layout == WireLayout::kMap;
  // type, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name
  constexpr std::uint32_t kFields = 8;
  if (map) {
    p.pack_map(kFields);
    pack_str(p, "type");
  } else {
    p.pack_array(kFields);
  }
  pack_str(p, "BlockStored");
  if (map) pack_str(p, "block_hashes");
  pack_ints(p, e.block_hashes);
  if (map) pack_str(p, "parent_block_hash");
  pack_optional(p, e.parent_block_hash);
  if (map) pack_str(p, "token_ids");
  pack_ints(p, e.token_ids);
  if (map) pack_str(p, "block_size");
  p.pack(e.block_size);
  if (map) pack_str(p, "lora_id");
  pack_optional(p, e.lora_id);
  if (map) pack_str(p, "medium");
  pack_str(p, e.medium);
  if (map) pack_str(p, "lora_name");
  p.pack_nil();
}

void pack_event(Packer& p, const BlockRemoved& e, WireLayout layout) {
  const bool map = layout == WireLayout::kMap;
  constexpr std::uint32_t kFields = 3;  // type, block_hashes, medium
  if (map) {
    p.pack_map(kFields);
    pack_str(p, "type");
  } else {
    p.pack_array(kFields);
  }
  pack_str(p, "BlockRemoved");
  if (map) pack_str(p, "block_hashes");
  pack_ints(p, e.block_hashes);
  if (map) pack_str(p, "medium");
  pack_str(p, e.medium);
}

void pack_event(Packer& p, const AllBlocksCleared& /*e*/, WireLayout layout) {
  if (layout == WireLayout::kMap) {
    p.pack_map(1);
    pack_str(p, "type");
  } else {
    p.pack_array(1);
  }
  pack_str(p, "AllBlocksCleared");
}

}  // namespace

std::vector<std::uint8_t> encode_kv_event_batch(const KvEventBatch& batch, WireLayout layout) {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  // [ts, events, data_parallel_rank]: the batch is positional in both layouts
  // (vLLM keeps array_like on its EventBatch). An unset rank is left out, as
  // msgspec's omit_defaults leaves out a trailing default of an array_like struct.
  p.pack_array(batch.data_parallel_rank ? 3 : 2);
  pack_float64(buffer, batch.ts);
  p.pack_array(static_cast<std::uint32_t>(batch.events.size()));
  for (const KvEvent& event : batch.events) {
    std::visit([&](const auto& e) { pack_event(p, e, layout); }, event);
  }
  if (batch.data_parallel_rank) p.pack(*batch.data_parallel_rank);
  const auto* data = reinterpret_cast<const std::uint8_t*>(buffer.data());
  return {data, data + buffer.size()};
}

}  // namespace kvbm::events
