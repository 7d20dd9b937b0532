#include "kvbm/groups/vllm_kv_cache_spec.h"

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace kvbm::vllm {
namespace vllm_kv_cache_spec_test {

std::vector<std::string> names(std::initializer_list<int> layers) {
  std::vector<std::string> out;
  for (int l : layers) out.push_back("model.layers." + std::to_string(l) + ".self_attn.attn");
  return out;
}

AttentionShape bf16(std::uint32_t block, std::uint32_t heads, std::uint32_t head) {
  AttentionShape s;
  s.block_size = block;
  s.num_kv_heads = heads;
  s.head_size = head;
  s.dtype = "bfloat16";
  s.dtype_bytes = 2;
  return s;
}

FullAttentionSpec full(const AttentionShape& shape, bool mla = false) {
  FullAttentionSpec f;
  f.shape = shape;
  f.mla = mla;
  return f;
}

using test::expect_usage_error;

// A sliding-window plus full-attention model in the shape of gpt-oss: 8 KV heads of 64,
// window 128, layers alternating.
TEST(FromVllm, SlidingWindowPlusFull) {
  KVCacheConfig cfg;
  cfg.kv_cache_groups.push_back({names({0, 2, 4}), full(bf16(16, 8, 64))});
  cfg.kv_cache_groups.push_back({names({1, 3, 5}), SlidingWindowSpec{bf16(16, 8, 64), 128}});
  const auto groups = from_vllm(cfg);
  ASSERT_EQ(groups.size(), 2u);
  const std::uint64_t page = 16ull * 8 * (64 + 64) * 2;
  EXPECT_EQ(page_size_bytes(bf16(16, 8, 64), false), page);
  EXPECT_EQ(groups[0].kind, AttentionKind::kFull);
  EXPECT_EQ(groups[0].bytes_per_block, page * 3);
  EXPECT_EQ(groups[0].layers, (std::vector<std::uint32_t>{0, 2, 4}));
  EXPECT_EQ(groups[1].kind, AttentionKind::kSlidingWindow);
  EXPECT_EQ(groups[1].window_tokens, 128u);
  EXPECT_EQ(groups[1].id, GroupId{1});
  EXPECT_EQ(groups[1].layout.dtype, "bfloat16");
  EXPECT_EQ(groups[1].layout.head_size_v, 64u);
}

// Chunked local plus full, as Llama 4 (chunk 8192).
TEST(FromVllm, ChunkedLocalPlusFull) {
  KVCacheConfig cfg;
  cfg.kv_cache_groups.push_back({names({3, 7}), full(bf16(64, 8, 128))});
  cfg.kv_cache_groups.push_back(
      {names({0, 1, 2}), ChunkedLocalAttentionSpec{bf16(64, 8, 128), 8192}});
  const auto groups = from_vllm(cfg);
  EXPECT_EQ(groups[1].kind, AttentionKind::kChunkedLocal);
  EXPECT_EQ(groups[1].window_tokens, 8192u);
  EXPECT_EQ(groups[1].tokens_per_block, 64u);
}

// Recurrent state plus full, as a Mamba-2 hybrid: conv and SSM state tensors.
TEST(FromVllm, MambaPlusFull) {
  MambaSpec m;
  m.block_size = 528;
  m.states = {{{4, 3, 6144}, 2}, {{128, 64, 128}, 4}};
  m.mamba_cache_mode = "align";
  KVCacheConfig cfg;
  cfg.kv_cache_groups.push_back({names({0, 1, 2}), m});
  cfg.kv_cache_groups.push_back({names({3}), full(bf16(528, 8, 128))});
  const auto groups = from_vllm(cfg);
  const std::uint64_t page = 4ull * 3 * 6144 * 2 + 128ull * 64 * 128 * 4;
  EXPECT_EQ(page_size_bytes(m), page);
  EXPECT_EQ(groups[0].kind, AttentionKind::kRecurrentState);
  EXPECT_EQ(groups[0].bytes_per_block, page * 3);
  m.page_size_padded = page + 4096;
  EXPECT_EQ(page_size_bytes(m), page + 4096);
}

TEST(FromVllm, FullSpecWithAWindowIsFullForTheCache) {
  FullAttentionSpec f = full(bf16(16, 8, 64));
  f.sliding_window = 4096;  // vLLM with its hybrid allocator off keeps every token
  const auto g = from_vllm(KVCacheGroupSpec{names({0}), f}, GroupId{0});
  EXPECT_EQ(g.kind, AttentionKind::kFull);
}

TEST(FromVllm, MlaPagesHoldOneVectorPerToken) {
  FullAttentionSpec f = full(bf16(64, 1, 576), true);
  EXPECT_EQ(page_size_bytes(f.shape, true), 64ull * 576 * 2);
  EXPECT_EQ(from_vllm(KVCacheGroupSpec{names({0}), f}, GroupId{0}).layout.mla, true);
}

TEST(FromVllm, RefusesWhatItCannotServe) {
  MambaSpec none;
  none.block_size = 16;
  none.states = {{{4, 4}, 2}};
  none.mamba_cache_mode = "none";
  expect_usage_error(
      [&] {
        (void)from_vllm(KVCacheGroupSpec{names({0}), none}, GroupId{0});
      },
      {"\"align\" or \"all\""});
  expect_usage_error(
      [] {
        (void)from_vllm(
            KVCacheGroupSpec{names({0}), ChunkedLocalAttentionSpec{bf16(16, 8, 64), 100}},
            GroupId{0});
      },
      {"multiple of tokens_per_block"});
  auto padded = bf16(16, 8, 64);
  padded.page_size_padded = 10;
  expect_usage_error([&] { (void)page_size_bytes(padded, false); }, {"page_size_padded 10"});
  expect_usage_error([] { (void)layer_index("lm_head"); }, {"no numeric component"});
  KVCacheConfig overlap;
  overlap.kv_cache_groups.push_back({names({0, 1}), full(bf16(16, 8, 64))});
  overlap.kv_cache_groups.push_back({names({1}), SlidingWindowSpec{bf16(16, 8, 64), 64}});
  expect_usage_error([&] { (void)from_vllm(overlap); }, {"layer 1 is in group 0 and in group 1"});
}

TEST(LayerIndex, TakesTheFirstNumericComponent) {
  EXPECT_EQ(layer_index("model.layers.12.self_attn.attn"), 12u);
  EXPECT_EQ(layer_index("language_model.model.layers.0.mixer"), 0u);
  EXPECT_EQ(layer_index("3"), 3u);
}

}  // namespace vllm_kv_cache_spec_test
}  // namespace kvbm::vllm
