#include "router/options.h"

#include <charconv>
#include <stdexcept>
#include <string>

#include "kvbm/error.h"
#include "kvbm/remote/remote_store.h"
#include "kvbm/tier.h"
#include "replay/hybrid_preset.h"

namespace kvbm::router_process {
namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

template <class T>
T number(std::string_view flag, std::string_view text) {
  T v{};
  const auto* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc{} || p != end || text.empty()) {
    bad(std::string(flag) + ": '" + std::string(text) + "' is not a number");
  }
  return v;
}

double real(std::string_view flag, std::string_view text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(std::string(text), &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !(v >= 0)) {
    bad(std::string(flag) + ": '" + std::string(text) + "' is not a non-negative number");
  }
  return v;
}

// "--tier-cost G2=0.05,G3=0.2": one NAME=COST per tier to change.
void parse_tier_costs(std::string_view text, router::KvRouterOptions& o) {
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const auto eq = item.find('=');
    bool known = false;
    for (const TierId t : kTierIds) {
      if (eq != std::string_view::npos && item.substr(0, eq) == to_string(t)) {
        o.tier_cost[t] = real("--tier-cost", item.substr(eq + 1));
        known = true;
      }
    }
    if (!known) {
      bad("--tier-cost: '" + std::string(item) +
          "' is not TIER=COST with TIER one of G1, G2, G3, G4 (e.g. G2=0.05,G3=0.2)");
    }
  }
}

void parse_listen(std::string_view text, RouterProcessOptions& o) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    bad("--listen: '" + std::string(text) + "' is not HOST:PORT (e.g. 127.0.0.1:8000)");
  }
  std::string_view host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  o.listen_address = std::string(host);
  o.listen_port = number<int>("--listen", text.substr(colon + 1));
  if (o.listen_port < 0 || o.listen_port > 65535) bad("--listen: the port is 0..65535");
}

// "--remote URL": kvbm-replay's grammar and rule (a cluster URL given once and alone).
void add_remote(std::string_view url, RouterProcessOptions& o) {
  if (const std::string why = remote_url_joins_error(o.remote, url); !why.empty()) {
    bad("--remote: " + why);
  }
  o.remote.emplace_back(url);
}

// --model-groups PRESET or --model-groups-file PATH: kvbm-replay's presets and
// group files (replay/hybrid_preset.h).
void set_model_groups(std::string_view flag, std::string_view v, RouterProcessOptions& o) {
  if (!o.model_groups.empty()) {
    bad(std::string(flag) + ": the model's groups are given already (" + o.model_groups +
        "); give one of --model-groups and --model-groups-file, once");
  }
  replay::HybridModel model;
  if (flag == "--model-groups") {
    auto found = replay::find_hybrid_preset(v);
    if (!found) bad(replay::check_hybrid_preset(v));
    model = std::move(*found);
  } else {
    try {
      model = replay::read_model_groups_file(std::string(v));
    } catch (const UsageError& e) {
      bad(std::string(flag) + ": " + e.what());
    }
  }
  o.groups = std::move(model.groups);
  o.model_groups = std::string(v);
}

}  // namespace

events::EventSource parse_instance(std::string_view spec) {
  const auto eq = spec.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == spec.size()) {
    bad("--instance: '" + std::string(spec) +
        "' is not NAME=ENDPOINT[;replay=ENDPOINT][;topic=PREFIX] "
        "(e.g. engine-0=tcp://engine-0:5557;replay=tcp://engine-0:5558)");
  }
  events::EventSource s;
  s.name = std::string(spec.substr(0, eq));
  std::string_view rest = spec.substr(eq + 1);
  const auto semi = rest.find(';');
  s.endpoint = std::string(rest.substr(0, semi));
  rest = semi == std::string_view::npos ? std::string_view{} : rest.substr(semi + 1);
  while (!rest.empty()) {
    const auto next = rest.find(';');
    const std::string_view kv = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next + 1);
    if (kv.starts_with("replay=")) {
      s.replay_endpoint = std::string(kv.substr(7));
    } else if (kv.starts_with("topic=")) {
      s.topic = std::string(kv.substr(6));
    } else {
      bad("--instance " + s.name + ": '" + std::string(kv) +
          "' is neither replay=ENDPOINT nor topic=PREFIX");
    }
  }
  if (s.endpoint.find("://") == std::string::npos) {
    bad("--instance " + s.name + ": '" + s.endpoint +
        "' is not a ZeroMQ endpoint (e.g. tcp://engine-0:5557)");
  }
  return s;
}

RouterProcessOptions parse_router_options(int argc, const char* const* argv) {
  RouterProcessOptions o;
  bool block_size_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      o.help = true;
      continue;
    }
    if (i + 1 >= argc) bad(std::string(flag) + ": a value is missing (see --help)");
    const std::string_view v = argv[++i];
    if (flag == "--listen") {
      parse_listen(v, o);
    } else if (flag == "--instance") {
      o.instances.push_back(parse_instance(v));
    } else if (flag == "--block-size") {
      o.router.block_size = number<std::uint32_t>(flag, v);
      if (o.router.block_size == 0) bad("--block-size: at least 1 token");
      block_size_given = true;
    } else if (flag == "--model-groups" || flag == "--model-groups-file") {
      set_model_groups(flag, v, o);
    } else if (flag == "--key") {
      if (v != "hashes" && v != "tokens") {
        bad("--key: '" + std::string(v) + "' is not hashes or tokens");
      }
      o.key = router::parse_block_key(v);
    } else if (flag == "--policy") {
      if (v != "kv" && v != "round_robin" && v != "random") {
        bad("--policy: '" + std::string(v) + "' is not kv, round_robin or random");
      }
      o.router.policy = router::parse_route_policy(v);
    } else if (flag == "--load-weight") {
      o.router.load_weight = real(flag, v);
    } else if (flag == "--compute-cost") {
      o.router.compute_cost = real(flag, v);
    } else if (flag == "--tier-cost") {
      parse_tier_costs(v, o.router);
    } else if (flag == "--load-unit") {
      if (v != "tokens" && v != "requests") bad("--load-unit: tokens or requests");
      o.router.load_unit = v == "tokens" ? router::LoadUnit::kTokens : router::LoadUnit::kRequests;
    } else if (flag == "--use-stale") {
      if (v != "0" && v != "1") bad("--use-stale: 0 or 1");
      o.router.use_stale = v == "1";
    } else if (flag == "--seed") {
      o.router.seed = number<std::uint64_t>(flag, v);
    } else if (flag == "--silence-timeout-ms") {
      o.silence_timeout = std::chrono::milliseconds(number<std::uint32_t>(flag, v));
    } else if (flag == "--replay-timeout-ms") {
      o.replay_timeout = std::chrono::milliseconds(number<std::uint32_t>(flag, v));
      if (o.replay_timeout.count() == 0) bad("--replay-timeout-ms: at least 1");
    } else if (flag == "--max-in-flight") {
      o.max_in_flight = number<std::size_t>(flag, v);
      if (o.max_in_flight == 0) bad("--max-in-flight: at least 1");
    } else if (flag == "--max-body-bytes") {
      o.max_body_bytes = number<std::size_t>(flag, v);
      if (o.max_body_bytes < 2) bad("--max-body-bytes: at least 2 (the body {})");
    } else if (flag == "--max-json-depth") {
      o.max_json_depth = number<std::size_t>(flag, v);
      if (o.max_json_depth < 2 || o.max_json_depth > 10000) {
        bad("--max-json-depth: 2..10000 (a route body is 2 deep)");
      }
    } else if (flag == "--remote") {
      add_remote(v, o);
    } else if (flag == "--remote-check-ms") {
      o.remote_check = std::chrono::milliseconds(number<std::uint32_t>(flag, v));
      if (o.remote_check.count() == 0) bad("--remote-check-ms: at least 1");
    } else if (flag == "--http-threads") {
      o.http_threads = number<int>(flag, v);
      if (o.http_threads < 1 || o.http_threads > 1024) bad("--http-threads: 1..1024");
    } else {
      bad("unknown option '" + std::string(flag) + "' (see --help)");
    }
  }
  if (!o.groups.empty()) {
    const std::uint32_t hb = hash_block_size(o.groups);
    if (block_size_given && o.router.block_size != hb) {
      bad("--block-size " + std::to_string(o.router.block_size) + ": the groups of " +
          o.model_groups + " are hashed in blocks of " + std::to_string(hb) +
          " tokens (the gcd of their block sizes); give --block-size " + std::to_string(hb) +
          " or leave it out");
    }
    o.router.block_size = hb;
  }
  return o;
}

std::string router_usage() {
  return R"(kvbm-router: routes requests to the engine instance that holds their prefix.

Subscribes to every instance's KV event publisher (kvbm's or vLLM's ZeroMQ
format) and answers over HTTP/JSON (docs/router.md, "The router process"):

  POST   /route            {"hashes": [u64...], "tokens": N}  -> the instance chosen
                           ({"token_ids": [u32...]} with --key tokens)
  POST   /finish           {"request_id": "..."}              -> its load taken off
  GET    /health           instances, staleness, in-flight requests, G4 (with --remote)
  GET    /metrics          Prometheus text
  GET    /instances        the instances
  POST   /instances        {"name": ..., "endpoint": ..., "replay_endpoint": ..., "topic": ...}
  DELETE /instances/NAME

Options:
  --listen HOST:PORT          where to serve (default 127.0.0.1:8000; port 0: any, printed)
  --instance NAME=ENDPOINT[;replay=ENDPOINT][;topic=PREFIX]
                              an engine's publisher (repeat per instance)
  --block-size N              tokens per block (default 16)
  --key hashes|tokens         index by the engines' block hashes (default) or by the
                              tokens their events carry (POST /route then takes "token_ids")
  --model-groups PRESET       a hybrid model's KV cache groups, one of kvbm-replay's presets
                              (gpt-oss-20b, ...: kvbm-replay --help); the index counts a prefix
                              only where every group can serve it (docs/hybrid.md), and
                              --block-size defaults to the groups' hash block (their gcd)
  --model-groups-file PATH    the same from a JSON group list (kvbm-replay's format)
  --policy kv|round_robin|random   (default kv)
  --compute-cost X            per token recomputed (default 1)
  --tier-cost G2=X,G3=Y,...   per token copied from a tier (default G1=0,G2=0.05,G3=0.2,G4=0.3)
  --load-weight X             per unit of load in flight (default 0.05)
  --load-unit tokens|requests (default tokens)
  --use-stale 0|1             route by a stale instance's entries (default 0)
  --seed N                    ties and --policy random (default 1)
  --silence-timeout-ms N      an instance silent this long is stale (default 0: never)
  --replay-timeout-ms N       a replay unanswered this long is given up (default 1000)
  --max-in-flight N           routed requests awaiting /finish at most (default 1000000)
  --max-body-bytes N          a larger request body is refused, 413 (default 67108864: 64 MiB)
  --max-json-depth N          a body nested deeper is refused, 400 (default 32; 2..10000)
  --http-threads N            HTTP worker threads (default 4)
  --remote URL                G4 to check for /health: redis://[user:password@]host:port/db
                              (repeat per shard) or redis+cluster://host:port[,host:port...];
                              kvbm-replay's syntax; the password is never printed
  --remote-check-ms N         between two G4 checks (SET, GET, EXISTS of a probe key
                              under kvbm:; default 1000)
)";
}

}  // namespace kvbm::router_process
