// Tests of replay/options.h: sizes with units and the command line.

#include "replay/options.h"

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "replay/model_preset.h"

namespace kvbm::replay {
namespace options_test {

Options parse(std::vector<const char*> args, std::string& error) {
  args.insert(args.begin(), "kvbm-replay");
  return parse_options(static_cast<int>(args.size()), args.data(), error);
}

TEST(ReplayOptions, ParsesByteSizesWithUnits) {
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("64KiB"), 64u * 1024);
  EXPECT_EQ(parse_bytes("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_bytes("2g"), 2ull << 30);
  EXPECT_EQ(parse_bytes("1.5M"), 3u * 512 * 1024);
  EXPECT_EQ(parse_bytes("10MB"), 10'000'000u);
  EXPECT_EQ(parse_bytes("1kB"), 1000u);
  EXPECT_FALSE(parse_bytes("").has_value());
  EXPECT_FALSE(parse_bytes("GiB").has_value());
  EXPECT_FALSE(parse_bytes("12 parsecs").has_value());
  EXPECT_FALSE(parse_bytes("-1").has_value());
}

TEST(ReplayOptions, DefaultsShowEveryTier) {
  std::string error;
  const Options o = parse({}, error);
  EXPECT_EQ(error, "");
  EXPECT_EQ(o.block_tokens, 512u);
  EXPECT_GT(o.device.blocks, 0u);
  EXPECT_GT(o.host.blocks, 0u);
  EXPECT_GT(o.disk.blocks, 0u);
  EXPECT_EQ(o.g1_g2, OffloadMode::kOnEviction);  // deterministic, and exact against the tier model
  EXPECT_EQ(o.g2_g3, OffloadMode::kOnEviction);
  EXPECT_FALSE(o.overlap_offload);
  EXPECT_FALSE(o.metadata_only);
  EXPECT_FALSE(o.metrics_port.has_value());
}

TEST(ReplayOptions, ParsesEveryOption) {
  std::string error;
  const Options o = parse({"--trace",
                           "t.jsonl",
                           "--block-tokens=256",
                           "--layers",
                           "4",
                           "--kv-heads",
                           "8",
                           "--head-dim",
                           "128",
                           "--dtype-bytes",
                           "2",
                           "--outer-dim",
                           "1",
                           "--device-blocks",
                           "unlimited",
                           "--host-bytes",
                           "2GiB",
                           "--disk-blocks",
                           "0",
                           "--eviction",
                           "lineage",
                           "--g1-g2",
                           "on_eviction",
                           "--g2-g3",
                           "none",
                           "--min-frequency",
                           "2",
                           "--disk-dir",
                           "/d",
                           "--metadata-only",
                           "--realtime",
                           "--speed",
                           "2.5",
                           "--limit",
                           "100",
                           "--sweep",
                           "1000,64MiB,unlimited",
                           "--plot",
                           "p.svg",
                           "--json",
                           "--quiet",
                           "--strict",
                           "--metrics-port",
                           "0",
                           "--metrics-address",
                           "::1"},
                          error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(o.trace, "t.jsonl");
  EXPECT_EQ(o.block_tokens, 256u);
  EXPECT_EQ(o.layers, 4u);
  EXPECT_EQ(o.inner_dim, 8u * 128);
  EXPECT_EQ(o.dtype_bytes, 2u);
  EXPECT_EQ(o.outer_dim, 1u);
  EXPECT_TRUE(o.device.unlimited);
  EXPECT_EQ(o.host.bytes, 2ull << 30);
  EXPECT_EQ(o.host.blocks, 0u);
  EXPECT_EQ(o.disk.blocks, 0u);
  EXPECT_EQ(o.eviction, EvictionPolicy::kLineage);
  EXPECT_EQ(o.g1_g2, OffloadMode::kOnEviction);
  EXPECT_EQ(o.g2_g3, OffloadMode::kNone);
  EXPECT_EQ(o.min_frequency, 2u);
  EXPECT_EQ(o.disk_dir, "/d");
  EXPECT_TRUE(o.metadata_only);
  EXPECT_TRUE(o.realtime);
  EXPECT_DOUBLE_EQ(o.speed, 2.5);
  EXPECT_EQ(o.limit, 100u);
  ASSERT_EQ(o.sweep.size(), 3u);
  EXPECT_EQ(o.sweep[0].blocks, 1000u);
  EXPECT_EQ(o.sweep[1].bytes, 64u << 20);
  EXPECT_TRUE(o.sweep[2].unlimited);
  EXPECT_EQ(o.plot, "p.svg");
  EXPECT_TRUE(o.json && o.quiet && o.strict);
  EXPECT_EQ(o.metrics_port, 0);
  EXPECT_EQ(o.metrics_address, "::1");

  const Options both = parse({"--offload-mode", "none"}, error);
  EXPECT_EQ(both.g1_g2, OffloadMode::kNone);
  EXPECT_EQ(both.g2_g3, OffloadMode::kNone);
}

TEST(ReplayOptions, RejectsBadArgumentsNamingThem) {
  const std::vector<std::vector<const char*>> bad = {
      {"--bogus"},
      {"--limit"},
      {"--limit", "ten"},
      {"--block-tokens", "0"},
      {"--eviction", "fifo"},
      {"--g1-g2", "sometimes"},
      {"--host-blocks", "2GiB"},
      {"--host-bytes", "lots"},
      {"--speed", "0"},
      {"--metrics-port", "70000"},
      {"--sweep", "1000,,unlimited"},
      {"--outer-dim", "3"},
      {"--inner-dim", "4", "--kv-heads", "2"},
      {"--json=yes"},
      {"--soak", "0"},
      {"--soak", "10", "--realtime"},
  };
  for (const auto& args : bad) {
    std::string error;
    (void)parse(args, error);
    EXPECT_NE(error, "") << args[0];
    if (std::string(args[0]).starts_with("--") && std::string(args[0]) != "--inner-dim") {
      const std::string name = std::string(args[0]).substr(0, std::string(args[0]).find('='));
      EXPECT_NE(error.find(name), std::string::npos) << error;
    }
  }
}

// --remote checks each URL by the remote store's own grammar, and names the option.
TEST(ReplayOptions, RemoteUrlsAreCheckedByTheStoresGrammar) {
  std::string error;
  Options o =
      parse({"--remote", "redis://127.0.0.1:6379/0", "--remote=unix:///run/r.sock?db=2"}, error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(o.remote,
            (std::vector<std::string>{"redis://127.0.0.1:6379/0", "unix:///run/r.sock?db=2"}));
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"redis://", "names no host"},
      {"http://x:1", "is not understood; use redis://"},
      {"redis://host:notaport", "has a bad port 'notaport'; give a number from 1 to 65535"},
      {"redis://host:70000", "has port 70000, out of range; give a number from 1 to 65535"},
      {"redis://host:6379/zero", "bad database number 'zero'"},
      {"unix://relative.sock", "needs an absolute socket path"},
  };
  for (const auto& [url, why] : bad) {
    (void)parse({"--remote", "redis://127.0.0.1:6379/0", "--remote", url}, error);
    EXPECT_EQ(error.rfind(std::string("--remote: '") + url + "' ", 0), 0U) << error;
    EXPECT_NE(error.find(why), std::string::npos) << error;
  }
  // A password is never repeated in the message.
  (void)parse({"--remote", "redis://:s3cret@host:port"}, error);
  EXPECT_EQ(error.find("s3cret"), std::string::npos) << error;
  EXPECT_NE(error.find("'redis://:****@host:port' has a bad port 'port'"), std::string::npos)
      << error;
}

TEST(ReplayOptions, UsageMentionsEveryOption) {
  const std::string u = usage();
  for (const char* opt : {"--trace",
                          "--block-tokens",
                          "--layers",
                          "--kv-heads",
                          "--inner-dim",
                          "--dtype-bytes",
                          "--outer-dim",
                          "--device-blocks",
                          "--host-bytes",
                          "--disk-blocks",
                          "--eviction",
                          "--g1-g2",
                          "--g2-g3",
                          "--offload-mode",
                          "--min-frequency",
                          "--disk-dir",
                          "--metadata-only",
                          "--realtime",
                          "--speed",
                          "--limit",
                          "--sweep",
                          "--plot",
                          "--json",
                          "--quiet",
                          "--strict",
                          "--metrics-port",
                          "--soak",
                          "--model",
                          "--overlap-offload",
                          "--prefill-tokens-per-s",
                          "--g2-gbps",
                          "--g3-gbps",
                          "--instances",
                          "--assign",
                          "--remote",
                          "--router",
                          "--router-events",
                          "--router-load-weight",
                          "--router-tier-cost",
                          "--sweep-instances",
                          "--sweep-routers"}) {
    EXPECT_NE(u.find(opt), std::string::npos) << opt;
  }
}

TEST(ReplayOptions, ModelPresetsSetTheRealLayout) {
  std::string error;
  const Options o = parse({"--model", "llama3-8b"}, error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(o.layers, 32u);
  EXPECT_EQ(o.outer_dim, 2u);
  EXPECT_EQ(o.inner_dim, 8u * 128);
  EXPECT_EQ(o.dtype_bytes, 2u);
  // 128 KiB of K and V per token: a 512-token block weighs 64 MiB.
  EXPECT_EQ(std::uint64_t{o.layers} * o.outer_dim * o.inner_dim * o.dtype_bytes * 512, 64ull << 20);
  const auto qwen = find_model_preset("qwen2.5-7b");
  ASSERT_TRUE(qwen.has_value());
  EXPECT_EQ(qwen->bytes_per_token() * 512, 28ull << 20);
  EXPECT_EQ(find_model_preset("llama3-70b")->bytes_per_token() * 512, 160ull << 20);

  (void)parse({"--model", "gpt-7"}, error);
  EXPECT_NE(error.find("unknown model 'gpt-7'; known: llama3-8b"), std::string::npos) << error;
  (void)parse({"--model", "llama3-8b", "--layers", "4"}, error);
  EXPECT_NE(error.find("give --model or the layout options, not both"), std::string::npos) << error;
}

TEST(ReplayOptions, OverlapOffloadNeedsWriteThrough) {
  std::string error;
  (void)parse({"--overlap-offload"}, error);
  EXPECT_NE(error.find("--overlap-offload applies to write-through copies"), std::string::npos)
      << error;
  const Options o = parse({"--overlap-offload", "--offload-mode", "write_through"}, error);
  EXPECT_EQ(error, "");
  EXPECT_TRUE(o.overlap_offload);
}

TEST(ReplayOptions, SavingsInputsArePositiveNumbers) {
  std::string error;
  const Options o =
      parse({"--prefill-tokens-per-s", "12000", "--g2-gbps", "50", "--g3-gbps", "3.5"}, error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(o.prefill_tokens_per_s, 12000);
  EXPECT_EQ(o.g2_gb_per_s, 50);
  EXPECT_EQ(o.g3_gb_per_s, 3.5);
  for (const char* bad : {"0", "-3", "fast", "1e999", "nan"}) {
    (void)parse({"--g3-gbps", bad}, error);
    EXPECT_NE(error.find("--g3-gbps: expected a positive number"), std::string::npos)
        << bad << ": " << error;
  }
}

TEST(ReplayOptions, RouterOptions) {
  std::string error;
  Options o = parse({"--instances", "4", "--router", "kv", "--router-events", "zmq",
                     "--router-load-weight", "0.5", "--router-tier-cost", "0.1,0.25,0.5"},
                    error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(o.router, router::RoutePolicy::kKv);
  EXPECT_TRUE(o.router_zmq);
  EXPECT_EQ(o.router_load_weight, 0.5);
  ASSERT_TRUE(o.router_tier_cost.has_value());
  EXPECT_EQ((*o.router_tier_cost)[2], 0.5);

  o = parse({"--sweep-instances", "1,2,4,8"}, error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(o.sweep_instances, (std::vector<std::uint32_t>{1, 2, 4, 8}));
  EXPECT_EQ(o.sweep_routers.size(), 3u);  // kv, round_robin and random by default
  o = parse({"--sweep-instances", "2", "--sweep-routers", "kv,random"}, error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(o.sweep_routers, (std::vector<router::RoutePolicy>{router::RoutePolicy::kKv,
                                                               router::RoutePolicy::kRandom}));

  const std::vector<std::pair<std::vector<const char*>, const char*>> bad = {
      {{"--router", "nearest"}, "kv, round_robin or random"},
      {{"--router", "kv", "--assign", "random"}, "not both"},
      {{"--router-events", "zmq"}, "need --router"},
      {{"--router", "kv", "--router-events", "tcp"}, "in_process, zmq or none"},
      {{"--router-events", "none"}, "need --router"},
      {{"--router", "kv", "--router-tier-cost", "0.1,0.2"}, "three numbers"},
      {{"--router", "kv", "--router-load-weight", "-1"}, ">= 0"},
      {{"--sweep-instances", "1,0"}, "instance counts"},
      {{"--sweep-instances", "2", "--sweep", "1000"}, "one of them"},
      {{"--sweep-instances", "2", "--instances", "4"}, "leave out --instances"},
      {{"--router", "kv", "--soak", "10"}, "--soak"},
  };
  for (const auto& [args, says] : bad) {
    (void)parse(args, error);
    EXPECT_NE(error.find(says), std::string::npos) << args[0] << ": " << error;
  }
}

}  // namespace options_test
}  // namespace kvbm::replay
