// tests/events/kv_events_test.cpp: the KV event publisher, its msgpack layout
// and the ZeroMQ sink.
//
// Payloads are checked two ways that do not go through kvbm's encoder: bytes
// written out by hand from the msgpack specification for small batches, and
// msgpack-cxx's decoder for the rest. The ZeroMQ tests subscribe with a real
// SUB socket (cppzmq) and skip when kvbm was built without ZeroMQ.

#include "kvbm/events/kv_events.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <msgpack.hpp>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "kvbm/config.h"
#include "kvbm/token_block.h"
#include "test_util.h"

#if KVBM_HAVE_ZMQ
#include <zmq.hpp>
#endif

#include "skip_or_fail.h"
#include "zmq_tsan.h"  // libzmq is not instrumented for TSan

namespace kvbm::events {
namespace kv_events_test {

using test::chain;
using test::root;
using test::seq;

// ---------------------------------------------------------------------------
// Helpers

/// What a CallbackEventSink saw: every batch, its sequence number and payload.
struct Captured {
  std::uint64_t sequence = 0;
  KvEventBatch batch;
  std::vector<std::uint8_t> payload;
};

/// A callback sink that records batches and lets a test wait for a count.
class Recorder {
 public:
  std::shared_ptr<CallbackEventSink> sink() {
    return std::make_shared<CallbackEventSink>(
        [this](std::uint64_t s, const KvEventBatch& b, std::span<const std::uint8_t> p) {
          {
            std::lock_guard lock(mu_);
            if (throw_next_) {
              throw_next_ = false;
              throw std::runtime_error("sink refused the batch");
            }
            seen_.push_back({s, b, {p.begin(), p.end()}});
          }
          cv_.notify_all();
        });
  }
  /// Waits (at most 10 s) until `n` batches were seen; returns whether they were.
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return seen_.size() >= n; });
  }
  std::vector<Captured> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }
  void throw_next() {
    std::lock_guard lock(mu_);
    throw_next_ = true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Captured> seen_;
  bool throw_next_ = false;
};

KvEventPublisherOptions manual(std::size_t max_batch_size = 1024) {
  KvEventPublisherOptions o;
  o.background_flush = false;
  o.max_batch_size = max_batch_size;
  o.clock = [] { return 1700000000.5; };
  return o;
}

/// Returns every event of every captured batch, in order.
std::vector<KvEvent> all_events(const std::vector<Captured>& seen) {
  std::vector<KvEvent> out;
  for (const auto& c : seen) out.insert(out.end(), c.batch.events.begin(), c.batch.events.end());
  return out;
}

BlockStored stored(std::vector<std::uint64_t> hashes, std::optional<std::uint64_t> parent,
                   std::string medium = "GPU", std::uint32_t block_size = 16) {
  return BlockStored{std::move(hashes), parent,       {},           block_size,  std::nullopt,
                     std::move(medium), std::nullopt, std::nullopt, std::nullopt};
}

// msgpack-cxx accessors that fail the test on a type mismatch.
const msgpack::object* as_array(const msgpack::object& o, std::size_t size) {
  EXPECT_EQ(o.type, msgpack::type::ARRAY);
  if (o.type != msgpack::type::ARRAY) return nullptr;
  EXPECT_EQ(o.via.array.size, size);
  if (o.via.array.size != size) return nullptr;
  return o.via.array.ptr;
}
std::string as_str(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::STR);
  return o.type == msgpack::type::STR ? std::string(o.via.str.ptr, o.via.str.size) : std::string();
}
std::uint64_t as_u64(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::POSITIVE_INTEGER);
  return o.type == msgpack::type::POSITIVE_INTEGER ? o.via.u64 : 0;
}
std::vector<std::uint64_t> as_u64s(const msgpack::object& o) {
  std::vector<std::uint64_t> out;
  EXPECT_EQ(o.type, msgpack::type::ARRAY);
  if (o.type != msgpack::type::ARRAY) return out;
  for (std::uint32_t i = 0; i < o.via.array.size; ++i) out.push_back(as_u64(o.via.array.ptr[i]));
  return out;
}
bool is_nil(const msgpack::object& o) { return o.type == msgpack::type::NIL; }

/// Looks `key` up in a msgpack map; fails the test when absent.
const msgpack::object& field(const msgpack::object& map, const std::string& key) {
  static const msgpack::object kNil;
  EXPECT_EQ(map.type, msgpack::type::MAP);
  if (map.type != msgpack::type::MAP) return kNil;
  for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& kv = map.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR && as_str(kv.key) == key) return kv.val;
  }
  ADD_FAILURE() << "no key '" << key << "'";
  return kNil;
}

msgpack::object_handle decode(const std::vector<std::uint8_t>& bytes) {
  return msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::vector<std::uint8_t> bytes_of(std::initializer_list<int> prefix,
                                   const std::string& text = {}) {
  std::vector<std::uint8_t> out;
  for (int b : prefix) out.push_back(static_cast<std::uint8_t>(b));
  out.insert(out.end(), text.begin(), text.end());
  return out;
}
void append(std::vector<std::uint8_t>& out, std::initializer_list<int> more,
            const std::string& text = {}) {
  const auto b = bytes_of(more, text);
  out.insert(out.end(), b.begin(), b.end());
}

// ---------------------------------------------------------------------------
// The wire layout, byte for byte (msgpack spec: 0x9N fixarray, 0xaN fixstr,
// 0x8N fixmap, 0xcb float64, 0xcf uint64, 0xc0 nil, 0x00-0x7f fixint).

TEST(KvEventEncoding, AllBlocksClearedArrayBytes) {
  KvEventBatch batch{1.5, {AllBlocksCleared{"GPU"}}, 0};
  std::vector<std::uint8_t> want =
      bytes_of({0x93, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x91, 0x91, 0xb0}, "AllBlocksCleared");
  append(want, {0x00});
  EXPECT_EQ(encode_kv_event_batch(batch, WireLayout::kArray), want);
}

TEST(KvEventEncoding, BlockRemovedArrayBytes) {
  KvEventBatch batch{
      2.0, {BlockRemoved{{1, 0xffffffffffffffffULL}, "CPU", std::nullopt}}, std::nullopt};
  // No rank: a two-element batch, as msgspec's omit_defaults writes an
  // array_like struct whose trailing field holds its default (None).
  auto want = bytes_of({0x92, 0xcb, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x93, 0xac}, "BlockRemoved");
  append(want, {0x92, 0x01, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xa3}, "CPU");
  EXPECT_EQ(encode_kv_event_batch(batch, WireLayout::kArray), want);
}

TEST(KvEventEncoding, BlockStoredArrayBytes) {
  // [ts, [["BlockStored", [7, 8], 6, [], 16, nil, "STORAGE", nil]], 3]
  KvEventBatch batch{2.0, {stored({7, 8}, 6, kMediumDisk)}, 3};
  auto want = bytes_of({0x93, 0xcb, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x98, 0xab}, "BlockStored");
  append(want, {0x92, 0x07, 0x08, 0x06, 0x90, 0x10, 0xc0, 0xa7}, "STORAGE");
  append(want, {0xc0, 0x03});
  EXPECT_EQ(encode_kv_event_batch(batch, WireLayout::kArray), want);
}

TEST(KvEventEncoding, BlockRemovedMapBytes) {
  KvEventBatch batch{2.0, {BlockRemoved{{1}, "GPU", std::nullopt}}, 0};
  auto want = bytes_of({0x93, 0xcb, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x83, 0xa4}, "type");
  append(want, {0xac}, "BlockRemoved");
  append(want, {0xac}, "block_hashes");
  append(want, {0x91, 0x01, 0xa6}, "medium");
  append(want, {0xa3}, "GPU");
  append(want, {0x00});
  EXPECT_EQ(encode_kv_event_batch(batch, WireLayout::kMap), want);
}

TEST(KvEventEncoding, BlockStoredMapBytesWithTokens) {
  // vLLM 0.33's map layout: every field without a default, in declaration
  // order after the "type" tag; lora_id and lora_name written as nil; the
  // defaulted fields (extra_keys, group_idx, ...) left out.
  BlockStored e = stored({7}, std::nullopt, kMediumGpu, 2);
  e.token_ids = {1, 300};
  KvEventBatch batch{2.0, {e}, 0};
  auto want = bytes_of({0x93, 0xcb, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x88, 0xa4}, "type");
  append(want, {0xab}, "BlockStored");
  append(want, {0xac}, "block_hashes");
  append(want, {0x91, 0x07, 0xb1}, "parent_block_hash");
  append(want, {0xc0, 0xa9}, "token_ids");
  append(want, {0x92, 0x01, 0xcd, 0x01, 0x2c, 0xaa}, "block_size");
  append(want, {0x02, 0xa7}, "lora_id");
  append(want, {0xc0, 0xa6}, "medium");
  append(want, {0xa3}, "GPU");
  append(want, {0xa9}, "lora_name");
  append(want, {0xc0, 0x00});
  EXPECT_EQ(encode_kv_event_batch(batch, WireLayout::kMap), want);
}

TEST(KvEventEncoding, AllBlocksClearedMapBytesAndEmptyBatch) {
  KvEventBatch batch{1.5, {AllBlocksCleared{}}, 1};
  auto want = bytes_of({0x93, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x91, 0x81, 0xa4}, "type");
  append(want, {0xb0}, "AllBlocksCleared");
  append(want, {0x01});
  EXPECT_EQ(encode_kv_event_batch(batch, WireLayout::kMap), want);
  // A heartbeat: no events.
  const KvEventBatch empty{1.5, {}, 0};
  EXPECT_EQ(encode_kv_event_batch(empty, WireLayout::kMap),
            bytes_of({0x93, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x90, 0x00}));
}

TEST(KvEventEncoding, BlockStoredArrayDecodesFieldByField) {
  BlockStored e = stored({0x8000000000000001ULL, 42}, std::nullopt, "GPU", 32);
  e.token_ids = {1, 300, 70000};
  e.lora_id = 5;
  KvEventBatch batch{1234.25, {e}, 1};
  auto handle = decode(encode_kv_event_batch(batch, WireLayout::kArray));
  const auto* top = as_array(handle.get(), 3);
  ASSERT_NE(top, nullptr);
  EXPECT_EQ(top[0].type, msgpack::type::FLOAT64);
  EXPECT_DOUBLE_EQ(top[0].via.f64, 1234.25);
  EXPECT_EQ(as_u64(top[2]), 1U);
  const auto* events = as_array(top[1], 1);
  ASSERT_NE(events, nullptr);
  const auto* f = as_array(events[0], 8);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(as_str(f[0]), "BlockStored");
  EXPECT_EQ(as_u64s(f[1]), (std::vector<std::uint64_t>{0x8000000000000001ULL, 42}));
  EXPECT_TRUE(is_nil(f[2]));
  EXPECT_EQ(as_u64s(f[3]), (std::vector<std::uint64_t>{1, 300, 70000}));
  EXPECT_EQ(as_u64(f[4]), 32U);
  EXPECT_EQ(as_u64(f[5]), 5U);
  EXPECT_EQ(as_str(f[6]), "GPU");
  EXPECT_TRUE(is_nil(f[7]));  // lora_name
}

TEST(KvEventEncoding, MapLayoutNamesEveryRequiredField) {
  KvEventBatch batch{1.0, {stored({9}, 8, "CPU", 64), AllBlocksCleared{}}, 0};
  auto handle = decode(encode_kv_event_batch(batch, WireLayout::kMap));
  const auto* top = as_array(handle.get(), 3);
  ASSERT_NE(top, nullptr);
  const auto* events = as_array(top[1], 2);
  ASSERT_NE(events, nullptr);
  const auto& s = events[0];
  ASSERT_EQ(s.type, msgpack::type::MAP);
  EXPECT_EQ(as_str(s.via.map.ptr[0].key), "type");  // the tag comes first
  EXPECT_EQ(as_str(field(s, "type")), "BlockStored");
  EXPECT_EQ(as_u64s(field(s, "block_hashes")), std::vector<std::uint64_t>{9});
  EXPECT_EQ(as_u64(field(s, "parent_block_hash")), 8U);
  EXPECT_EQ(as_u64s(field(s, "token_ids")), std::vector<std::uint64_t>{});
  EXPECT_EQ(as_u64(field(s, "block_size")), 64U);
  EXPECT_TRUE(is_nil(field(s, "lora_id")));
  EXPECT_EQ(as_str(field(s, "medium")), "CPU");
  EXPECT_TRUE(is_nil(field(s, "lora_name")));
  ASSERT_EQ(events[1].type, msgpack::type::MAP);
  EXPECT_EQ(events[1].via.map.size, 1U);
  EXPECT_EQ(as_str(field(events[1], "type")), "AllBlocksCleared");
}

TEST(KvEventEncoding, GroupFieldsArrayBytes) {
  // vLLM's field order after lora_name: extra_keys (nil), group_idx,
  // kv_cache_spec_kind, kv_cache_spec_sliding_window; a trailing run of unset
  // ones left out, as msgspec's omit_defaults does for an array_like struct.
  BlockStored s = stored({7, 8}, 6, kMediumDisk);
  s.group_idx = 1;
  s.kv_cache_spec_kind = "sliding_window";
  s.kv_cache_spec_sliding_window = 128;
  BlockStored only_idx = stored({9}, std::nullopt, kMediumGpu);
  only_idx.group_idx = 0;
  KvEventBatch batch{2.0, {s, only_idx, BlockRemoved{{1}, "CPU", 2}}, 3};
  auto want = bytes_of({0x93, 0xcb, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x93, 0x9c, 0xab}, "BlockStored");
  append(want, {0x92, 0x07, 0x08, 0x06, 0x90, 0x10, 0xc0, 0xa7}, "STORAGE");
  append(want, {0xc0, 0xc0, 0x01, 0xae}, "sliding_window");
  append(want, {0xcc, 0x80});
  append(want, {0x9a, 0xab}, "BlockStored");
  append(want, {0x91, 0x09, 0xc0, 0x90, 0x10, 0xc0, 0xa3}, "GPU");
  append(want, {0xc0, 0xc0, 0x00});
  append(want, {0x94, 0xac}, "BlockRemoved");
  append(want, {0x91, 0x01, 0xa3}, "CPU");
  append(want, {0x02, 0x03});
  EXPECT_EQ(encode_kv_event_batch(batch, WireLayout::kArray), want);
}

TEST(KvEventEncoding, GroupFieldsMapBytes) {
  // The set group fields after lora_name, each under its vLLM name; unset ones
  // left out (omit_defaults), extra_keys never written. vLLM 0.33's own decoder
  // (msgspec.msgpack.decode(bytes, type=KVEventBatch)) reads these bytes as the
  // BlockStored and BlockRemoved below, group fields included.
  BlockStored s = stored({7}, std::nullopt, kMediumGpu, 2);
  s.group_idx = 1;
  s.kv_cache_spec_kind = "sliding_window";
  s.kv_cache_spec_sliding_window = 128;
  KvEventBatch batch{2.0, {s, BlockRemoved{{1}, "GPU", 1}}, 0};
  auto want = bytes_of({0x93, 0xcb, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x92, 0x8b, 0xa4}, "type");
  append(want, {0xab}, "BlockStored");
  append(want, {0xac}, "block_hashes");
  append(want, {0x91, 0x07, 0xb1}, "parent_block_hash");
  append(want, {0xc0, 0xa9}, "token_ids");
  append(want, {0x90, 0xaa}, "block_size");
  append(want, {0x02, 0xa7}, "lora_id");
  append(want, {0xc0, 0xa6}, "medium");
  append(want, {0xa3}, "GPU");
  append(want, {0xa9}, "lora_name");
  append(want, {0xc0, 0xa9}, "group_idx");
  append(want, {0x01, 0xb2}, "kv_cache_spec_kind");
  append(want, {0xae}, "sliding_window");
  append(want, {0xbc}, "kv_cache_spec_sliding_window");
  append(want, {0xcc, 0x80});
  append(want, {0x84, 0xa4}, "type");
  append(want, {0xac}, "BlockRemoved");
  append(want, {0xac}, "block_hashes");
  append(want, {0x91, 0x01, 0xa6}, "medium");
  append(want, {0xa3}, "GPU");
  append(want, {0xa9}, "group_idx");
  append(want, {0x01, 0x00});
  EXPECT_EQ(encode_kv_event_batch(batch, WireLayout::kMap), want);
}

TEST(EventGroup, KvbmGroupsInVllmsWordsAndBack) {
  const auto full = KvCacheGroupSpec::full(GroupId{0}, 16, 4096, {0, 2});
  const auto swa = KvCacheGroupSpec::sliding_window(GroupId{1}, 128, 16, 4096, {1});
  const auto chunk = KvCacheGroupSpec::chunked_local(GroupId{2}, 8192, 16, 4096, {3});
  const auto state = KvCacheGroupSpec::recurrent_state(GroupId{3}, 16, 1 << 20, {4});
  EXPECT_EQ(event_group(full), (EventGroup{0, "full_attention", std::nullopt}));
  EXPECT_EQ(event_group(swa), (EventGroup{1, "sliding_window", 128}));
  EXPECT_EQ(event_group(chunk), (EventGroup{2, "chunked_local_attention", std::nullopt}));
  EXPECT_EQ(event_group(state), (EventGroup{3, "mamba", std::nullopt}));
  auto mla = full;
  mla.layout.mla = true;
  EXPECT_EQ(event_group(mla).kind, "mla_attention");
  auto swa_mla = swa;
  swa_mla.layout.mla = true;
  EXPECT_EQ(event_group(swa_mla).kind, "sliding_window_mla");
  for (const auto& g : {full, swa, chunk, state, mla, swa_mla}) {
    EXPECT_EQ(attention_kind_of(event_group(g).kind), g.kind) << g.display_name();
  }
  EXPECT_EQ(attention_kind_of("sink_full_attention"), AttentionKind::kFull);
  EXPECT_EQ(attention_kind_of("cross_attention"), std::nullopt);
  EXPECT_EQ(attention_kind_of("unknown"), std::nullopt);
  EXPECT_EQ(attention_kind_of(""), std::nullopt);
}

// ---------------------------------------------------------------------------
// Collecting, coalescing, batching, flushing

TEST(KvEventPublisher, NothingIsPublishedBeforeFlush) {
  Recorder rec;
  KvEventPublisher pub(rec.sink(), manual());
  EXPECT_EQ(pub.flush(), 0U);  // nothing waiting: no empty batch
  auto gpu = pub.listener("GPU", 16);
  gpu->on_stored(std::vector{seq(0)});
  EXPECT_EQ(pub.pending_events(), 1U);
  EXPECT_TRUE(rec.seen().empty());
  EXPECT_EQ(pub.flush(), 1U);
  EXPECT_EQ(pub.pending_events(), 0U);
  ASSERT_EQ(rec.seen().size(), 1U);
  EXPECT_EQ(rec.seen()[0].sequence, 0U);
  EXPECT_DOUBLE_EQ(rec.seen()[0].batch.ts, 1700000000.5);
  EXPECT_EQ(rec.seen()[0].batch.data_parallel_rank, 0);
  // The default layout is vLLM's current one.
  EXPECT_EQ(rec.seen()[0].payload, encode_kv_event_batch(rec.seen()[0].batch, WireLayout::kMap));
  EXPECT_EQ(pub.flush(), 0U);
}

TEST(KvEventPublisher, ChainedStoresCoalesceIntoOneEvent) {
  Recorder rec;
  KvEventPublisher pub(rec.sink(), manual());
  auto gpu = pub.listener("GPU", 16);
  for (const auto& h : chain(4)) gpu->on_stored(std::span(&h, 1));  // one per registration
  pub.flush();
  const auto events = all_events(rec.seen());
  ASSERT_EQ(events.size(), 1U);
  const auto& s = std::get<BlockStored>(events[0]);
  EXPECT_EQ(s.block_hashes, (std::vector<std::uint64_t>{seq(0).value(), seq(1).value(),
                                                        seq(2).value(), seq(3).value()}));
  EXPECT_EQ(s.parent_block_hash, std::nullopt);
  EXPECT_TRUE(s.token_ids.empty());
  EXPECT_EQ(s.block_size, 16U);
  EXPECT_EQ(s.lora_id, std::nullopt);
  EXPECT_EQ(s.medium, "GPU");
}

TEST(KvEventPublisher, StoresOutsideTheChainStartANewEvent) {
  Recorder rec;
  KvEventPublisher pub(rec.sink(), manual());
  auto gpu = pub.listener("GPU", 16);
  auto cpu = pub.listener("CPU", 16);
  gpu->on_stored(std::vector{seq(0), seq(1)});
  gpu->on_stored(std::vector{seq(2, 7)});  // another chain: its parent is not seq(1)
  gpu->on_stored(std::vector{seq(3, 7)});  // continues chain 7
  cpu->on_stored(std::vector{seq(4, 7)});  // continues chain 7, but on another medium
  gpu->on_stored(std::vector{root(99)});   // a root never joins an event
  pub.flush();
  const auto events = all_events(rec.seen());
  ASSERT_EQ(events.size(), 4U);
  EXPECT_EQ(std::get<BlockStored>(events[0]),
            stored({seq(0).value(), seq(1).value()}, std::nullopt));
  EXPECT_EQ(std::get<BlockStored>(events[1]),
            stored({seq(2, 7).value(), seq(3, 7).value()}, seq(1, 7).value()));
  EXPECT_EQ(std::get<BlockStored>(events[2]),
            stored({seq(4, 7).value()}, seq(3, 7).value(), "CPU"));
  EXPECT_EQ(std::get<BlockStored>(events[3]), stored({99}, std::nullopt));
}

TEST(KvEventPublisher, OrderIsKeptAcrossKindsAndMediums) {
  Recorder rec;
  KvEventPublisher pub(rec.sink(), manual());
  auto gpu = pub.listener("GPU", 16);
  auto cpu = pub.listener("CPU", 16);
  gpu->on_stored(std::vector{seq(0)});
  gpu->on_removed(std::vector{seq(0)});
  gpu->on_removed(std::vector{root(50), root(51)});  // coalesces with the removal before
  cpu->on_removed(std::vector{root(52)});            // another medium: its own event
  gpu->on_stored(std::vector{seq(1)});               // parent seq(0), but a removal came between
  pub.clear_all("GPU");
  gpu->on_removed(std::vector{seq(1)});
  pub.flush();
  const auto events = all_events(rec.seen());
  const std::vector<KvEvent> want = {
      stored({seq(0).value()}, std::nullopt),
      BlockRemoved{{seq(0).value(), 50, 51}, "GPU", std::nullopt},
      BlockRemoved{{52}, "CPU", std::nullopt},
      stored({seq(1).value()}, seq(0).value()),
      AllBlocksCleared{"GPU"},
      BlockRemoved{{seq(1).value()}, "GPU", std::nullopt},
  };
  EXPECT_EQ(events, want);
}

TEST(KvEventPublisher, BatchesHoldAtMostMaxBatchSizeBlocks) {
  Recorder rec;
  KvEventPublisher pub(rec.sink(), manual(3));
  auto gpu = pub.listener("GPU", 16);
  for (std::uint64_t v = 1; v <= 7; ++v) gpu->on_stored(std::vector{root(v)});  // 7 events
  for (const auto& h : chain(5, 3)) gpu->on_stored(std::span(&h, 1));  // coalesced as 3 + 2
  // Events: seven roots, chain 0-2 (full at three blocks), chain 3-4. Batches
  // never split an event: [1 2 3] [4 5 6] [7] [chain 0-2] [chain 3-4].
  EXPECT_EQ(pub.flush(), 5U);
  const auto seen = rec.seen();
  ASSERT_EQ(seen.size(), 5U);
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].sequence, i);
    std::size_t blocks = 0;
    for (const auto& e : seen[i].batch.events)
      blocks += std::get<BlockStored>(e).block_hashes.size();
    EXPECT_LE(blocks, 3U);
    sizes.push_back(blocks);
  }
  EXPECT_EQ(sizes, (std::vector<std::size_t>{3, 3, 1, 3, 2}));
  // The chain was cut at three blocks; the rest names its parent.
  const auto& tail = std::get<BlockStored>(seen[4].batch.events.back());
  EXPECT_EQ(tail.block_hashes, (std::vector<std::uint64_t>{seq(3, 3).value(), seq(4, 3).value()}));
  EXPECT_EQ(tail.parent_block_hash, seq(2, 3).value());
}

TEST(KvEventPublisher, SequenceNumbersContinueAcrossFlushesAndFailures) {
  Recorder rec;
  KvEventPublisher pub(rec.sink(), manual());
  pub.clear_all("GPU");
  pub.flush();
  rec.throw_next();
  pub.clear_all("GPU");
  EXPECT_EQ(pub.flush(), 1U);  // handed to the sink, which threw
  pub.clear_all("GPU");
  pub.flush();
  const auto seen = rec.seen();
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[0].sequence, 0U);
  EXPECT_EQ(seen[1].sequence, 2U);  // 1 was lost: the subscriber sees the gap
  const auto stats = pub.stats();
  EXPECT_EQ(stats.batches_published, 2U);
  EXPECT_EQ(stats.events_published, 2U);
  EXPECT_EQ(stats.failed_batches, 1U);
}

TEST(KvEventPublisher, RecordTakesEventsWithTokens) {
  Recorder rec;
  KvEventPublisher pub(rec.sink(), manual());
  BlockStored a = stored({1}, std::nullopt, "GPU", 2);
  a.token_ids = {10, 11};
  BlockStored b = stored({2}, 1, "GPU", 2);
  b.token_ids = {12, 13};
  pub.record(a);
  pub.record(b);
  pub.flush();
  const auto events = all_events(rec.seen());
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(std::get<BlockStored>(events[0]).token_ids,
            (std::vector<std::uint32_t>{10, 11, 12, 13}));
  EXPECT_THROW(pub.record(BlockRemoved{{}, "GPU", std::nullopt}), UsageError);
  EXPECT_THROW(pub.record(stored({1}, std::nullopt, "")), UsageError);
}

TEST(KvEventPublisher, PendingBeyondTheCapIsDroppedAndCounted) {
  Recorder rec;
  KvEventPublisherOptions o = manual(2);
  o.max_pending_blocks = 3;
  KvEventPublisher pub(rec.sink(), o);
  auto gpu = pub.listener("GPU", 16);
  gpu->on_removed(std::vector{root(1), root(2), root(3)});
  gpu->on_removed(std::vector{root(4)});
  EXPECT_EQ(pub.stats().dropped_blocks, 1U);
  pub.flush();
  EXPECT_EQ(all_events(rec.seen()).size(), 1U);
}

TEST(KvEventPublisher, RejectsBadConfiguration) {
  Recorder rec;
  EXPECT_THROW(KvEventPublisher(nullptr), UsageError);
  EXPECT_THROW(KvEventPublisher(rec.sink(), manual(0)), UsageError);
  KvEventPublisherOptions o;
  o.flush_interval = std::chrono::milliseconds(0);
  EXPECT_THROW(KvEventPublisher(rec.sink(), o), UsageError);
  KvEventPublisher pub(rec.sink(), manual());
  EXPECT_THROW((void)pub.listener("", 16), UsageError);
  EXPECT_THROW((void)pub.listener("GPU", 0), UsageError);
}

TEST(KvEventPublisher, BackgroundFlusherPublishesOnTheInterval) {
  Recorder rec;
  KvEventPublisherOptions o;
  o.flush_interval = std::chrono::milliseconds(5);
  KvEventPublisher pub(rec.sink(), o);
  pub.clear_all("GPU");
  ASSERT_TRUE(rec.wait_for(1));
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(rec.seen()[0].batch.events[0]));
}

TEST(KvEventPublisher, BackgroundFlusherWakesAtMaxBatchSize) {
  Recorder rec;
  KvEventPublisherOptions o;
  o.flush_interval = std::chrono::hours(1);  // only a full batch can wake it in time
  o.max_batch_size = 4;
  KvEventPublisher pub(rec.sink(), o);
  auto gpu = pub.listener("GPU", 16);
  gpu->on_removed(std::vector{root(1), root(2), root(3)});
  gpu->on_removed(std::vector{root(4)});
  ASSERT_TRUE(rec.wait_for(1));
  EXPECT_EQ(std::get<BlockRemoved>(rec.seen()[0].batch.events[0]).block_hashes.size(), 4U);
}

TEST(KvEventPublisher, DestructorFlushesAndListenersOutliveIt) {
  Recorder rec;
  std::shared_ptr<PoolListener> gpu;
  {
    KvEventPublisher pub(rec.sink());  // background flusher with a 100 ms interval
    gpu = pub.listener("GPU", 16);
    gpu->on_stored(std::vector{seq(0)});
  }
  ASSERT_EQ(all_events(rec.seen()).size(), 1U);
  gpu->on_stored(std::vector{seq(1)});  // the publisher is gone: dropped quietly
  EXPECT_EQ(rec.seen().size(), 1U);
}

TEST(KvEventPublisher, ConcurrentPoolsAndFlushesLoseNothing) {
  Recorder rec;
  KvEventPublisherOptions o;
  o.flush_interval = std::chrono::milliseconds(1);
  o.max_batch_size = 64;
  constexpr std::uint64_t kPerThread = 2000;
  {
    KvEventPublisher pub(rec.sink(), o);
    std::vector<std::thread> threads;
    for (std::uint64_t t = 0; t < 3; ++t) {
      threads.emplace_back([&pub, t] {
        auto l = pub.listener("GPU", 16);
        for (std::uint64_t i = 0; i < kPerThread; ++i) {
          const SequenceHash h = root((t << 32) | (i + 1));
          l->on_removed(std::span(&h, 1));
          if (i % 500 == 0) pub.flush();
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  const auto seen = rec.seen();
  std::vector<std::uint64_t> next(3, 1);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].sequence, i);
    for (const auto& e : seen[i].batch.events) {
      for (std::uint64_t v : std::get<BlockRemoved>(e).block_hashes) {
        const std::uint64_t t = v >> 32;
        ASSERT_LT(t, 3U);
        EXPECT_EQ(v & 0xffffffffULL, next[t]) << "thread " << t << " out of order";
        ++next[t];
      }
    }
  }
  EXPECT_EQ(next, std::vector<std::uint64_t>(3, kPerThread + 1));
}

TEST(KvEventPublisher, HeartbeatPublishesAnEmptyBatchAfterSilence) {
  Recorder rec;
  auto clock = std::make_shared<ManualClock>();
  KvEventPublisherOptions o = manual();
  o.heartbeat_interval = std::chrono::seconds(5);
  o.monotonic_clock = clock;
  KvEventPublisher pub(rec.sink(), o);
  EXPECT_EQ(pub.flush(), 0U);  // nothing for 0 s: no heartbeat yet
  clock->advance(std::chrono::seconds(4));
  EXPECT_EQ(pub.flush(), 0U);
  clock->advance(std::chrono::seconds(1));
  EXPECT_EQ(pub.flush(), 1U);  // 5 s of silence
  pub.clear_all("GPU");
  clock->advance(std::chrono::seconds(3));
  EXPECT_EQ(pub.flush(), 1U);  // a real batch, which restarts the silence
  clock->advance(std::chrono::seconds(4));
  EXPECT_EQ(pub.flush(), 0U);
  clock->advance(std::chrono::seconds(1));
  EXPECT_EQ(pub.flush(), 1U);
  const auto seen = rec.seen();
  ASSERT_EQ(seen.size(), 3U);
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i].sequence, i);
  EXPECT_TRUE(seen[0].batch.events.empty());
  EXPECT_EQ(seen[0].batch.data_parallel_rank, 0);
  EXPECT_EQ(seen[1].batch.events.size(), 1U);
  EXPECT_TRUE(seen[2].batch.events.empty());
  EXPECT_EQ(pub.stats().heartbeats, 2U);
  EXPECT_EQ(pub.stats().batches_published, 3U);
  EXPECT_THROW(KvEventPublisher(rec.sink(),
                                [] {
                                  KvEventPublisherOptions bad = manual();
                                  bad.heartbeat_interval = std::chrono::milliseconds(-1);
                                  return bad;
                                }()),
               UsageError);
}

TEST(KvEventPublisher, BackgroundFlusherSendsHeartbeats) {
  Recorder rec;
  KvEventPublisherOptions o;
  o.flush_interval = std::chrono::hours(1);  // only the heartbeat can wake it in time
  o.heartbeat_interval = std::chrono::milliseconds(5);
  KvEventPublisher pub(rec.sink(), o);
  ASSERT_TRUE(rec.wait_for(2));
  const auto seen = rec.seen();
  EXPECT_TRUE(seen[0].batch.events.empty());
  EXPECT_EQ(seen[1].sequence, seen[0].sequence + 1);
}

TEST(KvEventPublisher, BackgroundFlusherFlushesEveryIntervalOfItsClock) {
  Recorder rec;
  auto clock = std::make_shared<ManualClock>();
  KvEventPublisherOptions o = manual();
  o.background_flush = true;
  o.flush_interval = std::chrono::seconds(10);
  o.monotonic_clock = clock;  // the flush interval runs on it too
  KvEventPublisher pub(rec.sink(), o);
  pub.clear_all("GPU");
  ASSERT_TRUE(test::eventually([&] { return clock->waiters() == 1; }));
  clock->advance(std::chrono::seconds(9));
  ASSERT_TRUE(test::eventually([&] { return clock->waiters() == 1; }));
  EXPECT_EQ(pub.pending_events(), 1U) << "flushed before flush_interval passed on the clock";
  clock->advance(std::chrono::seconds(1));
  ASSERT_TRUE(rec.wait_for(1));
  EXPECT_EQ(rec.seen()[0].batch.events.size(), 1U);
}

// ---------------------------------------------------------------------------
// Attached to a real pool

TEST(KvEventPublisher, BlocksRegisteredWithTokensArePublishedWithThem) {
  Recorder rec;
  KvEventPublisher pub(rec.sink(), manual());
  constexpr std::uint32_t kBlock = 4;
  auto pool = BlockManager<G1>::builder()
                  .block_count(8)
                  .block_size(kBlock)
                  .listener(pub.listener(kMediumGpu, kBlock))
                  .build();
  // A prompt of three blocks, hashed as an engine hashes it.
  std::vector<Token> prompt(3 * kBlock);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<Token>(100 + i);
  std::vector<TokenBlock> blocks;
  std::optional<SequenceHash> parent;
  for (std::size_t b = 0; b < 3; ++b) {
    blocks.push_back(
        TokenBlock::compute({prompt.begin() + static_cast<std::ptrdiff_t>(b * kBlock),
                             prompt.begin() + static_cast<std::ptrdiff_t>((b + 1) * kBlock)},
                            kNoSalt, parent));
    parent = blocks.back().sequence_hash();
  }
  auto fresh = pool.allocate_blocks(3);
  ASSERT_TRUE(fresh.has_value());
  // The first block alone, the other two as a batch.
  auto first = std::move((*fresh)[0]).complete(blocks[0]);
  ASSERT_TRUE(first.ok());
  std::vector<ImmutableBlock<G1>> held;
  held.push_back(pool.register_block(std::move(first).value(), blocks[0].tokens()));
  std::vector<CompleteBlock<G1>> rest;
  for (std::size_t b = 1; b < 3; ++b) {
    auto c = std::move((*fresh)[b]).complete(blocks[b]);
    ASSERT_TRUE(c.ok());
    rest.push_back(std::move(c).value());
  }
  const std::vector<std::span<const Token>> rest_tokens = {blocks[1].tokens(), blocks[2].tokens()};
  for (auto& h : pool.register_blocks(std::move(rest), rest_tokens)) held.push_back(std::move(h));
  pub.flush();
  auto events = all_events(rec.seen());
  ASSERT_EQ(events.size(), 1U);  // one chain: coalesced
  const auto& s = std::get<BlockStored>(events[0]);
  EXPECT_EQ(s.block_hashes, (std::vector<std::uint64_t>{blocks[0].sequence_hash().value(),
                                                        blocks[1].sequence_hash().value(),
                                                        blocks[2].sequence_hash().value()}));
  EXPECT_EQ(s.parent_block_hash, std::nullopt);
  EXPECT_EQ(s.token_ids, std::vector<std::uint32_t>(prompt.begin(), prompt.end()));
  EXPECT_EQ(s.block_size, kBlock);
  EXPECT_EQ(s.medium, "GPU");

  // Without tokens the event has none, and does not join a chain with tokens.
  auto more = pool.allocate_blocks(2);
  ASSERT_TRUE(more.has_value());
  const TokenBlock next = TokenBlock::compute({1, 2, 3, 4}, kNoSalt, blocks[2].sequence_hash());
  auto plain = std::move((*more)[0]).complete(next);
  ASSERT_TRUE(plain.ok());
  held.push_back(pool.register_block(std::move(plain).value()));
  pub.flush();
  events = all_events(rec.seen());
  ASSERT_EQ(events.size(), 2U);
  EXPECT_TRUE(std::get<BlockStored>(events[1]).token_ids.empty());
  EXPECT_EQ(std::get<BlockStored>(events[1]).parent_block_hash, blocks[2].sequence_hash().value());

  // Misuse: the wrong number of tokens or of spans registers nothing.
  const TokenBlock other = TokenBlock::compute({9, 9, 9, 9}, kNoSalt, std::nullopt);
  auto staged = std::move((*more)[1]).complete(other);
  ASSERT_TRUE(staged.ok());
  auto c = std::move(staged).value();
  const std::vector<Token> three = {1, 2, 3};
  EXPECT_THROW((void)pool.register_block(std::move(c), three), UsageError);
  EXPECT_TRUE(c.valid());  // still the caller's
  std::vector<CompleteBlock<G1>> one;
  one.push_back(std::move(c));
  EXPECT_THROW(
      (void)pool.register_blocks(std::move(one), std::span<const std::span<const Token>>{}),
      UsageError);
  pub.flush();
  EXPECT_EQ(all_events(rec.seen()).size(), 2U);
  held.clear();
  test::expect_balanced(pool);
}

TEST(KvEventPublisher, BlockManagerReportsStoredAndRemoved) {
  Recorder rec;
  KvEventPublisher pub(rec.sink(), manual());
  auto pool = BlockManager<G2>::builder()
                  .block_count(4)
                  .block_size(16)
                  .with_lru_backend()
                  .listener(pub.listener("CPU", 16))
                  .build();
  {
    auto held = test::make_registered(pool, chain(3));
    ASSERT_EQ(held.size(), 3U);
  }  // released: inactive, still registered
  pub.flush();
  auto events = all_events(rec.seen());
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(std::get<BlockStored>(events[0]),
            stored({seq(0).value(), seq(1).value(), seq(2).value()}, std::nullopt, "CPU"));

  // One free block left: allocating two evicts one registered block.
  auto fresh = pool.allocate_blocks(2);
  ASSERT_TRUE(fresh.has_value());
  pub.flush();
  events = all_events(rec.seen());
  ASSERT_EQ(events.size(), 2U);
  const auto evicted = std::get<BlockRemoved>(events[1]);
  ASSERT_EQ(evicted.block_hashes.size(), 1U);
  EXPECT_EQ(evicted.medium, "CPU");
  fresh.reset();

  // The two still registered go with reset_inactive_pool().
  EXPECT_EQ(pool.reset_inactive_pool(), 2U);
  pub.flush();
  events = all_events(rec.seen());
  ASSERT_EQ(events.size(), 3U);
  auto removed = std::get<BlockRemoved>(events[2]).block_hashes;
  removed.push_back(evicted.block_hashes[0]);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::uint64_t>{seq(0).value(), seq(1).value(), seq(2).value()}));
  test::expect_balanced(pool);
}

TEST(KvEventPublisher, GroupPoolsNameTheirGroupAndAreNeverCoalesced) {
  // A hybrid model's G1: a pool per group, each with the group's listener.
  // Group 1's block chains onto group 0's and is of the same medium and size:
  // only the group keeps the two stores apart (and the removals).
  Recorder rec;
  KvEventPublisher pub(rec.sink(), manual());
  const auto full = KvCacheGroupSpec::full(GroupId{0}, 16, 4096, {0});
  const auto swa = KvCacheGroupSpec::sliding_window(GroupId{1}, 128, 16, 4096, {1});
  auto pool_of = [&](const KvCacheGroupSpec& g) {
    return BlockManager<G1>::builder()
        .block_count(2)
        .block_size(16)
        .pool_name(g.namespace_for("G1"))
        .listener(pub.listener(kMediumGpu, g))
        .build();
  };
  auto full_pool = pool_of(full);
  auto swa_pool = pool_of(swa);
  {
    auto a = test::make_registered(full_pool, {seq(0)});
    auto b = test::make_registered(swa_pool, {seq(1)});
    ASSERT_EQ(a.size() + b.size(), 2U);
  }
  EXPECT_EQ(full_pool.reset_inactive_pool(), 1U);
  EXPECT_EQ(swa_pool.reset_inactive_pool(), 1U);
  pub.flush();
  const auto events = all_events(rec.seen());
  ASSERT_EQ(events.size(), 4U);
  BlockStored want0 = stored({seq(0).value()}, std::nullopt);
  want0.group_idx = 0;
  want0.kv_cache_spec_kind = "full_attention";
  BlockStored want1 = stored({seq(1).value()}, seq(0).value());
  want1.group_idx = 1;
  want1.kv_cache_spec_kind = "sliding_window";
  want1.kv_cache_spec_sliding_window = 128;
  EXPECT_EQ(std::get<BlockStored>(events[0]), want0);
  EXPECT_EQ(std::get<BlockStored>(events[1]), want1);
  EXPECT_EQ(std::get<BlockRemoved>(events[2]), (BlockRemoved{{seq(0).value()}, "GPU", 0}));
  EXPECT_EQ(std::get<BlockRemoved>(events[3]), (BlockRemoved{{seq(1).value()}, "GPU", 1}));
  // The same blocks without groups coalesce, as before.
  Recorder plain;
  KvEventPublisher pub2(plain.sink(), manual());
  pub2.record(stored({seq(0).value()}, std::nullopt));
  pub2.record(stored({seq(1).value()}, seq(0).value()));
  pub2.record(BlockRemoved{{1}, "GPU", std::nullopt});
  pub2.record(BlockRemoved{{2}, "GPU", std::nullopt});
  pub2.flush();
  EXPECT_EQ(all_events(plain.seen()).size(), 2U);
  test::expect_balanced(full_pool);
  test::expect_balanced(swa_pool);
  EXPECT_THROW((void)pub.listener("", full), UsageError);
  auto bad = swa;
  bad.window_tokens = 0;
  EXPECT_THROW((void)pub.listener(kMediumGpu, bad), UsageError);
}

// ---------------------------------------------------------------------------
// ZeroMQ

#if KVBM_HAVE_ZMQ

/// A SUB socket connected to `endpoint`, subscribed to `topic`.
struct Subscriber {
  Subscriber(zmq::context_t& ctx, const std::string& endpoint, const std::string& topic)
      : socket(ctx, zmq::socket_type::sub) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::subscribe, topic);
    socket.connect(endpoint);
  }
  /// Receives one multipart message within `timeout`; empty when none came.
  std::vector<zmq::message_t> receive(std::chrono::milliseconds timeout) {
    std::vector<zmq::message_t> frames;
    std::array<zmq::pollitem_t, 1> items{{{socket.handle(), 0, ZMQ_POLLIN, 0}}};
    if (zmq::poll(items.data(), items.size(), timeout) == 0) return frames;
    do {
      frames.emplace_back();
      EXPECT_TRUE(socket.recv(frames.back(), zmq::recv_flags::none));
    } while (frames.back().more());
    return frames;
  }
  zmq::socket_t socket;
};

std::uint64_t big_endian_u64(const zmq::message_t& m) {
  EXPECT_EQ(m.size(), 8U);
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < m.size(); ++i)
    v = (v << 8) | static_cast<const std::uint8_t*>(m.data())[i];
  return v;
}

std::vector<std::uint8_t> bytes(const zmq::message_t& m) {
  const auto* p = static_cast<const std::uint8_t*>(m.data());
  return {p, p + m.size()};
}

/// True when the payload's events are all AllBlocksCleared (the probes).
bool is_probe(const std::vector<std::uint8_t>& payload) {
  auto h = decode(payload);
  const auto& events = h.get().via.array.ptr[1];
  for (std::uint32_t i = 0; i < events.via.array.size; ++i) {
    if (as_str(events.via.array.ptr[i].via.array.ptr[0]) != "AllBlocksCleared") return false;
  }
  return true;
}

/// Defeats the slow-joiner race: a PUB socket drops what it sends before the
/// subscription has arrived, so publish probe batches until one comes through
/// (at most 10 s). Returns the number of probes published.
std::uint64_t join(KvEventPublisher& pub, Subscriber& sub) {
  for (std::uint64_t probes = 1; probes <= 1000; ++probes) {
    pub.clear_all("GPU");
    pub.flush();
    if (!sub.receive(std::chrono::milliseconds(10)).empty()) return probes;
  }
  ADD_FAILURE() << "the subscriber never received a probe";
  return 0;
}

TEST(ZmqEventSink, SubscriberReceivesAndDecodesBatches) {
  ZmqEventSinkOptions so;
  so.endpoint = "tcp://127.0.0.1:*";
  so.topic = "kv-events";
  auto sink = std::make_shared<ZmqEventSink>(so);
  const std::string endpoint = sink->endpoint();
  ASSERT_TRUE(endpoint.starts_with("tcp://127.0.0.1:")) << endpoint;

  KvEventPublisherOptions o = manual();
  o.data_parallel_rank = 2;
  o.layout = WireLayout::kArray;  // decoded positionally below
  KvEventPublisher pub(sink, o);
  zmq::context_t ctx;
  Subscriber sub(ctx, endpoint, "kv-events");
  const std::uint64_t probes = join(pub, sub);
  ASSERT_GT(probes, 0U);

  auto gpu = pub.listener("GPU", 16);
  auto disk = pub.listener(kMediumDisk, 16);
  for (const auto& h : chain(3)) gpu->on_stored(std::span(&h, 1));
  disk->on_stored(std::vector{seq(3)});
  gpu->on_removed(std::vector{seq(2)});
  ASSERT_EQ(pub.flush(), 1U);

  // Skip any probe still in flight; the next message is the batch.
  std::vector<zmq::message_t> frames;
  for (;;) {
    frames = sub.receive(std::chrono::seconds(10));
    ASSERT_EQ(frames.size(), 3U) << "no message within 10 s";
    if (!is_probe(bytes(frames[2]))) break;
  }
  EXPECT_EQ(frames[0].to_string(), "kv-events");
  EXPECT_EQ(big_endian_u64(frames[1]), probes);  // probes took 0 .. probes-1

  auto h = decode(bytes(frames[2]));
  const auto* top = as_array(h.get(), 3);
  ASSERT_NE(top, nullptr);
  EXPECT_EQ(top[0].type, msgpack::type::FLOAT64);
  EXPECT_EQ(as_u64(top[2]), 2U);
  const auto* events = as_array(top[1], 3);
  ASSERT_NE(events, nullptr);

  const auto* s = as_array(events[0], 8);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(as_str(s[0]), "BlockStored");
  EXPECT_EQ(as_u64s(s[1]),
            (std::vector<std::uint64_t>{seq(0).value(), seq(1).value(), seq(2).value()}));
  EXPECT_TRUE(is_nil(s[2]));
  EXPECT_EQ(as_u64s(s[3]), std::vector<std::uint64_t>{});
  EXPECT_EQ(as_u64(s[4]), 16U);
  EXPECT_TRUE(is_nil(s[5]));
  EXPECT_EQ(as_str(s[6]), "GPU");

  const auto* d = as_array(events[1], 8);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(as_u64s(d[1]), std::vector<std::uint64_t>{seq(3).value()});
  EXPECT_EQ(as_u64(d[2]), seq(2).value());  // the parent
  EXPECT_EQ(as_str(d[6]), "STORAGE");

  const auto* r = as_array(events[2], 3);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(as_str(r[0]), "BlockRemoved");
  EXPECT_EQ(as_u64s(r[1]), std::vector<std::uint64_t>{seq(2).value()});
  EXPECT_EQ(as_str(r[2]), "GPU");

  // The next batch carries the next sequence number.
  pub.clear_all("GPU");
  pub.flush();
  frames = sub.receive(std::chrono::seconds(10));
  ASSERT_EQ(frames.size(), 3U);
  EXPECT_EQ(big_endian_u64(frames[1]), probes + 1);
}

TEST(ZmqEventSink, ReplayResendsKeptBatches) {
  ZmqEventSinkOptions so;
  so.endpoint = "tcp://127.0.0.1:*";
  so.replay_endpoint = "tcp://127.0.0.1:*";
  so.replay_buffer_batches = 3;
  so.topic = "kv@a";
  auto sink = std::make_shared<ZmqEventSink>(so);
  ASSERT_FALSE(sink->replay_endpoint().empty());
  KvEventPublisherOptions o = manual();
  o.layout = WireLayout::kArray;  // decoded positionally below
  KvEventPublisher pub(sink, o);
  for (std::uint64_t v = 1; v <= 5; ++v) {  // five batches, sequence 0..4; 2..4 are kept
    pub.listener("GPU", 16)->on_removed(std::vector{root(v)});
    pub.flush();
  }
  zmq::context_t ctx;
  // A DEALER, not a REQ: the answer is several messages, and a REQ socket takes
  // only the first reply to a request. The empty first frame is the envelope
  // delimiter a REQ socket would have added.
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(sink->replay_endpoint());
  const std::array<std::uint8_t, 8> start{0, 0, 0, 0, 0, 0, 0, 3};  // from 3 on
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start), zmq::send_flags::none);
  std::vector<std::uint64_t> sequences;
  std::vector<std::uint64_t> hashes;
  bool ended = false;
  for (int i = 0; i < 10 && !ended; ++i) {
    std::array<zmq::pollitem_t, 1> items{{{dealer.handle(), 0, ZMQ_POLLIN, 0}}};
    ASSERT_EQ(zmq::poll(items.data(), items.size(), std::chrono::seconds(10)), 1);
    std::vector<zmq::message_t> frames;
    do {
      frames.emplace_back();
      ASSERT_TRUE(dealer.recv(frames.back(), zmq::recv_flags::none));
    } while (frames.back().more());
    ASSERT_EQ(frames.size(), 4U);  // "", topic, sequence, payload
    EXPECT_EQ(frames[0].size(), 0U);
    if (frames[3].size() == 0) {  // the end marker: no topic, sequence -1, empty payload
      EXPECT_EQ(frames[1].size(), 0U);
      EXPECT_EQ(big_endian_u64(frames[2]), ~std::uint64_t{0});
      ended = true;
      continue;
    }
    EXPECT_EQ(frames[1].to_string(), "kv@a");  // the topic, as on the PUB socket
    sequences.push_back(big_endian_u64(frames[2]));
    auto h = decode(bytes(frames[3]));
    hashes.push_back(as_u64s(h.get().via.array.ptr[1].via.array.ptr[0].via.array.ptr[1])[0]);
  }
  EXPECT_TRUE(ended);
  EXPECT_EQ(sequences, (std::vector<std::uint64_t>{3, 4}));
  EXPECT_EQ(hashes, (std::vector<std::uint64_t>{4, 5}));
}

/// The threads of this process named `name` (/proc/self/task/<tid>/comm), by tid.
std::set<std::string> threads_named(const std::string& name) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string got;
    std::getline(comm, got);
    if (got == name) out.insert(e.path().filename().string());
  }
  return out;
}

/// How many times thread `tid` of this process has gone to sleep and woken (voluntarily).
std::uint64_t wakeups(const std::string& tid) {
  std::ifstream status("/proc/self/task/" + tid + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("voluntary_ctxt_switches:")) return std::stoull(line.substr(24));
  }
  ADD_FAILURE() << "no voluntary_ctxt_switches for thread " << tid;
  return 0;
}

// The replay thread sleeps until a request (or the stop) comes: it does not wake on a timer
// while idle, and a request wakes it to answer at once.
TEST(ZmqEventSink, ReplayThreadSleepsUntilARequestWakesIt) {
  const auto before = threads_named("kvbm-zmq-replay");
  ZmqEventSinkOptions so;
  so.endpoint = "tcp://127.0.0.1:*";
  so.replay_endpoint = "tcp://127.0.0.1:*";
  so.topic = "kv";
  auto sink = std::make_shared<ZmqEventSink>(so);
  std::string tid;
  for (int i = 0; i < 1000 && tid.empty(); ++i) {  // the worker names itself when it starts
    for (const auto& t : threads_named("kvbm-zmq-replay")) {
      if (!before.contains(t)) tid = t;
    }
    if (tid.empty()) std::this_thread::yield();
  }
  ASSERT_FALSE(tid.empty()) << "no thread named kvbm-zmq-replay";
  const std::uint64_t start = wakeups(tid);
  // An observation window, not a wait for work: a thread that polled on a timer (50 ms before)
  // would wake several times in it; one asleep in poll without a timeout does not wake.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LE(wakeups(tid) - start, 1U) << "the idle replay thread woke up on its own";

  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(sink->replay_endpoint());
  const std::array<std::uint8_t, 8> from{};
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(from), zmq::send_flags::none);
  std::array<zmq::pollitem_t, 1> items{{{dealer.handle(), 0, ZMQ_POLLIN, 0}}};
  ASSERT_EQ(zmq::poll(items.data(), items.size(), std::chrono::seconds(10)), 1);
  std::vector<zmq::message_t> frames;
  do {  // nothing kept: the answer is the end marker alone
    frames.emplace_back();
    ASSERT_TRUE(dealer.recv(frames.back(), zmq::recv_flags::none));
  } while (frames.back().more());
  ASSERT_EQ(frames.size(), 4U);
  EXPECT_EQ(big_endian_u64(frames[2]), ~std::uint64_t{0});
  EXPECT_GT(wakeups(tid), start) << "the request was answered without waking the thread?";
  sink.reset();  // the destructor wakes the thread to stop: returns, the thread is gone
  EXPECT_FALSE(threads_named("kvbm-zmq-replay").contains(tid));
}

#else

TEST(ZmqEventSink, NotBuilt) {
  EXPECT_THROW(ZmqEventSink(ZmqEventSinkOptions{}), UsageError);
  KVBM_SKIP_OR_FAIL(
      "kvbm built without ZeroMQ: the subscriber tests need it; install libzmq3-dev "
      "and cppzmq-dev (bash scripts/deps.sh)");
}

#endif  // KVBM_HAVE_ZMQ

}  // namespace kv_events_test
}  // namespace kvbm::events
