// tests/events/kv_event_decoder_test.cpp: decode_kv_event_batch
// (kvbm/events/kv_event_decoder.h).
//
// Three sources of payloads: kvbm's own publisher (both layouts, with and
// without tokens), messages in vLLM's formats written out byte by byte from
// the msgpack specification (never through kvbm's encoder), and malformed
// bytes, which must throw DecodeError naming what and where.

#include "kvbm/events/kv_event_decoder.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "kvbm/events/kv_events.h"
#include "kvbm/token_block.h"

namespace kvbm::events {
namespace kv_event_decoder_test {

// ---------------------------------------------------------------------------
// A msgpack writer that follows the specification byte by byte (formats:
// fixarray 0x90|n, array16 0xdc, fixmap 0x80|n, fixstr 0xa0|n, str8 0xd9,
// nil 0xc0, positive fixint 0x00-0x7f, uint8 0xcc, uint16 0xcd, uint32 0xce,
// uint64 0xcf, negative fixint 0xe0-0xff, int64 0xd3, float64 0xcb, bin8 0xc4).

struct Bytes {
  std::vector<std::uint8_t> b;

  Bytes& raw(std::initializer_list<int> bytes) {
    for (int x : bytes) b.push_back(static_cast<std::uint8_t>(x));
    return *this;
  }
  Bytes& be(std::uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  Bytes& arr(std::size_t n) {
    return n < 16 ? raw({0x90 | static_cast<int>(n)}) : raw({0xdc}).be(n, 2);
  }
  Bytes& map(std::size_t n) { return raw({0x80 | static_cast<int>(n)}); }
  Bytes& nil() { return raw({0xc0}); }
  Bytes& str(const std::string& s) {
    if (s.size() < 32) {
      raw({0xa0 | static_cast<int>(s.size())});
    } else {
      raw({0xd9}).be(s.size(), 1);
    }
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& uint(std::uint64_t v) {
    if (v < 0x80) return raw({static_cast<int>(v)});
    if (v <= 0xff) return raw({0xcc}).be(v, 1);
    if (v <= 0xffff) return raw({0xcd}).be(v, 2);
    if (v <= 0xffffffffULL) return raw({0xce}).be(v, 4);
    return raw({0xcf}).be(v, 8);
  }
  Bytes& i64(std::int64_t v) { return raw({0xd3}).be(static_cast<std::uint64_t>(v), 8); }
  Bytes& f64(double v) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    return raw({0xcb}).be(bits, 8);
  }
  Bytes& bin(const std::vector<std::uint8_t>& v) {
    raw({0xc4}).be(v.size(), 1);
    b.insert(b.end(), v.begin(), v.end());
    return *this;
  }
  Bytes& uints(const std::vector<std::uint64_t>& v) {
    arr(v.size());
    for (auto x : v) uint(x);
    return *this;
  }
};

KvEventBatch decode(const Bytes& m) { return decode_kv_event_batch(m.b); }

/// Expects a DecodeError whose where() is `where` and whose message contains `says`.
void expect_error(const std::vector<std::uint8_t>& payload, const std::string& where,
                  const std::string& says) {
  try {
    (void)decode_kv_event_batch(payload);
    ADD_FAILURE() << "no DecodeError (wanted '" << says << "' at '" << where << "')";
  } catch (const DecodeError& e) {
    EXPECT_EQ(e.where(), where) << e.what();
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kCorrupt);
  }
}

// ---------------------------------------------------------------------------
// kvbm's own output

/// What the decoder gives back for what kvbm encoded: everything, except the
/// AllBlocksCleared's medium, which the wire does not carry.
KvEventBatch as_decoded(KvEventBatch b) {
  for (auto& e : b.events) {
    if (auto* c = std::get_if<AllBlocksCleared>(&e)) c->medium.clear();
  }
  return b;
}

class DecodeOwnOutput : public ::testing::TestWithParam<WireLayout> {};

TEST_P(DecodeOwnOutput, PublisherBatchesRoundTrip) {
  std::mutex mu;
  std::vector<std::pair<KvEventBatch, std::vector<std::uint8_t>>> seen;
  auto sink = std::make_shared<CallbackEventSink>(
      [&](std::uint64_t, const KvEventBatch& b, std::span<const std::uint8_t> p) {
        std::lock_guard lock(mu);
        seen.emplace_back(b, std::vector<std::uint8_t>(p.begin(), p.end()));
      });
  KvEventPublisherOptions o;
  o.background_flush = false;
  o.layout = GetParam();
  o.clock = [] { return 1700000000.25; };
  o.data_parallel_rank = 3;
  KvEventPublisher pub(sink, o);

  // Through a real pool: with tokens and without.
  constexpr std::uint32_t kBlock = 2;
  auto pool = BlockManager<G2>::builder()
                  .block_count(4)
                  .block_size(kBlock)
                  .listener(pub.listener(kMediumCpu, kBlock))
                  .build();
  const TokenBlock a = TokenBlock::compute({5, 6}, kNoSalt, std::nullopt);
  const TokenBlock b = TokenBlock::compute({7, 8}, kNoSalt, a.sequence_hash());
  auto blocks = pool.allocate_blocks(2);
  ASSERT_TRUE(blocks.has_value());
  auto ca = std::move((*blocks)[0]).complete(a);
  auto cb = std::move((*blocks)[1]).complete(b);
  ASSERT_TRUE(ca.ok() && cb.ok());
  auto ha = pool.register_block(std::move(ca).value(), a.tokens());
  auto hb = pool.register_block(std::move(cb).value());  // no tokens
  pub.record(BlockStored{{0xffffffffffffffffULL, 1},
                         0x8000000000000000ULL,
                         {},
                         16,
                         7,
                         kMediumRemote,
                         std::nullopt,
                         std::nullopt,
                         std::nullopt});
  pub.record(BlockRemoved{{42}, kMediumDisk, std::nullopt});
  pub.clear_all(kMediumGpu);
  ASSERT_EQ(pub.flush(), 1U);
  pub.record(BlockRemoved{{43}, kMediumGpu, std::nullopt});
  ASSERT_EQ(pub.flush(), 1U);

  ASSERT_EQ(seen.size(), 2U);
  for (const auto& [batch, payload] : seen) {
    KvEventDecodeStats stats;
    EXPECT_EQ(decode_kv_event_batch(payload, stats), as_decoded(batch));
    EXPECT_EQ(stats.skipped_events, 0U);
  }
  const auto first = decode_kv_event_batch(seen[0].second);
  ASSERT_EQ(first.events.size(), 5U);
  EXPECT_EQ(std::get<BlockStored>(first.events[0]).token_ids, (std::vector<std::uint32_t>{5, 6}));
  EXPECT_TRUE(std::get<BlockStored>(first.events[1]).token_ids.empty());
  EXPECT_EQ(std::get<BlockStored>(first.events[2]).medium, "REMOTE");
  EXPECT_EQ(first.data_parallel_rank, 3);
  EXPECT_DOUBLE_EQ(first.ts, 1700000000.25);
}

TEST_P(DecodeOwnOutput, EncoderOutputRoundTripsWithoutRankAndEmpty) {
  const KvEventBatch heartbeat{12.5, {}, std::nullopt};
  EXPECT_EQ(decode_kv_event_batch(encode_kv_event_batch(heartbeat, GetParam())), heartbeat);
  BlockStored s{{1, 2, 3},    9,          {1, 2, 3, 4, 5, 6}, 2,
                std::nullopt, kMediumGpu, std::nullopt,       std::nullopt,
                std::nullopt};
  const KvEventBatch batch{0.0, {s, BlockRemoved{{1}, kMediumCpu, std::nullopt}}, 0};
  EXPECT_EQ(decode_kv_event_batch(encode_kv_event_batch(batch, GetParam())), batch);
}

TEST_P(DecodeOwnOutput, GroupFieldsRoundTripInEveryCombination) {
  // A hybrid model's events: each of the three group fields set or not (the
  // array layout writes nil for an unset one before a set one).
  std::vector<KvEvent> events;
  for (int mask = 0; mask < 8; ++mask) {
    BlockStored s{{10, 11},     9,           {}, 16, std::nullopt, kMediumGpu, std::nullopt,
                  std::nullopt, std::nullopt};
    if ((mask & 1) != 0) s.group_idx = static_cast<std::uint32_t>(mask);
    if ((mask & 2) != 0) s.kv_cache_spec_kind = "sliding_window";
    if ((mask & 4) != 0) s.kv_cache_spec_sliding_window = 4096;
    events.emplace_back(std::move(s));
    events.emplace_back(
        BlockRemoved{{10}, kMediumCpu, (mask & 1) != 0 ? std::optional(7U) : std::nullopt});
  }
  const KvEventBatch batch{3.0, events, 0};
  EXPECT_EQ(decode_kv_event_batch(encode_kv_event_batch(batch, GetParam())), batch);
}

INSTANTIATE_TEST_SUITE_P(Layouts, DecodeOwnOutput,
                         ::testing::Values(WireLayout::kArray, WireLayout::kMap),
                         [](const auto& param_info) {
                           return param_info.param == WireLayout::kArray ? std::string("Array")
                                                                         : std::string("Map");
                         });

// ---------------------------------------------------------------------------
// vLLM's formats, byte by byte

TEST(DecodeVllm, MapLayoutOfVllm033WithOmittedDefaultsAndExtraKeys) {
  // [ts, [{type: BlockStored, block_hashes, parent_block_hash, token_ids,
  //        block_size, lora_id, medium, lora_name, extra_keys, group_idx,
  //        kv_cache_spec_kind}, {type: BlockRemoved, block_hashes, medium},
  //       {type: AllBlocksCleared}], 0]
  Bytes m;
  m.arr(3).f64(1789095808.5).arr(3);
  m.map(11)
      .str("type")
      .str("BlockStored")
      .str("block_hashes")
      .uints({15760518052499183552ULL})
      .str("parent_block_hash")
      .nil()
      .str("token_ids")
      .uints({151644, 872, 198, 9064})
      .str("block_size")
      .uint(4)
      .str("lora_id")
      .nil()
      .str("medium")
      .str("GPU")
      .str("lora_name")
      .nil()
      .str("extra_keys")
      .arr(1)
      .nil()
      .str("group_idx")
      .uint(0)
      .str("kv_cache_spec_kind")
      .str("full_attention");
  m.map(3).str("type").str("BlockRemoved").str("block_hashes").uints({1, 2}).str("medium").nil();
  m.map(1).str("type").str("AllBlocksCleared");
  m.uint(0);

  const KvEventBatch got = decode(m);
  EXPECT_DOUBLE_EQ(got.ts, 1789095808.5);
  EXPECT_EQ(got.data_parallel_rank, 0);
  ASSERT_EQ(got.events.size(), 3U);
  EXPECT_EQ(std::get<BlockStored>(got.events[0]), (BlockStored{{15760518052499183552ULL},
                                                               std::nullopt,
                                                               {151644, 872, 198, 9064},
                                                               4,
                                                               std::nullopt,
                                                               "GPU",
                                                               0,
                                                               "full_attention",
                                                               std::nullopt}));
  EXPECT_EQ(std::get<BlockRemoved>(got.events[1]),
            (BlockRemoved{{1, 2}, "GPU", std::nullopt}));  // nil medium
  EXPECT_EQ(std::get<AllBlocksCleared>(got.events[2]), AllBlocksCleared{});
}

TEST(DecodeVllm, HybridGroupFieldsAsVllmsOwnEncoderWritesThem) {
  // The bytes vLLM 0.33's msgspec writes for
  //   KVEventBatch(ts=2.0, data_parallel_rank=0, events=[
  //     BlockStored(block_hashes=[7, 8], parent_block_hash=6, token_ids=[], block_size=16,
  //                 lora_id=None, medium="GPU", lora_name=None, group_idx=1,
  //                 kv_cache_spec_kind="sliding_window", kv_cache_spec_sliding_window=128),
  //     BlockRemoved(block_hashes=[7], medium="GPU", group_idx=1)])
  // (vllm.distributed.kv_events, msgspec.msgpack.encode(batch).hex()): its
  // events are maps, a map16 header even for 11 keys, the group fields after lora_name.
  const std::string hex =
      "93cb400000000000000092de000ba474797065ab426c6f636b53746f726564ac626c6f636b5f6861736865"
      "73920708b1706172656e745f626c6f636b5f6861736806a9746f6b656e5f69647390aa626c6f636b5f7369"
      "7a6510a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c0a967726f75705f6964"
      "7801b26b765f63616368655f737065635f6b696e64ae736c6964696e675f77696e646f77bc6b765f636163"
      "68655f737065635f736c6964696e675f77696e646f77cc8084a474797065ac426c6f636b52656d6f766564"
      "ac626c6f636b5f6861736865739107a66d656469756da3475055a967726f75705f6964780100";
  std::vector<std::uint8_t> payload;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    payload.push_back(static_cast<std::uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  const KvEventBatch got = decode_kv_event_batch(payload);
  ASSERT_EQ(got.events.size(), 2U);
  EXPECT_EQ(std::get<BlockStored>(got.events[0]),
            (BlockStored{{7, 8}, 6, {}, 16, std::nullopt, "GPU", 1, "sliding_window", 128}));
  EXPECT_EQ(std::get<BlockRemoved>(got.events[1]), (BlockRemoved{{7}, "GPU", 1}));
  EXPECT_EQ(got.data_parallel_rank, 0);
}

TEST(DecodeVllm, GroupFieldsNilOrOfTheWrongType) {
  auto stored_with = [](const std::string& key, const std::function<void(Bytes&)>& value) {
    Bytes m;
    m.arr(3).f64(0.0).arr(1).map(3).str("type").str("BlockStored").str("block_hashes").uints({1});
    m.str(key);
    value(m);
    m.uint(0);
    return m.b;
  };
  for (const char* key : {"group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"}) {
    const auto got = decode_kv_event_batch(stored_with(key, [](Bytes& m) { m.nil(); }));
    EXPECT_EQ(std::get<BlockStored>(got.events.at(0)), (BlockStored{{1},
                                                                    std::nullopt,
                                                                    {},
                                                                    0,
                                                                    std::nullopt,
                                                                    "GPU",
                                                                    std::nullopt,
                                                                    std::nullopt,
                                                                    std::nullopt}))
        << key;
  }
  expect_error(stored_with("group_idx", [](Bytes& m) { m.str("0"); }), "events[0].group_idx",
               "(the group)");
  expect_error(stored_with("group_idx", [](Bytes& m) { m.uint(1ULL << 32); }),
               "events[0].group_idx", "out of range");
  expect_error(stored_with("kv_cache_spec_kind", [](Bytes& m) { m.uint(2); }),
               "events[0].kv_cache_spec_kind", "(the group's kind)");
  expect_error(stored_with("kv_cache_spec_sliding_window", [](Bytes& m) { m.i64(-1); }),
               "events[0].kv_cache_spec_sliding_window", "(the sliding window)");
  Bytes removed;
  removed.arr(2).f64(0.0).arr(1).arr(4).str("BlockRemoved").uints({1}).nil().str("x");
  expect_error(removed.b, "events[0].group_idx", "(the group)");
}

TEST(DecodeVllm, MapEventsInAnyKeyOrderWithKeysLeftOut) {
  // Keys reordered, parent/lora/medium absent: defaults.
  Bytes m;
  m.arr(2).f64(1.0).arr(1);
  m.map(4)
      .str("block_size")
      .uint(16)
      .str("token_ids")
      .arr(0)
      .str("block_hashes")
      .uints({5})
      .str("type")
      .str("BlockStored");
  const KvEventBatch got = decode(m);
  EXPECT_EQ(got.data_parallel_rank, std::nullopt);  // a two-element batch
  EXPECT_EQ(std::get<BlockStored>(got.events.at(0)), (BlockStored{{5},
                                                                  std::nullopt,
                                                                  {},
                                                                  16,
                                                                  std::nullopt,
                                                                  "GPU",
                                                                  std::nullopt,
                                                                  std::nullopt,
                                                                  std::nullopt}));
}

TEST(DecodeVllm, BatchAsAMap) {
  // {ts, events, data_parallel_rank}: a batch struct without array_like.
  Bytes m;
  m.map(3)
      .str("ts")
      .f64(2.0)
      .str("events")
      .arr(1)
      .map(2)
      .str("type")
      .str("BlockRemoved")
      .str("block_hashes")
      .uints({9});
  m.str("data_parallel_rank").uint(4);
  const KvEventBatch got = decode(m);
  EXPECT_EQ(got.data_parallel_rank, 4);
  EXPECT_EQ(std::get<BlockRemoved>(got.events.at(0)), (BlockRemoved{{9}, "GPU", std::nullopt}));
  // Dynamo's alias, and the rank left out.
  Bytes alias;
  alias.map(3).str("dp_rank").uint(1).str("events").arr(0).str("ts").uint(3);
  EXPECT_EQ(decode(alias).data_parallel_rank, 1);
  EXPECT_DOUBLE_EQ(decode(alias).ts, 3.0);  // an integer timestamp is accepted
}

TEST(DecodeVllm, ArrayLayoutWithTrailingFieldsAndOlderShortForms) {
  Bytes m;
  m.arr(3).f64(5.0).arr(3);
  // vLLM's newest tuple: lora_name, extra_keys, group_idx, kind, window, locality after medium.
  m.arr(13)
      .str("BlockStored")
      .uints({10, 11})
      .uint(9)
      .uints({1, 2, 3, 4})
      .uint(2)
      .uint(3)
      .str("DISK")
      .nil()
      .arr(2)
      .nil()
      .nil()
      .uint(0)
      .str("full_attention")
      .nil()
      .str("LOCAL");
  // vLLM before `medium`: tag + five fields.
  m.arr(6).str("BlockStored").uints({12}).nil().uints({5, 6}).uint(2).nil();
  // BlockRemoved before `medium`.
  m.arr(2).str("BlockRemoved").uints({13});
  m.uint(1);
  const KvEventBatch got = decode(m);
  ASSERT_EQ(got.events.size(), 3U);
  EXPECT_EQ(std::get<BlockStored>(got.events[0]),
            (BlockStored{{10, 11},
                         9,
                         {1, 2, 3, 4},
                         2,
                         3,
                         "STORAGE",
                         0,
                         "full_attention",
                         std::nullopt}));  // DISK: the legacy name
  EXPECT_EQ(std::get<BlockStored>(got.events[1]), (BlockStored{{12},
                                                               std::nullopt,
                                                               {5, 6},
                                                               2,
                                                               std::nullopt,
                                                               "GPU",
                                                               std::nullopt,
                                                               std::nullopt,
                                                               std::nullopt}));
  EXPECT_EQ(std::get<BlockRemoved>(got.events[2]), (BlockRemoved{{13}, "GPU", std::nullopt}));
}

TEST(DecodeVllm, HashesAsSignedIntegersAndAsBytes) {
  // bytes: vLLM's ExternalBlockHash when int hashes are off. 32 bytes (a
  // sha256 digest) keep their last eight, big endian; fewer are zero-extended.
  std::vector<std::uint8_t> digest(32);
  for (std::size_t i = 0; i < digest.size(); ++i) digest[i] = static_cast<std::uint8_t>(i);
  Bytes m;
  m.arr(3).f64(0.0).arr(2);
  m.arr(8)
      .str("BlockStored")
      .arr(3)
      .bin(digest)
      .i64(-1)
      .bin({0x01, 0x02})
      .bin({0xaa})
      .arr(0)
      .uint(1)
      .nil()
      .str("CPU")
      .nil();
  m.map(2).str("type").str("BlockRemoved").str("block_hashes").arr(1).raw({0xff});  // fixint -1
  m.nil();
  const KvEventBatch got = decode(m);
  const auto& s = std::get<BlockStored>(got.events.at(0));
  EXPECT_EQ(s.block_hashes,
            (std::vector<std::uint64_t>{0x18191a1b1c1d1e1fULL, 0xffffffffffffffffULL, 0x0102}));
  EXPECT_EQ(s.parent_block_hash, 0xaaU);
  EXPECT_EQ(std::get<BlockRemoved>(got.events.at(1)).block_hashes,
            std::vector<std::uint64_t>{0xffffffffffffffffULL});
  EXPECT_EQ(got.data_parallel_rank, std::nullopt);  // nil
}

TEST(DecodeVllm, UnknownEventTypesAreSkippedAndCounted) {
  Bytes m;
  m.arr(3).f64(0.0).arr(4);
  m.arr(2).str("BlockEvicted").uints({1});
  m.map(2).str("type").str("BlockRemoved").str("block_hashes").uints({2});
  m.map(2).str("type").str("SomethingNew").str("payload").map(0);
  m.arr(1).str("AllBlocksCleared");
  m.uint(0);
  KvEventDecodeStats stats;
  stats.skipped_events = 5;  // counts add up
  const KvEventBatch got = decode_kv_event_batch(m.b, stats);
  EXPECT_EQ(stats.skipped_events, 7U);
  ASSERT_EQ(got.events.size(), 2U);
  EXPECT_TRUE(std::holds_alternative<BlockRemoved>(got.events[0]));
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(got.events[1]));
}

TEST(DecodeVllm, LiteralBytesOfAHeartbeatAndAnEvent) {
  // [1.5, [["BlockRemoved", [1], "GPU"]], 0] without any helper.
  const std::vector<std::uint8_t> payload = {
      0x93, 0xcb, 0x3f, 0xf8, 0,   0,   0,   0,   0,   0,    0x91, 0x93, 0xac, 'B', 'l', 'o',
      'c',  'k',  'R',  'e',  'm', 'o', 'v', 'e', 'd', 0x91, 0x01, 0xa3, 'G',  'P', 'U', 0x00};
  EXPECT_EQ(decode_kv_event_batch(payload),
            (KvEventBatch{1.5, {BlockRemoved{{1}, "GPU", std::nullopt}}, 0}));
  const std::vector<std::uint8_t> heartbeat = {0x92, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x90};
  EXPECT_EQ(decode_kv_event_batch(heartbeat), (KvEventBatch{1.5, {}, std::nullopt}));
}

TEST(DecodeVllm, CanonicalMedium) {
  EXPECT_EQ(canonical_medium(""), "GPU");
  EXPECT_EQ(canonical_medium("DISK"), "STORAGE");
  EXPECT_EQ(canonical_medium("STORAGE"), "STORAGE");
  EXPECT_EQ(canonical_medium("CPU_PINNED"), "CPU_PINNED");
  Bytes m;
  m.arr(2)
      .f64(0.0)
      .arr(1)
      .map(3)
      .str("type")
      .str("BlockRemoved")
      .str("block_hashes")
      .uints({1})
      .str("medium")
      .str("");
  EXPECT_EQ(std::get<BlockRemoved>(decode(m).events.at(0)).medium, "GPU");
}

// ---------------------------------------------------------------------------
// Malformed input

TEST(DecodeMalformed, ThePayloadAsAWhole) {
  expect_error({}, "", "empty");
  expect_error({0x93, 0xcb, 0x3f}, "", "truncated");
  expect_error({0x92, 0x00, 0x90, 0x00}, "", "1 bytes after");
  expect_error({0xc1}, "", "not valid msgpack");  // 0xc1 is never used
  expect_error({0x05}, "", "expected a batch");
  expect_error({0x91, 0x00}, "", "1 elements");
  expect_error(Bytes().map(1).str("events").arr(0).b, "", "without \"ts\"");
  expect_error(Bytes().map(1).str("ts").uint(1).b, "", "without \"events\"");
}

TEST(DecodeMalformed, LengthsBeyondThePayloadAllocateNothing) {
  // An array32, map32, str32 and bin32 claiming 4 G elements in five bytes.
  expect_error({0xdd, 0xff, 0xff, 0xff, 0xff}, "", "msgpack");
  expect_error({0xdf, 0xff, 0xff, 0xff, 0xff}, "", "msgpack");
  expect_error({0xdb, 0xff, 0xff, 0xff, 0xff}, "", "msgpack");
  expect_error({0xc6, 0xff, 0xff, 0xff, 0xff}, "", "msgpack");
  // Nesting deeper than any batch.
  std::vector<std::uint8_t> deep(1000, 0x91);
  deep.push_back(0xc0);
  expect_error(deep, "", "msgpack");
}

TEST(DecodeMalformed, FieldsSayWhereTheyAre) {
  auto batch_with = [](const std::function<void(Bytes&)>& event) {
    Bytes m;
    m.arr(3).f64(0.0).arr(2).arr(1).str("AllBlocksCleared");
    event(m);
    m.uint(0);
    return m.b;
  };
  expect_error(Bytes().arr(3).str("now").arr(0).uint(0).b, "ts", "expected a number");
  expect_error(Bytes().arr(3).f64(0).map(0).uint(0).b, "events", "expected an array of events");
  expect_error(Bytes().arr(3).f64(0).arr(0).str("x").b, "data_parallel_rank",
               "expected an integer");
  expect_error(Bytes().arr(3).f64(0).arr(0).uint(1ULL << 40).b, "data_parallel_rank",
               "out of range");
  expect_error(batch_with([](Bytes& m) { m.uint(3); }), "events[1]", "expected an event");
  expect_error(batch_with([](Bytes& m) { m.arr(0); }), "events[1]", "empty array");
  expect_error(batch_with([](Bytes& m) { m.arr(2).uint(1).uints({1}); }), "events[1][0]",
               "the event's class");
  expect_error(batch_with([](Bytes& m) { m.map(1).str("block_hashes").uints({1}); }), "events[1]",
               "without a \"type\" key");
  expect_error(batch_with([](Bytes& m) { m.map(1).str("type").uint(1); }), "events[1].type",
               "expected a string");
  expect_error(batch_with([](Bytes& m) { m.arr(1).str("BlockStored"); }), "events[1]",
               "without block_hashes");
  expect_error(batch_with([](Bytes& m) { m.map(1).str("type").str("BlockRemoved"); }), "events[1]",
               "without block_hashes");
  expect_error(batch_with([](Bytes& m) { m.arr(2).str("BlockStored").uint(1); }),
               "events[1].block_hashes", "expected an array of block hashes");
  expect_error(batch_with([](Bytes& m) { m.arr(2).str("BlockRemoved").arr(2).uint(1).str("h"); }),
               "events[1].block_hashes[1]", "expected an integer or bytes");
  expect_error(batch_with([](Bytes& m) {
                 m.arr(4).str("BlockStored").uints({1}).nil().arr(1).uint(1ULL << 32);
               }),
               "events[1].token_ids[0]", "out of range");
  expect_error(
      batch_with([](Bytes& m) { m.arr(4).str("BlockStored").uints({1}).nil().arr(1).i64(-5); }),
      "events[1].token_ids[0]", "expected a token id");
  expect_error(batch_with([](Bytes& m) {
                 m.map(3)
                     .str("type")
                     .str("BlockStored")
                     .str("block_hashes")
                     .uints({1})
                     .str("medium")
                     .uint(3);
               }),
               "events[1].medium", "expected a string or nil");
  expect_error(batch_with([](Bytes& m) {
                 m.map(3)
                     .str("type")
                     .str("BlockStored")
                     .str("block_hashes")
                     .uints({1})
                     .str("lora_id")
                     .str("a");
               }),
               "events[1].lora_id", "expected an integer or nil");
  expect_error(batch_with([](Bytes& m) {
                 m.map(3)
                     .str("type")
                     .str("BlockStored")
                     .str("block_hashes")
                     .uints({1})
                     .str("block_size")
                     .i64(-16);
               }),
               "events[1].block_size", "expected an unsigned");
}

}  // namespace kv_event_decoder_test
}  // namespace kvbm::events
