// Tests of the kvbm-replay program (tools/replay/main.cpp), run as a child
// process: exit status and messages for bad traces, valid --json whatever the
// trace path holds, and a prompt stop on SIGINT during a --realtime wait.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "replay_test_util.h"

extern char** environ;

namespace kvbm::replay {
namespace cli_test {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

const std::string kLine =
    R"({"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [1, 2]})";

// Arguments for a small, quick replay of a trace at `trace`.
std::vector<std::string> small_replay(const fs::path& trace) {
  return {"--trace",         trace.string(), "--block-tokens", "4",
          "--device-blocks", "64",           "--host-blocks",  "0",
          "--quiet"};
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A running kvbm-replay whose stdout and stderr go to files in `dir`.
class Child {
 public:
  Child(const std::vector<std::string>& args, const fs::path& dir)
      : out_(dir / "stdout"), err_(dir / "stderr") {
    std::vector<std::string> storage = {KVBM_REPLAY_BINARY};
    storage.insert(storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) pid_ = -1;
  }
  ~Child() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  /// Waits up to `limit`; returns the exit status (128 + signal when killed),
  /// or -1 when the child is still running.
  int wait(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (!status_) {
      int st = 0;
      const pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      } else if (Clock::now() >= deadline) {
        return -1;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    return *status_;
  }

  [[nodiscard]] std::string out() const { return slurp(out_); }
  [[nodiscard]] std::string err() const { return slurp(err_); }

 private:
  fs::path out_, err_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

struct Outcome {
  int status;
  std::string out, err;
};

Outcome run(const std::vector<std::string>& args, const fs::path& dir) {
  Child c(args, dir);
  const int status = c.wait(std::chrono::seconds(120));
  return {status, c.out(), c.err()};
}

// Returns the line of /proc/<pid>/status that starts with `key`, or "".
std::string proc_status(pid_t pid, const std::string& key) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return line.substr(key.size());
  }
  return {};
}

TEST(ReplayCli, DirectoryAsTraceFailsWithAMessage) {
  const test::ScratchDir dir("kvbm-cli-dir");
  const fs::path trace_dir = dir.path() / "traces";
  fs::create_directories(trace_dir);
  const Outcome r = run(small_replay(trace_dir), dir.path());
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
}

TEST(ReplayCli, NumberOverflowSkipsOneLineAndReplaysTheRest) {
  const test::ScratchDir dir("kvbm-cli-overflow");
  const fs::path trace = dir.path() / "trace.jsonl";
  std::ofstream(trace)
      << R"({"timestamp": 0, "input_length": 1e999, "output_length": 1, "hash_ids": [1]})"
      << "\n"
      << kLine << "\n";
  auto args = small_replay(trace);
  args.push_back("--json");
  const Outcome r = run(args, dir.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("trace.jsonl:1: invalid JSON: number overflow"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["trace"]["invalid_lines"], 1);
  EXPECT_EQ(j["result"]["requests"], 1);
}

TEST(ReplayCli, JsonIsValidWhenTheTracePathIsNotUtf8) {
  const test::ScratchDir dir("kvbm-cli-utf8");
  const fs::path trace = dir.path() / "trace-\xff\xfe.jsonl";
  std::ofstream(trace) << kLine << "\n";
  const std::string replacement = "\xef\xbf\xbd";  // U+FFFD
  {
    auto args = small_replay(trace);
    args.push_back("--json");
    const Outcome r = run(args, dir.path());
    ASSERT_EQ(r.status, 0) << r.err;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
    EXPECT_NE(j["trace"]["source"].get<std::string>().find("trace-" + replacement),
              std::string::npos);
    EXPECT_EQ(j["result"]["requests"], 1);
  }
  {  // A sweep writes the trace path and the plot path.
    auto args = small_replay(trace);
    const std::string plot = (dir.path() / "plot-\xff.svg").string();
    args.insert(args.end(), {"--json", "--sweep", "8,16", "--plot", plot});
    const Outcome r = run(args, dir.path());
    ASSERT_EQ(r.status, 0) << r.err;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
    EXPECT_NE(j["plot"].get<std::string>().find("plot-" + replacement), std::string::npos);
    EXPECT_EQ(j["sweep"].size(), 2u);
  }
}

TEST(ReplayCli, SigintDuringARealtimeWaitStopsPromptly) {
  const test::ScratchDir dir("kvbm-cli-sigint");
  const fs::path trace = dir.path() / "trace.jsonl";
  // The second request is due a minute after the first.
  std::ofstream(trace)
      << kLine << "\n"
      << R"({"timestamp": 60000, "input_length": 8, "output_length": 1, "hash_ids": [1, 3]})"
      << "\n";
  auto args = small_replay(trace);
  args.erase(args.end() - 1);  // not --quiet: the "interrupted" note is checked
  args.insert(args.end(), {"--realtime", "--json"});
  Child c(args, dir.path());
  ASSERT_GT(c.pid(), 0);

  // Wait until the SIGINT handler is installed (SigCgt bit 1), then until the
  // main thread has been asleep for 100 ms: waiting for the second request.
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  auto handler_installed = [&] {
    const std::string mask = proc_status(c.pid(), "SigCgt:");
    return !mask.empty() && (std::stoull(mask, nullptr, 16) & (1ULL << (SIGINT - 1))) != 0;
  };
  while (!handler_installed()) {
    ASSERT_LT(Clock::now(), give_up) << "the SIGINT handler was never installed\n" << c.err();
    ASSERT_EQ(c.wait(std::chrono::milliseconds(5)), -1) << "exited early\n" << c.err();
  }
  for (int asleep = 0; asleep < 20;) {
    ASSERT_LT(Clock::now(), give_up) << "the replay never went to sleep\n" << c.err();
    const std::string state = proc_status(c.pid(), "State:");
    asleep = state.find('S') != std::string::npos ? asleep + 1 : 0;
    ASSERT_EQ(c.wait(std::chrono::milliseconds(5)), -1) << "exited early\n" << c.err();
  }

  const auto sent = Clock::now();
  ASSERT_EQ(::kill(c.pid(), SIGINT), 0);
  const int status = c.wait(std::chrono::seconds(10));
  const double seconds = std::chrono::duration<double>(Clock::now() - sent).count();
  ASSERT_NE(status, -1) << "still waiting 10 s after SIGINT\n" << c.err();
  std::cout << "stopped " << seconds * 1e3 << " ms after SIGINT\n";
  EXPECT_EQ(status, 130) << c.err();
  EXPECT_LT(seconds, 1.0);  // ~10 ms; slack for a loaded sanitizer build
  EXPECT_NE(c.err().find("interrupted after 1 requests"), std::string::npos) << c.err();
  const auto j = nlohmann::json::parse(c.out());
  EXPECT_EQ(j["result"]["requests"], 1);
}

}  // namespace cli_test
}  // namespace kvbm::replay

namespace kvbm::replay {
namespace cli_test {

TEST(ReplayCli, PersistTwiceStartsTheSecondRunWarmFromG3) {
  const test::ScratchDir dir("kvbm-cli-persist");
  const fs::path disk = dir.path() / "g3";
  fs::create_directories(disk);
  fs::permissions(disk, fs::perms::owner_all, fs::perm_options::replace);
  const std::vector<std::string> args = {"--disk-dir", disk.string(), "--persist", "--limit",
                                         "800",        "--json",      "--quiet"};
  const Outcome first = run(args, dir.path());
  ASSERT_EQ(first.status, 0) << first.err;
  const auto a = nlohmann::json::parse(first.out)["result"];
  EXPECT_EQ(a["recovered_blocks"], 0);
  const Outcome second = run(args, dir.path());
  ASSERT_EQ(second.status, 0) << second.err;
  const auto b = nlohmann::json::parse(second.out)["result"];
  // The second run starts with the first run's blocks in G3 and serves them,
  // every one verified byte for byte.
  EXPECT_GT(b["recovered_blocks"].get<std::uint64_t>(), 0U);
  EXPECT_GT(b["hits"]["G3"]["blocks"].get<std::uint64_t>(),
            a["hits"]["G3"]["blocks"].get<std::uint64_t>());
  EXPECT_EQ(b["verification"]["failures"], 0);
  EXPECT_EQ(b["verification"]["blocks"], b["hits"]["total"]["blocks"]);
  EXPECT_EQ(b["audit"], "");
  // One instance keeps G3 in the directory itself, as it always has.
  EXPECT_TRUE(fs::is_regular_file(disk / "kvbm.slots"));
  EXPECT_FALSE(fs::exists(disk / "instance-0"));
}

// Several instances on one --disk-dir: each keeps its persistent G3 (a file
// one process locks) in its own subdirectory, and a second run of the same
// command recovers each instance's blocks from its own.
TEST(ReplayCli, PersistWithInstancesKeepsAG3DirectoryPerInstance) {
  constexpr std::size_t kInstances = 3;
  const test::ScratchDir dir("kvbm-cli-persist-instances");
  const fs::path disk = dir.path() / "g3";
  fs::create_directories(disk);
  fs::create_directories(disk / "instance-1");  // one of them there already: used as it is
  std::vector<std::string> args = {"--disk-dir", disk.string(), "--persist", "--instances",
                                   std::to_string(kInstances)};
  for (const char* a : {"--limit", "240", "--device-blocks", "64", "--host-blocks", "128",
                        "--disk-blocks", "2048", "--json", "--quiet"}) {
    args.emplace_back(a);
  }
  const Outcome first = run(args, dir.path());
  ASSERT_EQ(first.status, 0) << first.err;
  const auto a = nlohmann::json::parse(first.out)["result"];
  EXPECT_EQ(a["recovered_blocks"], 0);
  EXPECT_FALSE(fs::exists(disk / "kvbm.slots"));
  for (std::size_t i = 0; i < kInstances; ++i) {
    const fs::path sub = disk / ("instance-" + std::to_string(i));
    EXPECT_TRUE(fs::is_regular_file(sub / "kvbm.slots")) << sub;
    EXPECT_EQ(a["instances"]["each"][i]["recovered_blocks"], 0) << i;
  }
  const Outcome second = run(args, dir.path());
  ASSERT_EQ(second.status, 0) << second.err;
  const auto b = nlohmann::json::parse(second.out)["result"];
  ASSERT_EQ(b["instances"]["each"].size(), kInstances);
  std::uint64_t recovered = 0;
  for (std::size_t i = 0; i < kInstances; ++i) {
    const auto n = b["instances"]["each"][i]["recovered_blocks"].get<std::uint64_t>();
    EXPECT_GT(n, 0U) << "instance " << i << " recovered nothing from its own directory";
    recovered += n;
  }
  EXPECT_EQ(b["recovered_blocks"].get<std::uint64_t>(), recovered);
  EXPECT_GT(b["hits"]["G3"]["blocks"].get<std::uint64_t>(),
            a["hits"]["G3"]["blocks"].get<std::uint64_t>());
  EXPECT_EQ(b["verification"]["failures"], 0);
  EXPECT_EQ(b["verification"]["blocks"], b["hits"]["total"]["blocks"]);
  EXPECT_EQ(b["audit"], "");
  EXPECT_EQ(std::distance(fs::directory_iterator(disk), fs::directory_iterator()),
            static_cast<std::ptrdiff_t>(kInstances));
}

TEST(ReplayCli, PersistNeedsADiskDirectory) {
  const test::ScratchDir dir("kvbm-cli-persist-dir");
  const Outcome r = run({"--persist", "--quiet"}, dir.path());
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(
      r.err.find("--persist keeps G3 in a directory that outlives the run: add --disk-dir DIR"),
      std::string::npos)
      << r.err;
}

// --model-groups: two runs of the program print the same table, byte for byte.
TEST(ReplayCli, HybridReplayPrintsTheSameTableTwice) {
  const auto trace = test::shipped_trace_path();
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  const test::ScratchDir dir("kvbm-cli-hybrid");
  const std::vector<std::string> args = {"--trace",        *trace,  "--model-groups", "gpt-oss-20b",
                                         "--hybrid-cache", "tails", "--limit",        "100",
                                         "--quiet"};
  const Outcome a = run(args, dir.path());
  const Outcome b = run(args, dir.path());
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_NE(a.out.find("swa128"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("every pool balanced"), std::string::npos) << a.out;
  EXPECT_EQ(a.out, b.out);
}

// --model-groups with G2 and G3 (--host-blocks, --disk-blocks): the tiered replays, hits
// from the lower tiers, every pool balanced, the same JSON twice (less the wall times);
// G3 without G2 is refused.
TEST(ReplayCli, HybridReplayWithG2AndG3RepeatsAndFindsHitsBelowG1) {
  const auto trace = test::shipped_trace_path();
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  const test::ScratchDir dir("kvbm-cli-hybrid-tiers");
  const std::vector<std::string> args = {
      "--trace",         *trace,   "--model-groups", "qwen3-next-80b", "--limit",       "250",
      "--device-blocks", "300",    "--host-blocks",  "1200",           "--disk-blocks", "4800",
      "--json",          "--quiet"};
  auto parse = [](const Outcome& o) {
    nlohmann::json j = nlohmann::json::parse(o.out).at("hybrid_replay");
    for (const char* k : {"hybrid", "baseline", "hybrid_tiered", "baseline_tiered"}) {
      j.at(k).erase("wall_seconds");
    }
    return j;
  };
  const Outcome a = run(args, dir.path());
  const Outcome b = run(args, dir.path());
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  const nlohmann::json ja = parse(a);
  EXPECT_EQ(ja, parse(b));
  const auto& t = ja.at("hybrid_tiered");
  EXPECT_EQ(t.at("audit"), "");
  EXPECT_GE(t.at("hit_tokens").get<std::uint64_t>(),
            ja.at("hybrid").at("hit_tokens").get<std::uint64_t>());
  std::uint64_t lower = 0;
  for (const auto& g : t.at("groups")) {
    const auto& by_tier = g.at("tiers").at("by_tier");
    lower += by_tier.at("G2").at("hit_blocks").get<std::uint64_t>() +
             by_tier.at("G3").at("hit_blocks").get<std::uint64_t>();
  }
  EXPECT_GT(lower, 0u);
  EXPECT_GT(ja.at("config").at("g3_budget_bytes").get<std::uint64_t>(), 0u);
  const Outcome no_g2 =
      run({"--trace", *trace, "--model-groups", "gpt-oss-20b", "--disk-blocks", "100"}, dir.path());
  EXPECT_EQ(no_g2.status, 2);
  EXPECT_NE(no_g2.err.find("G3 sits behind G2"), std::string::npos) << no_g2.err;
}

// Bad input: an unknown preset lists the presets; a malformed file names its field.
TEST(ReplayCli, HybridBadInputIsRefusedWithWhatToChange) {
  const test::ScratchDir dir("kvbm-cli-hybrid-bad");
  const fs::path trace = dir.path() / "trace.jsonl";
  std::ofstream(trace) << kLine << "\n";
  const Outcome unknown = run({"--trace", trace.string(), "--model-groups", "gemma4"}, dir.path());
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.err.find("known: gpt-oss-20b, gemma3-27b"), std::string::npos) << unknown.err;
  const fs::path groups = dir.path() / "groups.json";
  std::ofstream(groups)
      << R"([{"kind": "full", "tokens_per_block": 4, "bytes_per_block": "lots", "layers": [0]}])";
  const Outcome bad = run(
      {"--trace", trace.string(), "--block-tokens", "4", "--model-groups-file", groups.string()},
      dir.path());
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("groups[0].bytes_per_block"), std::string::npos) << bad.err;
}

}  // namespace cli_test
}  // namespace kvbm::replay
