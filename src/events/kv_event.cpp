// src/events/kv_event.cpp: msgpack encoding of KV event batches (kvbm/events/kv_event.h).
//
// The layout follows vLLM's event structs field by field; docs/events.md lists
// it. Integers take msgpack's smallest form, the timestamp is always a float64,
// and hashes are unsigned (uint64 once they reach 2^63), as vLLM writes them.
// Every field vLLM declares without a default is written, nil or not (msgspec
// writes required fields always); of the fields vLLM declares with a default
// of None, extra_keys and locality are never written (what omit_defaults makes
// of a None), and the group fields (group_idx, kv_cache_spec_kind,
// kv_cache_spec_sliding_window) only when set.

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

// Writes `name` (map layout only) then, through `value`, its value.
template <class Value>
void pack_field(Packer& p, bool map, std::string_view name, Value&& value) {
  if (map) pack_str(p, name);
  value();
}

// The group fields present: the map layout writes the set ones (msgspec's
// omit_defaults leaves out each None), the array layout every one up to the
// last set one (it can only leave out a trailing run of defaults).
std::uint32_t group_fields(const BlockStored& e, bool map) {
  const bool set[] = {e.group_idx.has_value(), e.kv_cache_spec_kind.has_value(),
                      e.kv_cache_spec_sliding_window.has_value()};
  std::uint32_t n = 0;
  for (std::uint32_t i = 0; i < 3; ++i) {
    if (map) {
      n += set[i] ? 1 : 0;
    } else if (set[i]) {
      n = i + 1;
    }
  }
  return n;
}

void pack_optional_str(Packer& p, const std::optional<std::string>& value) {
  if (value) {
    pack_str(p, *value);
  } else {
    p.pack_nil();
  }
}

// The group fields after lora_name: extra_keys (nil; the array layout only,
// and only when a group field follows), group_idx, kv_cache_spec_kind,
// kv_cache_spec_sliding_window.
void pack_group(Packer& p, const BlockStored& e, bool map) {
  const std::uint32_t n = group_fields(e, map);
  if (n == 0) return;
  if (!map) {
    p.pack_nil();  // extra_keys
    if (n >= 1) pack_optional(p, e.group_idx);
    if (n >= 2) pack_optional_str(p, e.kv_cache_spec_kind);
    if (n >= 3) pack_optional(p, e.kv_cache_spec_sliding_window);
    return;
  }
  if (e.group_idx) pack_field(p, map, "group_idx", [&] { p.pack(*e.group_idx); });
  if (e.kv_cache_spec_kind) {
    pack_field(p, map, "kv_cache_spec_kind", [&] { pack_str(p, *e.kv_cache_spec_kind); });
  }
  if (e.kv_cache_spec_sliding_window) {
    pack_field(p, map, "kv_cache_spec_sliding_window",
               [&] { p.pack(*e.kv_cache_spec_sliding_window); });
  }
}

// Each event's fields in vLLM's declaration order: the array layout writes the
// values only, the map layout a key before each value.
void pack_event(Packer& p, const BlockStored& e, WireLayout layout) {
  const bool map = layout == WireLayout::kMap;
  // type, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name,
  // then the group fields (and, in the array layout, extra_keys before them)
  const std::uint32_t group = group_fields(e, map);
  const std::uint32_t fields = 8 + group + (!map && group > 0 ? 1 : 0);
  if (map) {
    p.pack_map(fields);
    pack_str(p, "type");
  } else {
    p.pack_array(fields);
  }
  pack_str(p, "BlockStored");
  pack_field(p, map, "block_hashes", [&] { pack_ints(p, e.block_hashes); });
  pack_field(p, map, "parent_block_hash", [&] { pack_optional(p, e.parent_block_hash); });
  pack_field(p, map, "token_ids", [&] { pack_ints(p, e.token_ids); });
  pack_field(p, map, "block_size", [&] { p.pack(e.block_size); });
  pack_field(p, map, "lora_id", [&] { pack_optional(p, e.lora_id); });
  pack_field(p, map, "medium", [&] { pack_str(p, e.medium); });
  pack_field(p, map, "lora_name", [&] { p.pack_nil(); });
  pack_group(p, e, map);
}

void pack_event(Packer& p, const BlockRemoved& e, WireLayout layout) {
  const bool map = layout == WireLayout::kMap;
  // type, block_hashes, medium, then group_idx when set
  const std::uint32_t fields = e.group_idx ? 4 : 3;
  if (map) {
    p.pack_map(fields);
    pack_str(p, "type");
  } else {
    p.pack_array(fields);
  }
  pack_str(p, "BlockRemoved");
  pack_field(p, map, "block_hashes", [&] { pack_ints(p, e.block_hashes); });
  pack_field(p, map, "medium", [&] { pack_str(p, e.medium); });
  if (e.group_idx) pack_field(p, map, "group_idx", [&] { p.pack(*e.group_idx); });
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
