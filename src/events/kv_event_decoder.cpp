// src/events/kv_event_decoder.cpp: kvbm/events/kv_event_decoder.h.
//
// msgpack-cxx parses the payload into an object tree under limits derived
// from the payload's size (an element takes at least one byte, so no array,
// map or string can be longer than the payload), which bounds what a hostile
// header can make it allocate; the walk below then reads only the fields it
// knows, checking every type, and never indexes past a size it was given.

#include "kvbm/events/kv_event_decoder.h"

#include <algorithm>
#include <limits>
#include <msgpack.hpp>
#include <optional>
#include <string_view>
#include <utility>

namespace kvbm::events {

DecodeError::DecodeError(std::string where, const std::string& problem)
    : RuntimeError(ErrorKind::kCorrupt, 0,
                   "KV event batch: " + (where.empty() ? std::string() : where + ": ") + problem),
      where_(std::move(where)) {}

std::string canonical_medium(std::string medium) {
  if (medium.empty()) return kMediumGpu;
  if (medium == kMediumDiskLegacy) return kMediumDisk;
  return medium;
}

namespace {

using msgpack::object;
namespace type = msgpack::type;

/// Deepest nesting accepted; vLLM's deepest is four (batch, events, event,
/// extra_keys entry) plus what an unknown field may hold.
constexpr std::size_t kMaxDepth = 32;

const char* type_name(const object& o) {
  switch (o.type) {
    case type::NIL:
      return "nil";
    case type::BOOLEAN:
      return "a boolean";
    case type::POSITIVE_INTEGER:
      return "a non-negative integer";
    case type::NEGATIVE_INTEGER:
      return "a negative integer";
    case type::FLOAT32:
    case type::FLOAT64:
      return "a float";
    case type::STR:
      return "a string";
    case type::BIN:
      return "bytes";
    case type::ARRAY:
      return "an array";
    case type::MAP:
      return "a map";
    case type::EXT:
      return "an extension value";
  }
  return "an unknown msgpack type";
}

[[noreturn]] void fail(std::string where, const std::string& problem) {
  throw DecodeError(std::move(where), problem);
}

[[noreturn]] void wrong_type(std::string where, const char* expected, const object& o) {
  fail(std::move(where), std::string("expected ") + expected + ", got " + type_name(o));
}

std::string indexed(const std::string& where, std::size_t i) {
  return where + "[" + std::to_string(i) + "]";
}

std::string field(const std::string& where, std::string_view name) {
  return where.empty() ? std::string(name) : where + "." + std::string(name);
}

std::string_view str_of(const object& o) { return {o.via.str.ptr, o.via.str.size}; }

/// A block hash: an integer of either sign, or bytes (see the header).
std::uint64_t block_hash(const object& o, const std::string& where) {
  switch (o.type) {
    case type::POSITIVE_INTEGER:
      return o.via.u64;
    case type::NEGATIVE_INTEGER:
      return static_cast<std::uint64_t>(o.via.i64);
    case type::BIN: {
      std::uint64_t v = 0;
      const auto* p = reinterpret_cast<const std::uint8_t*>(o.via.bin.ptr);
      const std::uint32_t n = o.via.bin.size;
      for (std::uint32_t i = n > 8 ? n - 8 : 0; i < n; ++i) v = (v << 8) | p[i];
      return v;
    }
    default:
      wrong_type(where, "an integer or bytes (a block hash)", o);
  }
}

std::vector<std::uint64_t> block_hashes(const object& o, const std::string& where) {
  if (o.type != type::ARRAY) wrong_type(where, "an array of block hashes", o);
  std::vector<std::uint64_t> out;
  out.reserve(o.via.array.size);
  for (std::uint32_t i = 0; i < o.via.array.size; ++i) {
    out.push_back(block_hash(o.via.array.ptr[i], indexed(where, i)));
  }
  return out;
}

std::optional<std::uint64_t> parent_hash(const object& o, const std::string& where) {
  if (o.type == type::NIL) return std::nullopt;
  return block_hash(o, where);
}

std::uint64_t unsigned_int(const object& o, const std::string& where, std::uint64_t max,
                           const char* what) {
  if (o.type != type::POSITIVE_INTEGER) wrong_type(where, what, o);
  if (o.via.u64 > max) {
    fail(where, std::string(what) + " out of range: " + std::to_string(o.via.u64));
  }
  return o.via.u64;
}

std::int64_t signed_int(const object& o, const std::string& where, const char* what) {
  if (o.type == type::NEGATIVE_INTEGER) return o.via.i64;
  if (o.type == type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      fail(where, std::string(what) + " out of range: " + std::to_string(o.via.u64));
    }
    return static_cast<std::int64_t>(o.via.u64);
  }
  wrong_type(where, what, o);
}

std::vector<std::uint32_t> token_ids(const object& o, const std::string& where) {
  if (o.type != type::ARRAY) wrong_type(where, "an array of token ids", o);
  std::vector<std::uint32_t> out;
  out.reserve(o.via.array.size);
  for (std::uint32_t i = 0; i < o.via.array.size; ++i) {
    out.push_back(static_cast<std::uint32_t>(unsigned_int(
        o.via.array.ptr[i], indexed(where, i), std::numeric_limits<std::uint32_t>::max(),
        "a token id (an unsigned 32-bit integer)")));
  }
  return out;
}

std::string medium(const object& o, const std::string& where) {
  if (o.type == type::NIL) return kMediumGpu;
  if (o.type != type::STR) wrong_type(where, "a string or nil (the medium)", o);
  return canonical_medium(std::string(str_of(o)));
}

std::optional<std::int64_t> lora_id(const object& o, const std::string& where) {
  if (o.type == type::NIL) return std::nullopt;
  return signed_int(o, where, "an integer or nil (the LoRA id)");
}

/// An optional unsigned 32-bit field (group_idx, the sliding window): nil is unset.
std::optional<std::uint32_t> optional_u32(const object& o, const std::string& where,
                                          const char* what) {
  if (o.type == type::NIL) return std::nullopt;
  return static_cast<std::uint32_t>(
      unsigned_int(o, where, std::numeric_limits<std::uint32_t>::max(), what));
}

std::optional<std::string> optional_str(const object& o, const std::string& where,
                                        const char* what) {
  if (o.type == type::NIL) return std::nullopt;
  if (o.type != type::STR) wrong_type(where, what, o);
  return std::string(str_of(o));
}

/// An event's fields, whether they came by position or by name. Each setter
/// takes the value object and the path of the field.
struct StoredFields {
  BlockStored e;
  bool have_hashes = false;

  void set(std::string_view name, const object& v, const std::string& where) {
    if (name == "block_hashes") {
      e.block_hashes = block_hashes(v, where);
      have_hashes = true;
    } else if (name == "parent_block_hash") {
      e.parent_block_hash = parent_hash(v, where);
    } else if (name == "token_ids") {
      e.token_ids = token_ids(v, where);
    } else if (name == "block_size") {
      e.block_size = static_cast<std::uint32_t>(unsigned_int(
          v, where, std::numeric_limits<std::uint32_t>::max(), "an unsigned 32-bit block size"));
    } else if (name == "lora_id") {
      e.lora_id = lora_id(v, where);
    } else if (name == "medium") {
      e.medium = medium(v, where);
    } else if (name == "group_idx") {
      e.group_idx = optional_u32(v, where, "an unsigned 32-bit integer or nil (the group)");
    } else if (name == "kv_cache_spec_kind") {
      e.kv_cache_spec_kind = optional_str(v, where, "a string or nil (the group's kind)");
    } else if (name == "kv_cache_spec_sliding_window") {
      e.kv_cache_spec_sliding_window =
          optional_u32(v, where, "an unsigned 32-bit integer or nil (the sliding window)");
    }  // lora_name, extra_keys and everything vLLM added later: ignored
  }
};

struct RemovedFields {
  BlockRemoved e;
  bool have_hashes = false;

  void set(std::string_view name, const object& v, const std::string& where) {
    if (name == "block_hashes") {
      e.block_hashes = block_hashes(v, where);
      have_hashes = true;
    } else if (name == "medium") {
      e.medium = medium(v, where);
    } else if (name == "group_idx") {
      e.group_idx = optional_u32(v, where, "an unsigned 32-bit integer or nil (the group)");
    }
  }
};

// The positional order of vLLM's fields after the class name.
constexpr std::string_view kStoredOrder[] = {"block_hashes",
                                             "parent_block_hash",
                                             "token_ids",
                                             "block_size",
                                             "lora_id",
                                             "medium",
                                             "lora_name",
                                             "extra_keys",
                                             "group_idx",
                                             "kv_cache_spec_kind",
                                             "kv_cache_spec_sliding_window"};
constexpr std::string_view kRemovedOrder[] = {"block_hashes", "medium", "group_idx"};

template <class Fields, std::size_t N>
void read_positional(Fields& f, const object& o, const std::string& where,
                     const std::string_view (&order)[N]) {
  const std::uint32_t n = o.via.array.size;
  for (std::size_t i = 0; i < N && i + 1 < n; ++i) {
    f.set(order[i], o.via.array.ptr[i + 1], field(where, order[i]));
  }
}

template <class Fields>
void read_named(Fields& f, const object& o, const std::string& where) {
  for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
    const auto& kv = o.via.map.ptr[i];
    if (kv.key.type != type::STR) continue;  // not a field vLLM writes: ignored
    const std::string_view name = str_of(kv.key);
    f.set(name, kv.val, field(where, name));
  }
}

/// Returns the event, or nullopt for a class kvbm does not know.
std::optional<KvEvent> read_event(const object& o, const std::string& where) {
  const bool positional = o.type == type::ARRAY;
  std::string_view tag;
  if (positional) {
    if (o.via.array.size == 0) fail(where, "an empty array, where an event was expected");
    const object& t = o.via.array.ptr[0];
    if (t.type != type::STR) wrong_type(indexed(where, 0), "a string (the event's class)", t);
    tag = str_of(t);
  } else if (o.type == type::MAP) {
    const object* t = nullptr;
    for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      if (kv.key.type == type::STR && str_of(kv.key) == "type") t = &kv.val;
    }
    if (t == nullptr) fail(where, "a map event without a \"type\" key");
    if (t->type != type::STR) wrong_type(field(where, "type"), "a string (the event's class)", *t);
    tag = str_of(*t);
  } else {
    wrong_type(where, "an event (an array or a map)", o);
  }

  if (tag == "BlockStored") {
    StoredFields f;
    f.e.medium = kMediumGpu;
    if (positional) {
      read_positional(f, o, where, kStoredOrder);
    } else {
      read_named(f, o, where);
    }
    if (!f.have_hashes) fail(where, "a BlockStored without block_hashes");
    return KvEvent(std::move(f.e));
  }
  if (tag == "BlockRemoved") {
    RemovedFields f;
    f.e.medium = kMediumGpu;
    if (positional) {
      read_positional(f, o, where, kRemovedOrder);
    } else {
      read_named(f, o, where);
    }
    if (!f.have_hashes) fail(where, "a BlockRemoved without block_hashes");
    return KvEvent(std::move(f.e));
  }
  if (tag == "AllBlocksCleared") return KvEvent(AllBlocksCleared{});
  return std::nullopt;
}

double timestamp(const object& o) {
  switch (o.type) {
    case type::FLOAT32:
    case type::FLOAT64:
      return o.via.f64;
    case type::POSITIVE_INTEGER:
      return static_cast<double>(o.via.u64);
    case type::NEGATIVE_INTEGER:
      return static_cast<double>(o.via.i64);
    default:
      wrong_type("ts", "a number (seconds since the epoch)", o);
  }
}

std::optional<std::int32_t> rank(const object& o, const std::string& where) {
  if (o.type == type::NIL) return std::nullopt;
  const std::int64_t v = signed_int(o, where, "an integer or nil (the data-parallel rank)");
  if (v < std::numeric_limits<std::int32_t>::min() ||
      v > std::numeric_limits<std::int32_t>::max()) {
    fail(where, "the data-parallel rank is out of range: " + std::to_string(v));
  }
  return static_cast<std::int32_t>(v);
}

void read_events(const object& o, KvEventBatch& batch, KvEventDecodeStats& stats) {
  if (o.type != type::ARRAY) wrong_type("events", "an array of events", o);
  batch.events.reserve(o.via.array.size);
  for (std::uint32_t i = 0; i < o.via.array.size; ++i) {
    if (auto e = read_event(o.via.array.ptr[i], indexed("events", i))) {
      batch.events.push_back(std::move(*e));
    } else {
      ++stats.skipped_events;
    }
  }
}

KvEventBatch read_batch(const object& top, KvEventDecodeStats& stats) {
  KvEventBatch batch;
  if (top.type == type::ARRAY) {
    const std::uint32_t n = top.via.array.size;
    if (n < 2)
      fail("", "a batch array of " + std::to_string(n) + " elements; expected [ts, events, rank]");
    batch.ts = timestamp(top.via.array.ptr[0]);
    read_events(top.via.array.ptr[1], batch, stats);
    if (n >= 3) batch.data_parallel_rank = rank(top.via.array.ptr[2], "data_parallel_rank");
  } else if (top.type == type::MAP) {
    const object* ts = nullptr;
    const object* events = nullptr;
    for (std::uint32_t i = 0; i < top.via.map.size; ++i) {
      const auto& kv = top.via.map.ptr[i];
      if (kv.key.type != type::STR) continue;
      const std::string_view name = str_of(kv.key);
      if (name == "ts") {
        ts = &kv.val;
      } else if (name == "events") {
        events = &kv.val;
      } else if (name == "data_parallel_rank" || name == "dp_rank") {
        batch.data_parallel_rank = rank(kv.val, std::string(name));
      }
    }
    if (ts == nullptr) fail("", "a batch map without \"ts\"");
    if (events == nullptr) fail("", "a batch map without \"events\"");
    batch.ts = timestamp(*ts);
    read_events(*events, batch, stats);
  } else {
    wrong_type("", "a batch (an array or a map)", top);
  }
  return batch;
}

}  // namespace

KvEventBatch decode_kv_event_batch(std::span<const std::uint8_t> payload,
                                   KvEventDecodeStats& stats) {
  if (payload.empty()) fail("", "the payload is empty");
  const std::size_t n = payload.size();
  // No container or string can be longer than the payload: limits that bound
  // what a lying length header can make the parser allocate.
  const msgpack::unpack_limit limit(n, n / 2 + 1, n, n, n, kMaxDepth);
  std::size_t offset = 0;
  msgpack::object_handle handle;
  try {
    handle = msgpack::unpack(reinterpret_cast<const char*>(payload.data()), n, offset, nullptr,
                             nullptr, limit);
  } catch (const msgpack::insufficient_bytes&) {
    fail("", "truncated: the msgpack value needs more than the payload's " + std::to_string(n) +
                 " bytes");
  } catch (const msgpack::unpack_error& e) {
    fail("", std::string("not valid msgpack (") + e.what() + ")");
  } catch (const std::bad_alloc&) {
    fail("", "not valid msgpack (a length beyond what the payload can hold)");
  }
  if (offset != n) {
    fail("", std::to_string(n - offset) + " bytes after the batch's msgpack value");
  }
  return read_batch(handle.get(), stats);
}

KvEventBatch decode_kv_event_batch(std::span<const std::uint8_t> payload) {
  KvEventDecodeStats stats;
  return decode_kv_event_batch(payload, stats);
}

}  // namespace kvbm::events
