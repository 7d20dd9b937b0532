#include "replay/options.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "kvbm/remote/remote_store.h"
#include "replay/hybrid_report.h"
#include "replay/model_preset.h"
#include "replay/option_checks.h"

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

namespace {

// The command line parsed so far, and what the checks after the last argument need.
struct Parsing {
  Options o;
  bool inner_given = false;
  bool layout_given = false;  // any of the layout options
  std::optional<std::uint32_t> kv_heads;
  std::optional<std::uint32_t> head_dim;
};

// One option as given: its name (without "=value"), its value, and what the
// value should be (the table's description).
struct Given {
  std::string_view name;
  std::string_view value;
  std::string_view what;
};

// Applies an option to the parse; returns "" or the error message.
using Apply = std::string (*)(Parsing& p, const Given& g);

// Whether an option takes a value.
enum class Takes : std::uint8_t {
  kNothing,  // a flag: "--flag=v" is an error
  kValue,    // "--option v" or "--option=v"
  kIgnored,  // a flag that ignores "=v" (--help)
};

// One row of the option table.
struct OptionSpec {
  std::string_view name;   // in the "takes no value" message
  std::string_view alias;  // "" = none
  Takes takes;
  std::string_view what;  // the value, as in "--option needs <what>"
  Apply apply;
};

// "<name>: expected <what>, got '<value>'".
std::string expected(std::string_view name, std::string_view what, std::string_view value) {
  return std::string(name) + ": expected " + std::string(what) + ", got '" + std::string(value) +
         "'";
}

// Calls `each` on every comma-separated item of `list` (a trailing comma adds
// no item) until it returns an error; returns that error or "".
template <class Each>
std::string for_each_item(std::string_view list, Each each) {
  while (!list.empty()) {
    const auto comma = list.find(',');
    if (std::string e = each(list.substr(0, comma)); !e.empty()) return e;
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
  return {};
}

// A count of at least Min, into Field.
template <std::uint32_t Options::*Field, std::uint32_t Min>
std::string set_count(Parsing& p, const Given& g) {
  const auto n = parse_int<std::uint32_t>(g.value);
  if (!n || below(*n, Min)) return expected(g.name, g.what, g.value);
  p.o.*Field = *n;
  return {};
}

// A count of the model layout (which --model fixes).
template <std::uint32_t Options::*Field>
std::string set_layout(Parsing& p, const Given& g) {
  p.layout_given = true;
  return set_count<Field, 1>(p, g);
}

std::string set_outer_dim(Parsing& p, const Given& g) {
  if (std::string e = set_layout<&Options::outer_dim>(p, g); !e.empty()) return e;
  if (p.o.outer_dim > 2) return "--outer-dim: expected 1 or 2";
  return {};
}

std::string set_inner_dim(Parsing& p, const Given& g) {
  if (std::string e = set_layout<&Options::inner_dim>(p, g); !e.empty()) return e;
  p.inner_given = true;
  return {};
}

// --kv-heads or --head-dim: a factor of the inner dimension.
template <std::optional<std::uint32_t> Parsing::*Factor>
std::string set_inner_factor(Parsing& p, const Given& g) {
  if (std::string e = set_layout<&Options::inner_dim>(p, g); !e.empty()) return e;
  p.*Factor = p.o.inner_dim;
  return {};
}

template <bool Options::*Field>
std::string set_flag(Parsing& p, const Given& /*g*/) {
  p.o.*Field = true;
  return {};
}

template <std::string Options::*Field>
std::string set_text(Parsing& p, const Given& g) {
  p.o.*Field = std::string(g.value);
  return {};
}

std::string set_plot(Parsing& p, const Given& g) {
  p.o.plot = std::string(g.value);
  p.o.plot_given = true;
  return {};
}

// --<tier>-blocks or --<tier>-bytes: a block count, or bytes (G1: or unlimited).
template <SizeOption Options::*Tier>
std::string set_tier_size(Parsing& p, const Given& g) {
  const bool bytes = g.name.ends_with("-bytes");
  auto s = parse_size(g.value, Tier == &Options::device && !bytes);
  if (!s) return expected(g.name, "a block count or a size like 2GiB", g.value);
  if (bytes && s->blocks != 0) s = SizeOption{.bytes = s->blocks};  // plain number of bytes
  if (!bytes && s->bytes != 0 && !s->unlimited) {
    return std::string(g.name) + ": expected a block count; use " +
           std::string(g.name.substr(0, g.name.size() - 6)) + "bytes for sizes";
  }
  p.o.*Tier = *s;
  if constexpr (Tier == &Options::host) p.o.host_given = true;
  if constexpr (Tier == &Options::disk) p.o.disk_given = true;
  return {};
}

std::string set_eviction(Parsing& p, const Given& g) {
  const auto e = parse_eviction(g.value);
  if (!e) return expected(g.name, g.what, g.value);
  p.o.eviction = *e;
  return {};
}

// --g1-g2, --g2-g3, or --offload-mode for both boundaries.
std::string set_offload_mode(Parsing& p, const Given& g) {
  const auto m = parse_mode(g.value);
  if (!m) return expected(g.name, g.what, g.value);
  if (g.name != "--g2-g3") p.o.g1_g2 = *m;
  if (g.name != "--g1-g2") p.o.g2_g3 = *m;
  return {};
}

std::string set_assign(Parsing& p, const Given& g) {
  if (g.value != "round_robin" && g.value != "random") return expected(g.name, g.what, g.value);
  p.o.assign_random = g.value == "random";
  p.o.assign_given = true;
  return {};
}

std::string add_remote(Parsing& p, const Given& g) {
  if (g.value.empty()) {
    return expected(g.name, "a Redis URL (redis://host:port/db or redis+cluster://host:port)",
                    g.value);
  }
  // The store's own grammar: a URL passing here is one the instances can use.
  if (const std::string why = remote_url_joins_error(p.o.remote, g.value); !why.empty()) {
    return "--remote: " + why;
  }
  p.o.remote.emplace_back(g.value);
  return {};
}

std::string set_router(Parsing& p, const Given& g) {
  const auto r = parse_policy(g.value);
  if (!r) return expected(g.name, g.what, g.value);
  p.o.router = *r;
  return {};
}

std::string set_router_events(Parsing& p, const Given& g) {
  if (g.value != "in_process" && g.value != "zmq" && g.value != "none") {
    return expected(g.name, g.what, g.value);
  }
  p.o.router_zmq = g.value == "zmq";
  p.o.router_no_events = g.value == "none";
  return {};
}

std::string set_router_load_weight(Parsing& p, const Given& g) {
  const auto x = parse_double(g.value);
  if (!x || *x < 0) return expected(g.name, g.what, g.value);
  p.o.router_load_weight = *x;
  return {};
}

// "A,B,C": three numbers >= 0; nullopt otherwise.
std::optional<std::array<double, 3>> parse_tier_costs(std::string_view rest) {
  std::array<double, 3> c{};
  std::size_t k = 0;
  for (; k < 3 && !rest.empty(); ++k) {
    const auto comma = rest.find(',');
    const auto x = parse_double(rest.substr(0, comma));
    if (!x || *x < 0) break;
    c[k] = *x;
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  if (k != 3 || !rest.empty()) return std::nullopt;
  return c;
}

std::string set_router_tier_cost(Parsing& p, const Given& g) {
  const auto c = parse_tier_costs(g.value);
  if (!c) {
    return expected(g.name,
                    "three numbers >= 0 for G2,G3,G4 (per token, a recomputed token costing 1)",
                    g.value);
  }
  p.o.router_tier_cost = *c;
  return {};
}

std::string set_sweep_instances(Parsing& p, const Given& g) {
  p.o.sweep_instances.clear();
  std::string e = for_each_item(g.value, [&](std::string_view item) -> std::string {
    const auto n = parse_int<std::uint32_t>(item);
    if (!n || *n == 0) return expected(g.name, "instance counts like 1,2,4,8", item);
    p.o.sweep_instances.push_back(*n);
    return {};
  });
  if (e.empty() && p.o.sweep_instances.empty()) e = "--sweep-instances: give at least one count";
  return e;
}

std::string set_sweep_routers(Parsing& p, const Given& g) {
  p.o.sweep_routers.clear();
  std::string e = for_each_item(g.value, [&](std::string_view item) -> std::string {
    const auto r = parse_policy(item);
    if (!r) return expected(g.name, "kv, round_robin or random", item);
    p.o.sweep_routers.push_back(*r);
    return {};
  });
  if (e.empty() && p.o.sweep_routers.empty()) e = "--sweep-routers: give at least one router";
  return e;
}

std::string set_model(Parsing& p, const Given& g) {
  if (!find_model_preset(g.value)) {
    std::string names;
    for (const auto& m : model_presets())
      names += (names.empty() ? "" : ", ") + std::string(m.name);
    return "--model: unknown model '" + std::string(g.value) + "'; known: " + names;
  }
  p.o.model = std::string(g.value);
  return {};
}

// A positive, finite number: the savings estimate's inputs.
template <double Options::*Field>
std::string set_rate(Parsing& p, const Given& g) {
  const std::string text(g.value);
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !(x > 0) ||
      !std::isfinite(x))
    return expected(g.name, "a positive number", text);
  p.o.*Field = x;
  return {};
}

std::string set_speed(Parsing& p, const Given& g) {
  const auto f = parse_double(g.value);
  if (!f || *f <= 0) return expected(g.name, g.what, g.value);
  p.o.speed = *f;
  return {};
}

std::string set_limit(Parsing& p, const Given& g) {
  const auto n = parse_int<std::size_t>(g.value);
  if (!n) return expected(g.name, g.what, g.value);
  p.o.limit = *n;
  return {};
}

std::string set_soak(Parsing& p, const Given& g) {
  char* end = nullptr;
  const std::string text(g.value);
  const double secs = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(secs > 0))
    return expected(g.name, "a positive number of seconds", text);
  p.o.soak_seconds = secs;
  return {};
}

std::string set_sweep(Parsing& p, const Given& g) {
  p.o.sweep.clear();
  std::string e = for_each_item(g.value, [&](std::string_view item) -> std::string {
    const auto s = parse_size(item, true);
    if (!s || (!s->unlimited && s->blocks == 0 && s->bytes == 0))
      return expected(g.name, "G1 sizes like 1000,10000,unlimited", item);
    p.o.sweep.push_back(*s);
    return {};
  });
  if (e.empty() && p.o.sweep.empty()) e = "--sweep: give at least one G1 size";
  return e;
}

std::string set_metrics_port(Parsing& p, const Given& g) {
  const auto n = parse_int<int>(g.value);
  if (!n || *n < 0 || *n > 65535) return expected(g.name, "a port 0..65535", g.value);
  p.o.metrics_port = *n;
  return {};
}

// Every option; usage() describes them.
constexpr OptionSpec kOptionTable[] = {
    {"-h", "--help", Takes::kIgnored, "", set_flag<&Options::help>},
    {"--trace", "", Takes::kValue, "a path", set_text<&Options::trace>},
    {"--block-tokens", "", Takes::kValue, "a token count >= 1",
     set_count<&Options::block_tokens, 1>},
    {"--layers", "", Takes::kValue, "a layer count >= 1", set_layout<&Options::layers>},
    {"--outer-dim", "", Takes::kValue, "1 or 2", set_outer_dim},
    {"--inner-dim", "", Takes::kValue, "a count >= 1", set_inner_dim},
    {"--kv-heads", "", Takes::kValue, "a count >= 1", set_inner_factor<&Parsing::kv_heads>},
    {"--head-dim", "", Takes::kValue, "a count >= 1", set_inner_factor<&Parsing::head_dim>},
    {"--dtype-bytes", "", Takes::kValue, "1, 2, 4 or 8", set_layout<&Options::dtype_bytes>},
    {"--device-blocks", "", Takes::kValue, "a size", set_tier_size<&Options::device>},
    {"--device-bytes", "", Takes::kValue, "a size", set_tier_size<&Options::device>},
    {"--host-blocks", "", Takes::kValue, "a size", set_tier_size<&Options::host>},
    {"--host-bytes", "", Takes::kValue, "a size", set_tier_size<&Options::host>},
    {"--disk-blocks", "", Takes::kValue, "a size", set_tier_size<&Options::disk>},
    {"--disk-bytes", "", Takes::kValue, "a size", set_tier_size<&Options::disk>},
    {"--eviction", "", Takes::kValue, "lru, multi_level_lru or lineage", set_eviction},
    {"--g1-g2", "", Takes::kValue, "write_through, on_eviction or none", set_offload_mode},
    {"--g2-g3", "", Takes::kValue, "write_through, on_eviction or none", set_offload_mode},
    {"--offload-mode", "", Takes::kValue, "write_through, on_eviction or none", set_offload_mode},
    {"--min-frequency", "", Takes::kValue, "a count", set_count<&Options::min_frequency, 0>},
    {"--persist", "", Takes::kNothing, "", set_flag<&Options::persist>},
    {"--instances", "", Takes::kValue, "an instance count >= 1", set_count<&Options::instances, 1>},
    {"--assign", "", Takes::kValue, "round_robin or random", set_assign},
    {"--remote", "", Takes::kValue, "a Redis URL (redis://host:port/db, redis+cluster://...)",
     add_remote},
    {"--router", "", Takes::kValue, "kv, round_robin or random", set_router},
    {"--router-events", "", Takes::kValue, "in_process, zmq or none", set_router_events},
    {"--router-load-weight", "", Takes::kValue, "a number >= 0", set_router_load_weight},
    {"--router-tier-cost", "", Takes::kValue, "three numbers G2,G3,G4", set_router_tier_cost},
    {"--sweep-instances", "", Takes::kValue, "a list of instance counts", set_sweep_instances},
    {"--sweep-routers", "", Takes::kValue, "a list of routers", set_sweep_routers},
    {"--remote-namespace", "", Takes::kValue, "a namespace", set_text<&Options::remote_namespace>},
    {"--overlap-offload", "", Takes::kNothing, "", set_flag<&Options::overlap_offload>},
    {"--model", "", Takes::kValue, "a model name", set_model},
    {"--model-groups", "", Takes::kValue, "a preset", set_text<&Options::model_groups>},
    {"--model-groups-file", "", Takes::kValue, "a path", set_text<&Options::model_groups_file>},
    {"--hybrid-cache", "", Takes::kValue, "all or tails", set_text<&Options::hybrid_cache>},
    {"--hybrid-weight", "", Takes::kValue, "a number > 0", set_text<&Options::hybrid_weight>},
    {"--hybrid-snapshots", "", Takes::kValue, "a policy", set_text<&Options::hybrid_snapshots>},
    {"--prefill-tokens-per-s", "", Takes::kValue, "a positive number",
     set_rate<&Options::prefill_tokens_per_s>},
    {"--g2-gbps", "", Takes::kValue, "a positive number", set_rate<&Options::g2_gb_per_s>},
    {"--g3-gbps", "", Takes::kValue, "a positive number", set_rate<&Options::g3_gb_per_s>},
    {"--hold-queued-blocks", "", Takes::kNothing, "", set_flag<&Options::hold_queued_blocks>},
    {"--disk-dir", "", Takes::kValue, "a directory", set_text<&Options::disk_dir>},
    {"--metadata-only", "", Takes::kNothing, "", set_flag<&Options::metadata_only>},
    {"--realtime", "", Takes::kNothing, "", set_flag<&Options::realtime>},
    {"--speed", "", Takes::kValue, "a factor > 0", set_speed},
    {"--limit", "", Takes::kValue, "a request count", set_limit},
    {"--soak", "", Takes::kValue, "a duration in seconds", set_soak},
    {"--sweep", "", Takes::kValue, "a list of G1 sizes", set_sweep},
    {"--plot", "", Takes::kValue, "a path", set_plot},
    {"--json", "", Takes::kNothing, "", set_flag<&Options::json>},
    {"--quiet", "-q", Takes::kNothing, "", set_flag<&Options::quiet>},
    {"--strict", "", Takes::kNothing, "", set_flag<&Options::strict>},
    {"--metrics-port", "", Takes::kValue, "a TCP port (0: any free port)", set_metrics_port},
    {"--metrics-address", "", Takes::kValue, "an address", set_text<&Options::metrics_address>},
};

// The table's row for `name`, or nullptr.
const OptionSpec* find_option(std::string_view name) {
  for (const OptionSpec& s : kOptionTable) {
    if (name == s.name || (!s.alias.empty() && name == s.alias)) return &s;
  }
  return nullptr;
}

// Applies argv[i], and argv[i + 1] when that is its value (then i moves on to
// it); returns "" or the error message.
std::string apply_argument(Parsing& p, int argc, const char* const* argv, int& i) {
  std::string_view name = argv[i];
  std::optional<std::string_view> inline_value;  // "--option=value"
  if (name.starts_with("--")) {
    if (const auto eq = name.find('='); eq != std::string_view::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
  }
  const OptionSpec* spec = find_option(name);
  if (spec == nullptr) return "unknown option '" + std::string(argv[i]) + "' (see --help)";
  std::string_view value;
  if (spec->takes == Takes::kNothing && inline_value)
    return std::string(spec->name) + " takes no value";
  if (spec->takes == Takes::kValue) {
    if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return std::string(name) + " needs " + std::string(spec->what);
    }
  }
  return spec->apply(p, Given{.name = name, .value = value, .what = spec->what});
}

// The inner dimension from --kv-heads/--head-dim, or the whole layout from --model.
std::string resolve_layout(Parsing& p) {
  Options& o = p.o;
  if (p.kv_heads || p.head_dim) {
    if (p.inner_given) return "give --inner-dim or --kv-heads/--head-dim, not both";
    o.inner_dim = p.kv_heads.value_or(1) * p.head_dim.value_or(1);
  }
  if (!o.model.empty()) {
    if (p.layout_given)
      return "--model fixes the layout: give --model or the layout options, not both";
    const ModelPreset m = *find_model_preset(o.model);
    o.layers = m.layers;
    o.outer_dim = 2;
    o.inner_dim = m.kv_heads * m.head_dim;
    o.dtype_bytes = m.dtype_bytes;
  }
  return {};
}

// After the last argument: derived values and the options that do not go together.
std::string finish(Parsing& p) {
  std::string e = check_soak(p.o);
  if (e.empty()) e = resolve_layout(p);
  if (e.empty()) e = check_together(p.o);
  if (e.empty()) e = check_model_groups(p.o);
  if (e.empty() && !p.o.sweep_instances.empty() && p.o.sweep_routers.empty())
    p.o.sweep_routers = {router::RoutePolicy::kKv, router::RoutePolicy::kRoundRobin,
                         router::RoutePolicy::kRandom};
  return e;
}

}  // namespace

Options parse_options(int argc, const char* const* argv, std::string& error) {
  Parsing p;
  error.clear();
  for (int i = 1; i < argc && error.empty(); ++i) error = apply_argument(p, argc, argv, i);
  if (error.empty()) error = finish(p);
  if (!error.empty()) return Options{};
  return std::move(p.o);
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
  --model-groups NAME    a hybrid model's KV cache groups through G1 alone, beside the
                         same G1 bytes with every layer as full attention: gpt-oss-20b,
                         gemma3-27b, llama4-scout, qwen3-next-80b, llama3.1-8b; with
                         --host-* (and --disk-*) also with G2 (and G3) behind that G1
  --model-groups-file F  the same, the groups read from a JSON list (docs/replay.md)
  --hybrid-cache all|tails  all (vLLM's way): every block is cached as it fills; tails:
                         only what is in reach when the prefill ends (a window's tail)
  --hybrid-weight X      G1 share of every window, chunk and state group, in tokens
                         relative to the full groups (default 1)
  --hybrid-snapshots P   recurrent-state snapshots kept: every_block (default, vLLM's
                         "all"), every:K (every K-th block), request_end or step_end
                         (vLLM's "align": where each prefill step ends)
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
  --router-events in_process|zmq|none   how the events reach the indexer (default
                         in_process; zmq: real sockets on loopback, same figures;
                         none: no events, the router remembers where it sent each
                         prefix for 120 s of trace time)
  --router-load-weight X weight of an instance's queued prefill tokens (default 0.05)
  --router-tier-cost A,B,C   cost per token brought from G2, G3, G4, a recomputed
                         token costing 1 (default 0.05,0.2,0.3)
  --remote URL           G4: a Redis server the instances share
                         (redis://[user:pw@]host:port/db; repeat for a sharded
                         set), or a Redis Cluster (once:
                         redis+cluster://[user:pw@]host:port[,host:port...]);
                         blocks landing in G2 are written through to it, and
                         onboarding finds them there.
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
