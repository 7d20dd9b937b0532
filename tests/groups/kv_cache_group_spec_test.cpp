#include "kvbm/groups/kv_cache_group_spec.h"

#include <initializer_list>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace kvbm {
namespace kv_cache_group_spec_test {

using test::expect_usage_error;

KvCacheGroupSpec valid_window() {
  KvCacheGroupSpec g;
  g.id = GroupId{1};
  g.kind = AttentionKind::kSlidingWindow;
  g.window_tokens = 128;
  g.tokens_per_block = 16;
  g.bytes_per_block = 4096;
  g.layers = {1, 3};
  return g;
}

TEST(KvCacheGroupSpec, ConstructorsBuildEachKind) {
  const auto f = KvCacheGroupSpec::full(GroupId{0}, 16, 1024, {0, 2});
  EXPECT_EQ(f.kind, AttentionKind::kFull);
  EXPECT_EQ(f.window_tokens, 0u);
  const auto w = KvCacheGroupSpec::sliding_window(GroupId{1}, 128, 16, 1024, {1});
  EXPECT_EQ(w.window_tokens, 128u);
  const auto c = KvCacheGroupSpec::chunked_local(GroupId{2}, 8192, 64, 1024, {4});
  EXPECT_EQ(c.kind, AttentionKind::kChunkedLocal);
  const auto s = KvCacheGroupSpec::recurrent_state(GroupId{3}, 528, 1 << 20, {5});
  EXPECT_EQ(s.bytes_per_block, 1u << 20);
}

TEST(KvCacheGroupSpec, LabelsAndNamespaceNameKindParameterAndBlockSize) {
  auto w = valid_window();
  EXPECT_EQ(w.kind_label(), "swa128");
  EXPECT_EQ(w.display_name(), "swa128");
  w.name = "local";
  EXPECT_EQ(w.display_name(), "local");
  EXPECT_EQ(w.namespace_for("vllm/llama"), "vllm/llama/group:1:swa128:16");
  EXPECT_EQ(w.namespace_for(""), "group:1:swa128:16");
  EXPECT_EQ(KvCacheGroupSpec::chunked_local(GroupId{0}, 64, 16, 1, {0}).kind_label(), "chunk64");
  EXPECT_EQ(KvCacheGroupSpec::recurrent_state(GroupId{0}, 16, 1, {0}).kind_label(), "state");
  EXPECT_EQ(to_string(AttentionKind::kRecurrentState), "recurrent_state");
}

TEST(KvCacheGroupSpec, ValidationSaysWhatToChange) {
  auto g = valid_window();
  g.tokens_per_block = 0;
  expect_usage_error([&] { g.validate(); }, {"group 1", "tokens_per_block is 0"});
  g = valid_window();
  g.bytes_per_block = 0;
  expect_usage_error([&] { g.validate(); }, {"bytes_per_block is 0", "give the bytes"});
  g = valid_window();
  g.layers.clear();
  expect_usage_error([&] { g.validate(); }, {"no layers"});
  g = valid_window();
  g.layers = {3, 1, 3};
  expect_usage_error([&] { g.validate(); }, {"layer 3 is listed twice"});
  g = valid_window();
  g.window_tokens = 0;
  expect_usage_error([&] { g.validate(); }, {"window is 0", "W >= 1"});
  expect_usage_error([] { (void)KvCacheGroupSpec::chunked_local(GroupId{0}, 100, 16, 1, {0}); },
                     {"chunk of 100", "multiple of tokens_per_block 16"});
  g = KvCacheGroupSpec::full(GroupId{0}, 16, 1, {0});
  g.window_tokens = 64;
  expect_usage_error([&] { g.validate(); }, {"only sliding-window and chunked-local"});
}

TEST(ValidateGroups, RefusesWrongIdsOverlapsAndEmptyLists) {
  expect_usage_error([] { validate_groups({}); }, {"empty"});
  std::vector<KvCacheGroupSpec> gs{KvCacheGroupSpec::full(GroupId{0}, 16, 1, {0, 2}),
                                   valid_window()};
  validate_groups(gs);
  gs[1].id = GroupId{5};
  expect_usage_error([&] { validate_groups(gs); }, {"position 1 has id 5"});
  gs[1].id = GroupId{1};
  gs[1].layers = {1, 2};
  expect_usage_error([&] { validate_groups(gs); }, {"layer 2 is in group 0 and in group 1"});
}

TEST(GroupGeometry, HashBlockIsTheGcdAndAlignmentTheLcm) {
  const std::vector<KvCacheGroupSpec> gs{KvCacheGroupSpec::full(GroupId{0}, 16, 1, {0}),
                                         KvCacheGroupSpec::recurrent_state(GroupId{1}, 24, 1, {1})};
  EXPECT_EQ(hash_block_size(gs), 8u);
  EXPECT_EQ(alignment_tokens(gs), 48u);
  const std::vector<KvCacheGroupSpec> far{
      KvCacheGroupSpec::full(GroupId{0}, 65521, 1, {0}),
      KvCacheGroupSpec::recurrent_state(GroupId{1}, 65519, 1, {1})};
  expect_usage_error([&] { (void)alignment_tokens(far); }, {"divide one another"});
  expect_usage_error([&] { validate_groups(far); }, {"divide one another"});
}

}  // namespace kv_cache_group_spec_test
}  // namespace kvbm
