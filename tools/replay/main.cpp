// kvbm-replay: replays a request trace through kvbm's KvBlockManager and
// reports what each tier did. See docs/replay.md, or run with --help.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include "kvbm/error.h"
#include "kvbm/logging.h"
#include "replay/cluster_report.h"
#include "replay/hybrid_report.h"
#include "replay/metrics_server.h"
#include "replay/model_preset.h"
#include "replay/options.h"
#include "replay/remote_refusal.h"
#include "replay/replay.h"
#include "replay/report.h"
#include "replay/trace.h"

namespace {

// Resident memory of this process (VmRSS), in bytes; 0 when unknown.
std::size_t resident_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

using namespace kvbm::replay;
namespace fs = std::filesystem;

std::atomic<bool> g_stop{false};

extern "C" void on_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

bool g_quiet = false;

// Set when a replay's G4 still refused access at its end (replay/remote_refusal.h).
bool g_g4_refused = false;

template <class... Args>
void note(fmt::format_string<Args...> f, Args&&... args) {
  if (g_quiet) return;
  fmt::print(stderr, "[kvbm-replay] {}\n", fmt::format(f, std::forward<Args>(args)...));
}

// A temporary directory for the G3 file, removed when this goes away.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/kvbm-replay-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error("cannot create a temporary directory like " + tmpl);
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const fs::path& path() const noexcept { return path_; }

 private:
  fs::path path_;
};

// A one-line progress bar on stderr (a terminal only).
class ProgressBar {
 public:
  explicit ProgressBar(std::string label)
      : label_(std::move(label)), start_(std::chrono::steady_clock::now()) {}
  void update(std::size_t done, std::size_t total) {
    constexpr int kWidth = 30;
    const double f = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
    const int filled = static_cast<int>(f * kWidth);
    std::string bar(static_cast<std::size_t>(filled), '=');
    if (filled < kWidth) bar += '>';
    bar.resize(kWidth, ' ');
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    fmt::print(stderr, "\r{} [{}] {:3.0f}%  {}/{} requests  {:.1f} s ", label_, bar, 100 * f,
               group_digits(done), group_digits(total), s);
    std::fflush(stderr);
  }
  void finish() { fmt::print(stderr, "\r\033[K"); }

 private:
  std::string label_;
  std::chrono::steady_clock::time_point start_;
};

kvbm::TierConfig tier(const SizeOption& s, kvbm::EvictionPolicy e) {
  return kvbm::TierConfig{.blocks = s.blocks, .bytes = s.bytes, .eviction = e};
}

bool present(const SizeOption& s) { return s.unlimited || s.blocks != 0 || s.bytes != 0; }

std::string size_label(const SizeOption& s) {
  if (s.unlimited) return "unlimited";
  if (s.blocks != 0) return std::to_string(s.blocks);
  return std::to_string(s.bytes) + "B";
}

// The device tier: a SizeOption, where unlimited means room for every unique block.
kvbm::TierConfig device_tier(const SizeOption& s, const Options& o, std::size_t unique_blocks) {
  const std::size_t unlimited_blocks = std::max<std::size_t>(unique_blocks, 1);
  return s.unlimited ? kvbm::TierConfig{.blocks = unlimited_blocks, .eviction = o.eviction}
                     : tier(s, o.eviction);
}

// G3 exists only below a G2.
bool has_disk(const Options& o) { return present(o.host) && present(o.disk); }

// The router of --router or of one point of --sweep-instances.
ClusterConfig cluster_config(const Options& o, double prefill_tokens_per_s,
                             kvbm::router::RoutePolicy policy) {
  ClusterConfig c;
  c.policy = policy;
  c.options.load_weight = o.router_load_weight;
  if (o.router_tier_cost) {
    const kvbm::TierId below_g1[] = {kvbm::TierId::kG2, kvbm::TierId::kG3, kvbm::TierId::kG4};
    for (std::size_t k = 0; k < 3; ++k) c.options.tier_cost[below_g1[k]] = (*o.router_tier_cost)[k];
  }
  c.transport = o.router_no_events ? EventTransport::kNone
                : o.router_zmq     ? EventTransport::kZmq
                                   : EventTransport::kInProcess;
  c.prefill_tokens_per_s = prefill_tokens_per_s;
  return c;
}

// The savings estimate's inputs.
SavingsInputs savings_inputs(const Options& o) {
  SavingsInputs s;
  const auto preset = find_model_preset(o.model);
  // Without a preset the toy layout stands for an 8B model in the estimate.
  const double params = preset ? preset->params_billion : 8.0;
  s.prefill_tokens_per_s =
      o.prefill_tokens_per_s > 0 ? o.prefill_tokens_per_s : assumed_prefill_tokens_per_s(params);
  s.g2_gb_per_s = o.g2_gb_per_s;
  s.g3_gb_per_s = o.g3_gb_per_s;
  return s;
}

// After each soak pass: the pass's figures, resident memory and the pools' balance.
void print_soak_pass(std::size_t pass, const ReplayResult& r, kvbm::KvBlockManager& kv) {
  const std::string audit = kv.audit();
  fmt::print(stderr,
             "soak pass {:>3}: {:>9} requests {:>11} blocks  hit ratio {:6.2f}%  "
             "verify failures {}  rss {:.1f} MiB  pools {}\n",
             pass + 1, r.requests, r.blocks, 100 * r.block_hit_ratio(), r.verify_failures,
             static_cast<double>(resident_bytes()) / (1 << 20), audit.empty() ? "balanced" : audit);
}

// The ReplayConfig of the options (its disk directory, progress and stop are set apart).
ReplayConfig replay_config(const Options& o, std::size_t unique_blocks,
                           std::shared_ptr<prometheus::Registry> registry) {
  ReplayConfig rc;
  rc.layout.num_layers = o.layers;
  rc.layout.outer_dim = o.outer_dim;
  rc.layout.inner_dim = o.inner_dim;
  rc.layout.dtype_bytes = o.dtype_bytes;
  rc.layout.page_size = o.block_tokens;
  rc.device = device_tier(o.device, o, unique_blocks);
  rc.host = present(o.host) ? tier(o.host, o.eviction) : kvbm::TierConfig{};
  rc.disk = has_disk(o) ? tier(o.disk, o.eviction) : kvbm::TierConfig{};
  rc.device_to_host = o.g1_g2;
  rc.host_to_disk = o.g2_g3;
  rc.min_frequency = o.min_frequency;
  rc.hold_queued_blocks = o.hold_queued_blocks;
  rc.overlap_offload = o.overlap_offload;
  rc.persist = o.persist;
  rc.instances = o.instances;
  rc.assign_random = o.assign_random;
  rc.remote_urls = o.remote;
  rc.remote_namespace = o.remote_namespace;
  rc.model = o.model;
  rc.savings = savings_inputs(o);
  if (o.router) rc.router = cluster_config(o, rc.savings.prefill_tokens_per_s, *o.router);
  rc.move_bytes = !o.metadata_only;
  rc.realtime = o.realtime;
  rc.speed = o.speed;
  rc.metrics_registry = std::move(registry);
  rc.stop = &g_stop;
  rc.soak_seconds = o.soak_seconds;
  if (o.soak_seconds > 0) rc.on_pass = print_soak_pass;
  return rc;
}

// Parses the command line into `o`; returns the exit code when there is
// nothing to replay (an error, or --help).
std::optional<int> parse_command_line(int argc, char** argv, Options& o) {
  std::string error;
  o = parse_options(argc, argv, error);
  if (!error.empty()) {
    fmt::print(stderr, "kvbm-replay: {}\n", error);
    return 2;
  }
  if (o.help) {
    std::cout << usage();
    return 0;
  }
  return std::nullopt;
}

// Prints the trace's invalid lines (the first few, then how many more).
void print_invalid_lines(const std::string& trace_path, const Trace& trace) {
  for (const auto& e : trace.errors)
    fmt::print(stderr, "{}:{}: {}\n", trace_path, e.line, e.message);
  if (trace.error_count > trace.errors.size()) {
    fmt::print(stderr, "{}: ... and {} more invalid lines\n", trace_path,
               trace.error_count - trace.errors.size());
  }
}

// Reads the trace into `trace`; returns the exit code when it cannot be
// replayed (unreadable, or invalid lines under --strict).
std::optional<int> load_trace(const Options& o, const std::string& trace_path, Trace& trace) {
  TraceOptions topts;
  topts.block_tokens = o.block_tokens;
  topts.max_requests = o.limit;
  try {
    trace = read_trace_file(trace_path, topts);
  } catch (const std::exception& e) {
    fmt::print(stderr, "kvbm-replay: {}\n", e.what());
    return 2;
  }
  print_invalid_lines(trace_path, trace);
  if (trace.error_count != 0) {
    if (o.strict) {
      fmt::print(stderr, "kvbm-replay: {} invalid lines; stopping (--strict)\n", trace.error_count);
      return 2;
    }
    note("{} invalid lines skipped; replaying the other {} requests", trace.error_count,
         trace.requests.size());
  }
  return std::nullopt;
}

// What the replays of one command line share.
struct Session {
  const Options& o;
  const Trace& trace;
  const TraceSummary& ts;
  ReplayConfig rc;
  bool bar = false;  // a progress bar on stderr
};

// One replay with the session's configuration as it stands.
ReplayResult replay_once(Session& s, const std::string& label) {
  std::optional<ProgressBar> pb;
  if (s.bar) {
    pb.emplace(label);
    s.rc.progress = [&pb](std::size_t done, std::size_t total) { pb->update(done, total); };
  } else {
    s.rc.progress = nullptr;
  }
  ReplayResult r = run_replay(s.trace, s.rc);
  if (pb) pb->finish();
  if (const std::string m = remote_refusal_message(r.remote_stats); !m.empty()) {
    fmt::print(stderr, "kvbm-replay: {}\n", m);  // also under --quiet: the figures are wrong
    g_g4_refused = true;
  }
  if (g_stop.load()) note("interrupted after {} requests", r.requests);
  return r;
}

// No verification failure, no failed onboarding, every pool balanced.
bool passed(const ReplayResult& r) {
  return r.verify_failures == 0 && r.audit.empty() && r.onboard_failed == 0;
}

// The share of the blocks found in G1, in percent.
double g1_hit_percent(const ReplayResult& r) {
  return 100.0 * static_cast<double>(r.hit_blocks[kvbm::TierId::kG1]) /
         static_cast<double>(std::max<std::uint64_t>(r.blocks, 1));
}

// Writes a sweep's SVG; false (and a message) when the file cannot be written.
bool write_svg(const std::string& path, const std::string& svg) {
  std::ofstream out(path);
  if (!out) {
    fmt::print(stderr, "kvbm-replay: cannot write {}\n", path);
    return false;
  }
  out << svg;
  return true;
}

// The exit code once the replays are done: 1 for a failure of the replay itself, 3 when G4
// refused access (and nothing else failed), 130 when interrupted.
int exit_code(bool ok) {
  if (!ok) {
    fmt::print(
        stderr,
        "kvbm-replay: FAILED: verification failures, failed onboarding or unbalanced pools\n");
  }
  if (g_g4_refused) {
    fmt::print(stderr,
               "kvbm-replay: FAILED: G4 refused access (credentials or ACL, above); its figures "
               "are misses, not a cold cache\n");
  }
  if (!ok) return 1;
  if (g_g4_refused) return 3;
  return g_stop.load() ? 130 : 0;
}

// The replays of --sweep-instances: one per instance count and router.
std::vector<ClusterSweepPoint> replay_cluster_points(Session& s, bool& ok) {
  std::vector<ClusterSweepPoint> points;
  for (const std::uint32_t n : s.o.sweep_instances) {
    for (const kvbm::router::RoutePolicy policy : s.o.sweep_routers) {
      if (g_stop.load()) break;
      s.rc.instances = n;
      s.rc.router = cluster_config(s.o, s.rc.savings.prefill_tokens_per_s, policy);
      const std::string label = fmt::format("{} x{}", kvbm::router::to_string(policy), n);
      note("sweep: {} instances, router {}", n, kvbm::router::to_string(policy));
      ClusterSweepPoint p{n, kvbm::router::to_string(policy), replay_once(s, label)};
      ok = ok && passed(p.result);
      if (!s.o.json) {
        std::cout << fmt::format(
            "{:>2} instances, {:<11}: block hit ratio {:.2f}% (G1 {:.2f}%), "
            "load max/mean {:.2f}, {:.1f} s\n",
            n, kvbm::router::to_string(policy), 100 * p.result.block_hit_ratio(),
            g1_hit_percent(p.result), p.result.cluster ? p.result.cluster->request_imbalance : 0.0,
            p.result.wall_seconds);
      }
      points.push_back(std::move(p));
    }
  }
  return points;
}

int run_cluster_sweep(Session& s) {
  bool ok = true;
  const std::vector<ClusterSweepPoint> points = replay_cluster_points(s, ok);
  const std::string plot = s.o.plot_given ? s.o.plot : std::string("kvbm-replay-cluster.svg");
  const std::string title = fmt::format("kvbm-replay: cluster hit ratio by router ({}{})",
                                        fs::path(s.ts.source).filename().string(),
                                        s.o.remote.empty() ? "" : ", shared G4");
  if (!write_svg(plot, cluster_sweep_svg(points, title))) return 2;
  const std::optional<fs::path> png = convert_to_png(plot);
  if (s.o.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& p : points) {
      arr.push_back(
          {{"instances", p.instances}, {"router", p.router}, {"result", result_json(p.result)}});
    }
    nlohmann::json j = {{"trace", trace_json(s.ts)},
                        {"cluster_sweep", arr},
                        {"plot", plot},
                        {"png", png ? png->string() : ""}};
    std::cout << json_text(j) << "\n";
  } else {
    std::cout << "\n";
    print_cluster_sweep(std::cout, points);
    std::cout << fmt::format("\nplot: {}{}\n", plot, png ? " and " + png->string() : "");
  }
  return exit_code(ok);
}

int run_single(Session& s) {
  const ReplayResult r = replay_once(s, "replay");
  if (s.o.json) {
    nlohmann::json j = {{"trace", trace_json(s.ts)}, {"result", result_json(r)}};
    std::cout << json_text(j) << "\n";
  } else {
    print_summary(std::cout, s.ts, r);
  }
  return exit_code(passed(r));
}

// The replays of --sweep: one per G1 size.
std::vector<SweepPoint> replay_sweep_points(Session& s, bool& ok) {
  std::vector<SweepPoint> points;
  for (const auto& size : s.o.sweep) {
    if (g_stop.load()) break;
    s.rc.device = device_tier(size, s.o, s.ts.unique_blocks);
    const std::string label = size_label(size);
    note("sweep: G1 {}", label);
    SweepPoint p{label, 0, replay_once(s, "G1 " + label)};
    p.g1_blocks = p.result.capacity[kvbm::TierId::kG1];
    ok = ok && passed(p.result);
    if (!s.o.json) {
      std::cout << fmt::format("G1 {}: block hit ratio {:.2f}% (G1 {:.2f}%), {:.1f} s\n", label,
                               100 * p.result.block_hit_ratio(), g1_hit_percent(p.result),
                               p.result.wall_seconds);
    }
    points.push_back(std::move(p));
  }
  return points;
}

int run_g1_sweep(Session& s) {
  bool ok = true;
  const std::vector<SweepPoint> points = replay_sweep_points(s, ok);
  const std::string title = fmt::format("kvbm-replay: block hit ratio vs G1 capacity ({})",
                                        fs::path(s.ts.source).filename().string());
  if (!write_svg(s.o.plot, sweep_svg(points, title))) return 2;
  const std::optional<fs::path> png = convert_to_png(s.o.plot);
  if (s.o.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& p : points) {
      arr.push_back(
          {{"label", p.label}, {"g1_blocks", p.g1_blocks}, {"result", result_json(p.result)}});
    }
    nlohmann::json j = {{"trace", trace_json(s.ts)},
                        {"sweep", arr},
                        {"plot", s.o.plot},
                        {"png", png ? png->string() : ""}};
    std::cout << json_text(j) << "\n";
  } else {
    std::cout << "\n";
    print_sweep(std::cout, points);
    std::cout << fmt::format("\nplot: {}{}\n", s.o.plot, png ? " and " + png->string() : "");
  }
  return exit_code(ok);
}

int run(int argc, char** argv) {
  Options o;
  if (const auto code = parse_command_line(argc, argv, o)) return *code;
  g_quiet = o.quiet;
  kvbm::logger()->set_level(o.quiet ? spdlog::level::err : spdlog::level::info);

  const std::string trace_path = o.trace.empty() ? default_trace_path() : o.trace;
  if (trace_path.empty()) {
    fmt::print(
        stderr,
        "kvbm-replay: the shipped trace examples/data/conversation_trace.jsonl was not found; "
        "give one with --trace PATH\n");
    return 2;
  }
  Trace trace;
  if (const auto code = load_trace(o, trace_path, trace)) return *code;
  const TraceSummary ts{trace_path, trace.lines, trace.error_count, unique_blocks(trace)};
  if (!o.model_groups.empty() || !o.model_groups_file.empty()) {
    std::signal(SIGINT, on_signal);
    return run_hybrid_command(o, trace, ts, std::cout, &g_stop);
  }

  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<MetricsServer> server;
  if (o.metrics_port) {
    server = std::make_unique<MetricsServer>(o.metrics_address, *o.metrics_port, registry);
    note("serving metrics at {}", server->url());
  }
  Session s{.o = o, .trace = trace, .ts = ts, .rc = replay_config(o, ts.unique_blocks, registry)};
  std::optional<TempDir> tmp;
  if (has_disk(o)) {
    if (o.disk_dir.empty()) {
      tmp.emplace();
      s.rc.disk_directory = tmp->path();
    } else {
      s.rc.disk_directory = o.disk_dir;
    }
  }
  s.bar = !o.quiet && ::isatty(STDERR_FILENO) != 0;

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  if (!o.sweep_instances.empty()) return run_cluster_sweep(s);
  if (o.sweep.empty()) return run_single(s);
  return run_g1_sweep(s);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const kvbm::UsageError& e) {
    fmt::print(stderr, "kvbm-replay: invalid configuration: {}\n", e.what());
    if (std::string_view(e.what()).find("cannot allocate") != std::string_view::npos) {
      fmt::print(
          stderr,
          "kvbm-replay: a real model's blocks are large (--model): replay with --metadata-only, "
          "or give the tiers in bytes (--device-bytes 8GiB --host-bytes 32GiB ...)\n");
    }
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kvbm-replay: {}\n", e.what());
    return 1;
  }
}
