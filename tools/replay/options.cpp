#include "replay/options.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "kvbm/remote/remote_store.h"
#include "replay/model_preset.h"

namespace kvbm::replay {

namespace {

template <class Int>
std::optional<Int> parse_int(std::string_view s) {
  Int v{};
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

bool below(std::uint32_t v, std::uint32_t min) { return v < min; }

std::optional<double> parse_double(std::string_view s) {
  if (s.empty()) return std::nullopt;
  std::string copy(s);
  char* end = nullptr;
  const double v = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<EvictionPolicy> parse_eviction(std::string_view s) {
  for (const auto p :
       {EvictionPolicy::kLru, EvictionPolicy::kMultiLevelLru, EvictionPolicy::kLineage}) {
    if (s == to_string(p)) return p;
  }
  return std::nullopt;
}

std::optional<router::RoutePolicy> parse_policy(std::string_view s) {
  for (const auto p :
       {router::RoutePolicy::kKv, router::RoutePolicy::kRoundRobin, router::RoutePolicy::kRandom}) {
    if (s == router::to_string(p)) return p;
  }
  return std::nullopt;
}

std::optional<OffloadMode> parse_mode(std::string_view s) {
  for (const auto m : {OffloadMode::kNone, OffloadMode::kWriteThrough, OffloadMode::kOnEviction}) {
    if (s == to_string(m)) return m;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::size_t> parse_bytes(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  const auto number = parse_double(text.substr(0, i));
  if (!number || *number < 0) return std::nullopt;
  const std::string unit = lower(text.substr(i));
  double mult = 1;
  if (unit.empty() || unit == "b") {
    mult = 1;
  } else if (unit == "k" || unit == "kib") {
    mult = 1024.0;
  } else if (unit == "m" || unit == "mib") {
    mult = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gib") {
    mult = 1024.0 * 1024 * 1024;
  } else if (unit == "t" || unit == "tib") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else if (unit == "kb") {
    mult = 1e3;
  } else if (unit == "mb") {
    mult = 1e6;
  } else if (unit == "gb") {
    mult = 1e9;
  } else if (unit == "tb") {
    mult = 1e12;
  } else {
    return std::nullopt;
  }
  const double v = *number * mult;
  if (v >= static_cast<double>(std::numeric_limits<std::size_t>::max())) return std::nullopt;
  return static_cast<std::size_t>(v);
}

std::optional<SizeOption> parse_size(std::string_view text, bool allow_unlimited) {
  if (allow_unlimited && (text == "unlimited" || text == "inf"))
    return SizeOption{.unlimited = true};
  if (auto n = parse_int<std::size_t>(text)) return SizeOption{.blocks = *n};
  if (auto b = parse_bytes(text)) return SizeOption{.bytes = *b};
  return std::nullopt;
}

std::string default_trace_path() {
  for (const char* p : {KVBM_REPLAY_SOURCE_DATA, KVBM_REPLAY_INSTALLED_DATA}) {
    std::error_code ec;
    if (std::filesystem::exists(p, ec)) return p;
  }
  return {};
}

Options parse_options(int argc, const char* const* argv, std::string& error) {
  Options o;
  error.clear();
  auto fail = [&error](std::string msg) {
    error = std::move(msg);
    return Options{};
  };
  bool inner_given = false;
  bool layout_given = false;  // any of the layout options
  std::optional<std::uint32_t> kv_heads;
  std::optional<std::uint32_t> head_dim;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool has_inline = false;
    if (arg.starts_with("--")) {
      if (const auto eq = arg.find('='); eq != std::string_view::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_inline = true;
      }
    }
    // Takes the option's value: "--x=v" or "--x v".
    auto take = [&](std::string_view& out) -> bool {
      if (has_inline) {
        out = value;
        return true;
      }
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    auto flag = [&]() -> bool { return !has_inline; };
    std::string_view v;
    auto need = [&](const char* what) -> std::string {
      return std::string(arg) + " needs " + what;
    };
#define KVBM_TAKE(what) \
  if (!take(v)) return fail(need(what))
#define KVBM_U32(field, what, min)                                                         \
  do {                                                                                     \
    KVBM_TAKE(what);                                                                       \
    auto n = parse_int<std::uint32_t>(v);                                                  \
    if (!n || below(*n, (min)))                                                            \
      return fail(std::string(arg) + ": expected " what ", got '" + std::string(v) + "'"); \
    o.field = *n;                                                                          \
  } while (false)

    if (arg == "-h" || arg == "--help") {
      o.help = true;
    } else if (arg == "--trace") {
      KVBM_TAKE("a path");
      o.trace = std::string(v);
    } else if (arg == "--block-tokens") {
      KVBM_U32(block_tokens, "a token count >= 1", 1u);
    } else if (arg == "--layers") {
      layout_given = true;
      KVBM_U32(layers, "a layer count >= 1", 1u);
    } else if (arg == "--outer-dim") {
      layout_given = true;
      KVBM_U32(outer_dim, "1 or 2", 1u);
      if (o.outer_dim > 2) return fail("--outer-dim: expected 1 or 2");
    } else if (arg == "--inner-dim") {
      layout_given = true;
      KVBM_U32(inner_dim, "a count >= 1", 1u);
      inner_given = true;
    } else if (arg == "--kv-heads") {
      layout_given = true;
      KVBM_U32(inner_dim, "a count >= 1", 1u);
      kv_heads = o.inner_dim;
    } else if (arg == "--head-dim") {
      layout_given = true;
      KVBM_U32(inner_dim, "a count >= 1", 1u);
      head_dim = o.inner_dim;
    } else if (arg == "--dtype-bytes") {
      layout_given = true;
      KVBM_U32(dtype_bytes, "1, 2, 4 or 8", 1u);
    } else if (arg == "--device-blocks" || arg == "--device-bytes" || arg == "--host-blocks" ||
               arg == "--host-bytes" || arg == "--disk-blocks" || arg == "--disk-bytes") {
      KVBM_TAKE("a size");
      const bool device = arg.starts_with("--device");
      const bool bytes = arg.ends_with("-bytes");
      auto s = parse_size(v, device && !bytes);
      if (!s)
        return fail(std::string(arg) + ": expected a block count or a size like 2GiB, got '" +
                    std::string(v) + "'");
      if (bytes && s->blocks != 0) s = SizeOption{.bytes = s->blocks};  // plain number of bytes
      if (!bytes && s->bytes != 0 && !s->unlimited) {
        return fail(std::string(arg) + ": expected a block count; use " +
                    std::string(arg.substr(0, arg.size() - 6)) + "bytes for sizes");
      }
      (device ? o.device : arg.starts_with("--host") ? o.host : o.disk) = *s;
    } else if (arg == "--eviction") {
      KVBM_TAKE("lru, multi_level_lru or lineage");
      auto p = parse_eviction(v);
      if (!p)
        return fail("--eviction: expected lru, multi_level_lru or lineage, got '" + std::string(v) +
                    "'");
      o.eviction = *p;
    } else if (arg == "--g1-g2" || arg == "--g2-g3" || arg == "--offload-mode") {
      KVBM_TAKE("write_through, on_eviction or none");
      auto m = parse_mode(v);
      if (!m)
        return fail(std::string(arg) + ": expected write_through, on_eviction or none, got '" +
                    std::string(v) + "'");
      if (arg != "--g2-g3") o.g1_g2 = *m;
      if (arg != "--g1-g2") o.g2_g3 = *m;
    } else if (arg == "--min-frequency") {
      KVBM_U32(min_frequency, "a count", 0u);
    } else if (arg == "--persist") {
      if (!flag()) return fail("--persist takes no value");
      o.persist = true;
    } else if (arg == "--instances") {
      KVBM_U32(instances, "an instance count >= 1", 1u);
    } else if (arg == "--assign") {
      KVBM_TAKE("round_robin or random");
      if (v != "round_robin" && v != "random")
        return fail("--assign: expected round_robin or random, got '" + std::string(v) + "'");
      o.assign_random = v == "random";
      o.assign_given = true;
    } else if (arg == "--remote") {
      KVBM_TAKE("a Redis URL (redis://host:port/db)");
      if (v.empty()) return fail("--remote: expected a Redis URL (redis://host:port/db), got ''");
      // The store's own grammar: a URL passing here is one the instances can use.
      if (const std::string why = remote_url_error(v); !why.empty())
        return fail("--remote: " + why);
      o.remote.emplace_back(v);
    } else if (arg == "--router") {
      KVBM_TAKE("kv, round_robin or random");
      const auto p = parse_policy(v);
      if (!p)
        return fail("--router: expected kv, round_robin or random, got '" + std::string(v) + "'");
      o.router = *p;
    } else if (arg == "--router-events") {
      KVBM_TAKE("in_process or zmq");
      if (v != "in_process" && v != "zmq")
        return fail("--router-events: expected in_process or zmq, got '" + std::string(v) + "'");
      o.router_zmq = v == "zmq";
    } else if (arg == "--router-load-weight") {
      KVBM_TAKE("a number >= 0");
      const auto x = parse_double(v);
      if (!x || *x < 0)
        return fail("--router-load-weight: expected a number >= 0, got '" + std::string(v) + "'");
      o.router_load_weight = *x;
    } else if (arg == "--router-tier-cost") {
      KVBM_TAKE("three numbers G2,G3,G4");
      std::array<double, 3> c{};
      std::string_view rest = v;
      std::size_t k = 0;
      for (; k < 3 && !rest.empty(); ++k) {
        const auto comma = rest.find(',');
        const auto x = parse_double(rest.substr(0, comma));
        if (!x || *x < 0) break;
        c[k] = *x;
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      }
      if (k != 3 || !rest.empty())
        return fail(
            "--router-tier-cost: expected three numbers >= 0 for G2,G3,G4 (per token, a "
            "recomputed token costing 1), got '" +
            std::string(v) + "'");
      o.router_tier_cost = c;
    } else if (arg == "--sweep-instances") {
      KVBM_TAKE("a list of instance counts");
      o.sweep_instances.clear();
      std::string_view rest = v;
      while (!rest.empty()) {
        const auto comma = rest.find(',');
        const auto n = parse_int<std::uint32_t>(rest.substr(0, comma));
        if (!n || *n == 0)
          return fail("--sweep-instances: expected instance counts like 1,2,4,8, got '" +
                      std::string(rest.substr(0, comma)) + "'");
        o.sweep_instances.push_back(*n);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      }
      if (o.sweep_instances.empty()) return fail("--sweep-instances: give at least one count");
    } else if (arg == "--sweep-routers") {
      KVBM_TAKE("a list of routers");
      o.sweep_routers.clear();
      std::string_view rest = v;
      while (!rest.empty()) {
        const auto comma = rest.find(',');
        const auto p = parse_policy(rest.substr(0, comma));
        if (!p)
          return fail("--sweep-routers: expected kv, round_robin or random, got '" +
                      std::string(rest.substr(0, comma)) + "'");
        o.sweep_routers.push_back(*p);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      }
      if (o.sweep_routers.empty()) return fail("--sweep-routers: give at least one router");
    } else if (arg == "--remote-namespace") {
      KVBM_TAKE("a namespace");
      o.remote_namespace = std::string(v);
    } else if (arg == "--overlap-offload") {
      if (!flag()) return fail("--overlap-offload takes no value");
      o.overlap_offload = true;
    } else if (arg == "--model") {
      KVBM_TAKE("a model name");
      if (!find_model_preset(v)) {
        std::string names;
        for (const auto& m : model_presets())
          names += (names.empty() ? "" : ", ") + std::string(m.name);
        return fail("--model: unknown model '" + std::string(v) + "'; known: " + names);
      }
      o.model = std::string(v);
    } else if (arg == "--prefill-tokens-per-s" || arg == "--g2-gbps" || arg == "--g3-gbps") {
      KVBM_TAKE("a positive number");
      double x = 0;
      const std::string text(v);
      char* end = nullptr;
      errno = 0;
      x = std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !(x > 0) ||
          !std::isfinite(x))
        return fail(std::string(arg) + ": expected a positive number, got '" + text + "'");
      (arg == "--prefill-tokens-per-s" ? o.prefill_tokens_per_s
       : arg == "--g2-gbps"            ? o.g2_gb_per_s
                                       : o.g3_gb_per_s) = x;
    } else if (arg == "--hold-queued-blocks") {
      if (!flag()) return fail("--hold-queued-blocks takes no value");
      o.hold_queued_blocks = true;
    } else if (arg == "--disk-dir") {
      KVBM_TAKE("a directory");
      o.disk_dir = std::string(v);
    } else if (arg == "--metadata-only") {
      if (!flag()) return fail("--metadata-only takes no value");
      o.metadata_only = true;
    } else if (arg == "--realtime") {
      if (!flag()) return fail("--realtime takes no value");
      o.realtime = true;
    } else if (arg == "--speed") {
      KVBM_TAKE("a factor > 0");
      auto f = parse_double(v);
      if (!f || *f <= 0)
        return fail("--speed: expected a factor > 0, got '" + std::string(v) + "'");
      o.speed = *f;
    } else if (arg == "--limit") {
      KVBM_TAKE("a request count");
      auto n = parse_int<std::size_t>(v);
      if (!n) return fail("--limit: expected a request count, got '" + std::string(v) + "'");
      o.limit = *n;
    } else if (arg == "--soak") {
      KVBM_TAKE("a duration in seconds");
      char* end = nullptr;
      const std::string text(v);
      const double secs = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !(secs > 0))
        return fail("--soak: expected a positive number of seconds, got '" + text + "'");
      o.soak_seconds = secs;
    } else if (arg == "--sweep") {
      KVBM_TAKE("a list of G1 sizes");
      o.sweep.clear();
      std::string_view rest = v;
      while (!rest.empty()) {
        const auto comma = rest.find(',');
        const std::string_view item = rest.substr(0, comma);
        auto s = parse_size(item, true);
        if (!s || (!s->unlimited && s->blocks == 0 && s->bytes == 0)) {
          return fail("--sweep: expected G1 sizes like 1000,10000,unlimited, got '" +
                      std::string(item) + "'");
        }
        o.sweep.push_back(*s);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      }
      if (o.sweep.empty()) return fail("--sweep: give at least one G1 size");
    } else if (arg == "--plot") {
      KVBM_TAKE("a path");
      o.plot = std::string(v);
      o.plot_given = true;
    } else if (arg == "--json") {
      if (!flag()) return fail("--json takes no value");
      o.json = true;
    } else if (arg == "--quiet" || arg == "-q") {
      if (!flag()) return fail("--quiet takes no value");
      o.quiet = true;
    } else if (arg == "--strict") {
      if (!flag()) return fail("--strict takes no value");
      o.strict = true;
    } else if (arg == "--metrics-port") {
      KVBM_TAKE("a TCP port (0: any free port)");
      auto n = parse_int<int>(v);
      if (!n || *n < 0 || *n > 65535)
        return fail("--metrics-port: expected a port 0..65535, got '" + std::string(v) + "'");
      o.metrics_port = *n;
    } else if (arg == "--metrics-address") {
      KVBM_TAKE("an address");
      o.metrics_address = std::string(v);
    } else {
      return fail("unknown option '" + std::string(argv[i]) + "' (see --help)");
    }
#undef KVBM_TAKE
#undef KVBM_U32
  }
  if (o.soak_seconds > 0 && (o.realtime || !o.sweep.empty()))
    return fail(
        "--soak replays as fast as possible, once per pass: not with --realtime or --sweep");
  if (kv_heads || head_dim) {
    if (inner_given) return fail("give --inner-dim or --kv-heads/--head-dim, not both");
    o.inner_dim = kv_heads.value_or(1) * head_dim.value_or(1);
  }
  if (!o.model.empty()) {
    if (layout_given)
      return fail("--model fixes the layout: give --model or the layout options, not both");
    const ModelPreset m = *find_model_preset(o.model);
    o.layers = m.layers;
    o.outer_dim = 2;
    o.inner_dim = m.kv_heads * m.head_dim;
    o.dtype_bytes = m.dtype_bytes;
  }
  if (o.persist && o.disk_dir.empty())
    return fail("--persist keeps G3 in a directory that outlives the run: add --disk-dir DIR");
  if (o.persist && o.metadata_only)
    return fail("--persist keeps G3's bytes: not with --metadata-only, which writes none");
  if (!o.remote.empty() && o.metadata_only)
    return fail("--remote stores bytes in Redis: not with --metadata-only, which moves none");
  if (!o.remote.empty() && o.host.blocks == 0 && o.host.bytes == 0 && !o.host.unlimited)
    return fail("--remote goes through G2 both ways: give G2 some blocks (--host-blocks)");
  if (o.instances > 1 && o.soak_seconds > 0)
    return fail("--soak replays through one instance: not with --instances");
  const bool clustered = o.router.has_value() || !o.sweep_instances.empty();
  if (clustered && o.assign_given)
    return fail("--assign places requests without a router: give --router or --assign, not both");
  if (clustered && o.soak_seconds > 0)
    return fail("--soak replays through one instance: not with --router or --sweep-instances");
  if (!o.sweep_instances.empty() && !o.sweep.empty())
    return fail("--sweep varies G1 and --sweep-instances the cluster: give one of them");
  if (!o.sweep_instances.empty() && o.instances != 1)
    return fail("--sweep-instances gives the instance counts: leave out --instances");
  if (!clustered && (o.router_zmq || o.router_tier_cost || o.router_load_weight != 1.0 ||
                     !o.sweep_routers.empty()))
    return fail("the --router-* and --sweep-routers options need --router or --sweep-instances");
  if (!o.sweep_instances.empty() && o.sweep_routers.empty())
    o.sweep_routers = {router::RoutePolicy::kKv, router::RoutePolicy::kRoundRobin,
                       router::RoutePolicy::kRandom};
  if (o.overlap_offload && o.g1_g2 != OffloadMode::kWriteThrough &&
      o.g2_g3 != OffloadMode::kWriteThrough)
    return fail(
        "--overlap-offload applies to write-through copies: add --offload-mode write_through");
  return o;
}

std::string usage() {
  return R"(kvbm-replay: replays a request trace through kvbm's KvBlockManager (G1 device,
G2 host, G3 disk) and reports prefix hits per tier, evictions, bytes moved and
byte verification. With no arguments it replays the shipped Mooncake
conversation trace with bytes moved through all three tiers.

usage: kvbm-replay [options]

input
  --trace PATH           JSONL trace (default: examples/data/conversation_trace.jsonl)
  --block-tokens N       tokens per hash id and per block (default 512)
  --limit N              replay only the first N valid requests
  --strict               stop (exit 2) when any trace line is invalid
model layout (bytes per block = layers x outer-dim x block-tokens x inner-dim x dtype-bytes)
  --layers N             transformer layers (default 2)
  --outer-dim 1|2        2: separate K and V (default), 1: MLA-style
  --inner-dim N          elements per token per layer: kv heads x head size (default 4)
  --kv-heads N --head-dim D   the same as --inner-dim N*D
  --dtype-bytes N        bytes per element (default 2)
                         (the defaults make a 16 KiB block: a toy model, so that the
                         whole trace replays in seconds)
  --model NAME           a real model's layout instead: llama3-8b (64 MiB per
                         512-token block), qwen2.5-7b (28 MiB), llama3-70b (160 MiB);
                         use --metadata-only or tier sizes in bytes with it
what kvbm saves (an estimate: prefill time avoided minus the time to load the hits)
  --prefill-tokens-per-s N   the model's prefill throughput (default: assumed from
                         its size, 50% of an H100's BF16 peak; 31k tokens/s for
                         the default layout, taken as an 8B model)
  --g2-gbps N            G2 -> G1 bandwidth in GB/s (default 25, PCIe 5 x16)
  --g3-gbps N            G3 -> G1 bandwidth in GB/s (default 6, one NVMe drive)
tiers (a block count, or bytes with a unit: 64MiB, 2GiB, 1.5G, 10MB)
  --device-blocks N|unlimited   G1 (default 1000; unlimited: every unique block fits)
  --device-bytes SIZE
  --host-blocks N | --host-bytes SIZE   G2 (default 10000; 0: no G2 and no G3)
  --disk-blocks N | --disk-bytes SIZE   G3 (default 50000; 0: no G3)
  --eviction lru|multi_level_lru|lineage   every tier (default lru)
  --g1-g2 MODE           on_eviction (default), write_through or none
  --g2-g3 MODE           on_eviction (default), write_through or none
  --offload-mode MODE    both boundaries
  --overlap-offload      write-through copies run behind the requests, as fast as
                         the pipeline goes (by default each request's copies land
                         before its blocks are released): a block evicted before
                         its copy starts is lost (lost_to_lag), and the figures
                         vary from run to run
  --instances N          N engine instances, each with its own G1/G2/G3 (default 1);
                         request i goes to instance i mod N
  --assign round_robin|random   how requests go to instances (random: seeded, the
                         same on every run)
  --router kv|round_robin|random   a router places each request (instead of
                         --assign): the instances publish their KV events, an
                         indexer consumes them and the router sends a request
                         where its prefix costs least (kv), or round-robin, or at
                         random; reports load spread and simulated time to first
                         token (prefill at --prefill-tokens-per-s per instance)
  --router-events in_process|zmq   how the events reach the indexer (default
                         in_process; zmq: real sockets on loopback, same figures)
  --router-load-weight X weight of an instance's queued prefill tokens (default 1)
  --router-tier-cost A,B,C   cost per token brought from G2, G3, G4, a recomputed
                         token costing 1 (default 0.05,0.2,0.3)
  --remote URL           G4: a Redis server the instances share (redis://host:port/db;
                         repeat for a sharded set); blocks landing in G2 are
                         written through to it, and onboarding finds them there.
                         Needs bytes (not --metadata-only). Without it the
                         instances share nothing
  --remote-namespace NS  G4 keys' namespace (default: a fresh one per run, so
                         blocks of earlier runs are not found)
  --min-frequency N      offload only blocks seen at least N times (default 0: all)
  --hold-queued-blocks   write-through holds a block until its copy starts and a
                         copy waits (up to 1 s) for room in the tier below: none is
                         lost, and G1 waits for the copies when full
  --disk-dir DIR         where the G3 file goes (default: a temporary directory,
                         removed at exit)
  --persist              keep G3 in --disk-dir across runs: the file stays, and the
                         next run on the directory starts with every intact block
                         of the same layout in G3 (checked byte for byte when served);
                         with --instances N (N > 1) each instance keeps its own G3
                         in DIR/instance-0 ... DIR/instance-<N-1>, created as needed
  --metadata-only        move no bytes (simulation: pools and pipelines only)
timing
  --soak SECONDS         replay the trace over and over through one KvBlockManager
                         for this long; after each pass print resident memory, the
                         pools' balance and verification failures (a reliability run)
  --realtime             start each request at its trace timestamp ...
  --speed F              ... divided by F (default 1)
sweep
  --sweep LIST           replay once per G1 size, e.g. 1000,10000,50000,100000,unlimited,
                         and plot the hit ratio against G1 capacity
  --sweep-instances LIST replay once per instance count and router, e.g. 1,2,4,8,
                         and plot the cluster's hit ratio against the count
  --sweep-routers LIST   the routers of --sweep-instances (default
                         kv,round_robin,random)
  --plot PATH            the sweep's SVG (default kvbm-replay-sweep.svg, or
                         kvbm-replay-cluster.svg for --sweep-instances; a PNG
                         beside it when rsvg-convert or ImageMagick is installed)
output
  --json                 print the results as JSON on stdout (nothing else on stdout)
  --quiet, -q            no progress bar and no log lines
  --metrics-port N       serve the Prometheus registry at http://ADDR:N/metrics
                         while replaying (0: any free port; it is logged)
  --metrics-address A    address to bind (default 127.0.0.1)
  -h, --help             this text
)";
}

}  // namespace kvbm::replay
