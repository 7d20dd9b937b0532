// Tests of replay/hybrid_preset.h: the presets' geometries and the group file's errors.

#include "replay/hybrid_preset.h"

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "kvbm/error.h"
#include "replay/options.h"
#include "replay_test_util.h"

namespace kvbm::replay {
namespace hybrid_preset_test {

// The message of the UsageError parse_model_groups throws for `text` ("" when none).
std::string error_of(const std::string& text) {
  try {
    (void)parse_model_groups(text, "groups.json");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

const char* const kGood = R"([
  {"kind": "full", "tokens_per_block": 16, "bytes_per_block": 4096, "layers": [1, 3]},
  {"kind": "sliding_window", "window": 128, "tokens_per_block": 16, "bytes_per_block": 4096,
   "layers": [0, 2], "name": "swa", "g1_weight": 0.25}
])";

TEST(HybridPreset, EveryPresetIsValidAndCoversItsLayersOnce) {
  ASSERT_EQ(hybrid_presets().size(), 5u);
  for (const auto& p : hybrid_presets()) {
    const auto m = find_hybrid_preset(p.name);
    ASSERT_TRUE(m.has_value()) << p.name;
    EXPECT_NO_THROW(validate_groups(m->groups)) << p.name;
    EXPECT_EQ(m->g1_weights.size(), m->groups.size()) << p.name;
    EXPECT_FALSE(m->source.empty()) << p.name;
    std::size_t layers = 0;
    for (const auto& g : m->groups) layers += g.layers.size();
    std::size_t top = 0;
    for (const auto& g : m->groups) {
      for (auto l : g.layers) top = std::max<std::size_t>(top, l + 1);
    }
    EXPECT_EQ(layers, top) << p.name << ": layers 0.." << top - 1 << " each in one group";
  }
}

// The published geometries, recomputed from the config values the comments cite.
TEST(HybridPreset, GeometriesAreThePublishedOnes) {
  const auto gpt = *find_hybrid_preset("gpt-oss-20b");
  ASSERT_EQ(gpt.groups.size(), 2u);
  EXPECT_EQ(gpt.groups[1].kind, AttentionKind::kSlidingWindow);
  EXPECT_EQ(gpt.groups[1].window_tokens, 128u);
  EXPECT_EQ(gpt.groups[0].layers.size(), 12u);
  EXPECT_EQ(gpt.groups[0].bytes_per_block, 12u * 2 * 8 * 64 * 2 * 16);
  const auto gemma = *find_hybrid_preset("gemma3-27b");
  EXPECT_EQ(gemma.groups[0].layers.size(), 10u);
  EXPECT_EQ(gemma.groups[1].layers.size(), 52u);
  EXPECT_EQ(gemma.groups[1].window_tokens, 1024u);
  EXPECT_EQ(gemma.groups[1].bytes_per_block, 52u * 2 * 16 * 128 * 2 * 16);
  const auto scout = *find_hybrid_preset("llama4-scout");
  EXPECT_EQ(scout.groups[1].kind, AttentionKind::kChunkedLocal);
  EXPECT_EQ(scout.groups[1].window_tokens, 8192u);
  EXPECT_EQ(scout.groups[0].layers.front(), 3u);
  EXPECT_EQ(scout.groups[1].layers.size(), 36u);
  const auto qwen = *find_hybrid_preset("qwen3-next-80b");
  EXPECT_EQ(qwen.groups[1].kind, AttentionKind::kRecurrentState);
  EXPECT_EQ(qwen.groups[1].bytes_per_block, 36ull * 1'097'728);
  EXPECT_EQ(qwen.groups[0].bytes_per_block, 12u * 2 * 2 * 256 * 2 * 16);
  const auto dense = *find_hybrid_preset("llama3.1-8b");
  ASSERT_EQ(dense.groups.size(), 1u);
  EXPECT_EQ(dense.groups[0].bytes_per_block, 32u * 2 * 8 * 128 * 2 * 16);
}

TEST(HybridPreset, UnknownPresetListsThePresets) {
  EXPECT_FALSE(find_hybrid_preset("gpt-oss-21b").has_value());
  const char* argv[] = {"kvbm-replay", "--model-groups", "gpt-oss-21b"};
  std::string error;
  (void)parse_options(3, argv, error);
  EXPECT_NE(error.find("unknown preset 'gpt-oss-21b'"), std::string::npos) << error;
  for (const auto& p : hybrid_presets()) {
    EXPECT_NE(error.find(std::string(p.name)), std::string::npos) << error;
  }
}

TEST(HybridPreset, OptionsThatDoNotGoTogetherAreRefused) {
  auto error_for = [](std::vector<const char*> args) {
    args.insert(args.begin(), "kvbm-replay");
    std::string error;
    (void)parse_options(static_cast<int>(args.size()), args.data(), error);
    return error;
  };
  EXPECT_EQ(error_for({"--model-groups", "gpt-oss-20b", "--hybrid-cache", "tails"}), "");
  EXPECT_NE(error_for({"--model-groups", "gpt-oss-20b", "--model-groups-file", "f"}), "");
  EXPECT_NE(error_for({"--model-groups", "gpt-oss-20b", "--instances", "2"}).find("--instances"),
            std::string::npos);
  EXPECT_NE(error_for({"--model-groups", "gpt-oss-20b", "--hybrid-cache", "some"}), "");
  EXPECT_NE(error_for({"--model-groups", "gpt-oss-20b", "--hybrid-weight", "0"}), "");
  EXPECT_NE(error_for({"--hybrid-cache", "tails"}), "");
  EXPECT_EQ(error_for({"--model-groups", "qwen3-next-80b", "--hybrid-snapshots", "every:4"}), "");
  EXPECT_EQ(error_for({"--model-groups", "qwen3-next-80b", "--hybrid-snapshots", "step_end"}), "");
  EXPECT_NE(error_for({"--model-groups", "qwen3-next-80b", "--hybrid-snapshots", "every:0"}), "");
  EXPECT_NE(error_for({"--model-groups", "qwen3-next-80b", "--hybrid-snapshots", "all"}), "");
  EXPECT_NE(error_for({"--model-groups", "gemma3-27b", "--eviction", "multi_level_lru"}), "");
}

TEST(HybridPreset, ParsesAGroupFile) {
  const HybridModel m = parse_model_groups(kGood, "groups.json");
  ASSERT_EQ(m.groups.size(), 2u);
  EXPECT_EQ(m.groups[1].kind, AttentionKind::kSlidingWindow);
  EXPECT_EQ(m.groups[1].window_tokens, 128u);
  EXPECT_EQ(m.groups[1].name, "swa");
  EXPECT_EQ(m.groups[1].id, GroupId{1});
  EXPECT_EQ(m.g1_weights, (std::vector<double>{1.0, 0.25}));
  test::ScratchDir dir("hybrid-preset");
  const auto path = dir.path() / "groups.json";
  std::ofstream(path) << kGood;
  EXPECT_EQ(read_model_groups_file(path).groups, m.groups);
  EXPECT_THROW((void)read_model_groups_file(dir.path() / "missing.json"), UsageError);
}

// Each malformed file: the error names the field at fault.
TEST(HybridPreset, AMalformedFileNamesTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"[", "not valid JSON"},
      {"{}", "groups: expected a non-empty JSON list"},
      {"[]", "groups: expected a non-empty JSON list"},
      {R"([{"tokens_per_block": 16, "bytes_per_block": 1, "layers": [0]}])", "groups[0].kind"},
      {R"([{"kind": "swa", "tokens_per_block": 16, "bytes_per_block": 1, "layers": [0]}])",
       "groups[0].kind: expected full, sliding_window"},
      {R"([{"kind": "full", "tokens_per_block": 16, "bytes_per_block": -4, "layers": [0]}])",
       "groups[0].bytes_per_block: expected an integer"},
      {R"([{"kind": "full", "tokens_per_block": 0, "bytes_per_block": 1, "layers": [0]}])",
       "groups[0].tokens_per_block"},
      {R"([{"kind": "full", "tokens_per_block": 16, "bytes_per_block": 1}])",
       "groups[0].layers: missing"},
      {R"([{"kind": "full", "tokens_per_block": 16, "bytes_per_block": 1, "layers": [0, "a"]}])",
       "groups[0].layers[1]"},
      {R"([{"kind": "sliding_window", "tokens_per_block": 16, "bytes_per_block": 1,
            "layers": [0]}])",
       "groups[0].window: missing"},
      {R"([{"kind": "full", "window": 8, "tokens_per_block": 16, "bytes_per_block": 1,
            "layers": [0]}])",
       "groups[0].window: a full group has no window"},
      {R"([{"kind": "full", "tokens_per_block": 16, "bytes_per_block": 1, "layers": [0],
            "windw": 3}])",
       "groups[0].windw: unknown field"},
      {R"([{"kind": "full", "tokens_per_block": 16, "bytes_per_block": 1, "layers": [0],
            "g1_weight": 0}])",
       "groups[0].g1_weight"},
      {R"([{"kind": "full", "tokens_per_block": 16, "bytes_per_block": 1, "layers": [0]},
           {"kind": "chunked_local", "chunk": 100, "tokens_per_block": 16, "bytes_per_block": 1,
            "layers": [1]}])",
       "chunk"},
      {R"([{"kind": "full", "tokens_per_block": 16, "bytes_per_block": 1, "layers": [0]},
           {"kind": "full", "tokens_per_block": 16, "bytes_per_block": 1, "layers": [0]}])",
       "layer"},
  };
  for (const auto& [text, field] : cases) {
    const std::string e = error_of(text);
    EXPECT_NE(e.find("groups.json"), std::string::npos) << text << " -> " << e;
    EXPECT_NE(e.find(field), std::string::npos)
        << text << " -> '" << e << "' lacks '" << field << "'";
  }
  EXPECT_EQ(error_of(kGood), "");
}

}  // namespace hybrid_preset_test
}  // namespace kvbm::replay
