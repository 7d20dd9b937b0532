#include "router/router_service.h"

#include <array>
#include <charconv>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "kvbm/error.h"
#include "kvbm/router/kv_event_feed.h"
#include "kvbm/router/kv_indexer.h"
#include "kvbm/router/kv_router.h"
#include "router/g4_health.h"
#include "router/json_body.h"

namespace kvbm::router_process {
namespace {

using nlohmann::json;
using router::InstanceId;

constexpr std::array<const char*, 6> kEndpoints{"route",     "finish",  "health",
                                                "instances", "metrics", "other"};
constexpr std::array<int, 9> kCodes{200, 201, 400, 404, 405, 409, 413, 500, 503};
constexpr std::size_t kMaxRequestIdBytes = 256;
constexpr std::size_t kMaxFeedMessageBytes = 300;  // of the feed's reason to refuse an instance

HttpReply json_reply(int status, const json& body) {
  return {status, "application/json", dump_reply(body)};
}

HttpReply error_reply(int status, std::string_view message) {
  return json_reply(status, json{{"error", message}});
}

json tier_counts(const router::TierBlockCounts& c) {
  json out = json::object();
  for (const TierId t : kTierIds) out[std::string(to_string(t))] = c[t];
  return out;
}

std::uint64_t hash_of(const json& v, std::size_t i) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return v.get<std::uint64_t>();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    std::uint64_t h = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), h);
    if (ec == std::errc{} && p == s.data() + s.size() && !s.empty()) return h;
  }
  throw ClientError{400, fmt::format("\"hashes\"[{}]: {} is not a block hash (an unsigned 64-bit "
                                     "integer, or its decimal string)",
                                     i, describe(v))};
}

/// The feed's counters as Prometheus counters (it keeps no registry of its own).
class FeedCollectable final : public prometheus::Collectable {
 public:
  explicit FeedCollectable(const router::KvEventFeed& feed) : feed_(feed) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    const router::KvEventFeedStats s = feed_.stats();
    const std::pair<const char*, std::uint64_t> rows[] = {
        {"batches_received", s.batches_received},
        {"replays_requested", s.replays_requested},
        {"replays_incomplete", s.replays_incomplete},
        {"decode_errors", s.decode_errors},
        {"restarts", s.restarts}};
    std::vector<prometheus::MetricFamily> out;
    for (const auto& [name, value] : rows) {
      prometheus::MetricFamily f;
      f.name = std::string("kvbm_router_feed_") + name + "_total";
      f.help = std::string("KvEventFeedStats::") + name + " of kvbm-router's event feed";
      f.type = prometheus::MetricType::Counter;
      prometheus::ClientMetric m;
      m.label.push_back({"pool", "router"});
      m.counter.value = static_cast<double>(value);
      f.metric.push_back(std::move(m));
      out.push_back(std::move(f));
    }
    return out;
  }

 private:
  const router::KvEventFeed& feed_;
};

router::KvIndexerOptions indexer_options(const RouterProcessOptions& o,
                                         std::shared_ptr<prometheus::Registry> registry) {
  router::KvIndexerOptions io;
  io.key = o.key;
  io.groups = o.groups;
  io.silence_timeout = o.silence_timeout;
  io.metrics_registry = std::move(registry);
  return io;
}

router::KvEventFeedOptions feed_options(const RouterProcessOptions& o) {
  router::KvEventFeedOptions fo;
  fo.subscriber.replay_timeout = o.replay_timeout;
  return fo;
}

router::KvRouterOptions router_options(const RouterProcessOptions& o,
                                       std::shared_ptr<prometheus::Registry> registry) {
  router::KvRouterOptions ro = o.router;
  ro.metrics_registry = std::move(registry);
  return ro;
}

std::string run_prefix() {
  std::random_device rd;
  return fmt::format("{:08x}", rd());
}

// Returns the request's index in kEndpoints (its metrics label).
std::size_t endpoint_of(std::string_view path) {
  if (path == "/route") return 0;
  if (path == "/finish") return 1;
  if (path == "/health") return 2;
  if (path == "/instances" || path.starts_with("/instances/")) return 3;
  if (path == "/metrics") return 4;
  return 5;
}

}  // namespace

struct RouterService::Impl {
  struct Instance {
    InstanceId id;
    events::EventSource source;
  };

  explicit Impl(const RouterProcessOptions& o)
      : options(o),
        registry(std::make_shared<prometheus::Registry>()),
        index(indexer_options(o, registry)),
        feed(index, feed_options(o)),
        router(index, router_options(o, registry)),
        feed_metrics(feed),
        prefix(run_prefix()) {
    auto& requests = prometheus::BuildCounter()
                         .Name("kvbm_router_http_requests_total")
                         .Help("HTTP requests kvbm-router answered, by endpoint and status")
                         .Register(*registry);
    for (std::size_t e = 0; e < kEndpoints.size(); ++e) {
      for (std::size_t c = 0; c < kCodes.size(); ++c) {
        counters[e][c] = &requests.Add(
            {{"pool", "router"}, {"endpoint", kEndpoints[e]}, {"code", std::to_string(kCodes[c])}});
      }
    }
    in_flight_gauge = &prometheus::BuildGauge()
                           .Name("kvbm_router_requests_in_flight")
                           .Help("Requests routed and not yet finished")
                           .Register(*registry)
                           .Add({{"pool", "router"}});
    if (!o.remote.empty()) g4 = std::make_unique<G4Health>(o.remote, o.remote_check, registry);
  }

  HttpReply dispatch(const HttpRequest& r, std::size_t& endpoint);
  HttpReply route(const std::string& body);
  HttpReply finish(const std::string& body);
  HttpReply health();
  HttpReply metrics();
  HttpReply list_instances();
  HttpReply add_instance(const std::string& body);
  HttpReply remove_instance(const std::string& name);
  json instance_json(const std::string& name, const Instance& in,
                     const router::KvRouterStats& rs) const;
  InstanceId add(events::EventSource source);
  void count(std::size_t endpoint, int status) {
    for (std::size_t c = 0; c < kCodes.size(); ++c) {
      if (kCodes[c] == status) counters[endpoint][c]->Increment();
    }
  }

  RouterProcessOptions options;
  std::shared_ptr<prometheus::Registry> registry;
  router::KvIndexer index;
  router::KvEventFeed feed;
  router::KvRouter router;
  FeedCollectable feed_metrics;
  std::array<std::array<prometheus::Counter*, kCodes.size()>, kEndpoints.size()> counters{};
  prometheus::Gauge* in_flight_gauge = nullptr;
  const std::string prefix;  // request ids of this run: PREFIX-N

  mutable std::mutex instances_mu;  // serialises instance changes; guards the next two
  std::map<std::string, Instance, std::less<>> instances;
  std::vector<std::string> names;  // by InstanceId (ids are never reused)

  std::mutex flight_mu;  // guards the next two
  std::unordered_map<std::string, router::RouteDecision> in_flight;
  std::uint64_t next_request = 0;
  std::unique_ptr<G4Health> g4;  // --remote: G4 checked for /health; first destroyed
};

InstanceId RouterService::Impl::add(events::EventSource source) {
  // Called with instances_mu held.
  if (instances.contains(source.name)) {
    throw ClientError{409, fmt::format("an instance named {} is already live; DELETE "
                                       "/instances/NAME first or pick another name",
                                       quote(source.name))};
  }
  InstanceId id = 0;
  try {
    id = feed.add_instance(source.name, source);
  } catch (const UsageError& e) {           // the feed leaves no instance behind
    const std::string_view why = e.what();  // may name the endpoint: cut
    throw ClientError{400, fmt::format("instance {}: {}", quote(source.name),
                                       why.substr(0, kMaxFeedMessageBytes))};
  }
  if (names.size() <= id) names.resize(id + 1);
  names[id] = source.name;
  std::string name = source.name;
  instances.emplace(std::move(name), Instance{id, std::move(source)});
  return id;
}

namespace {

// --key hashes: the request's block hashes and its token count.
std::uint64_t hashes_of(const json& j, std::string_view shape, std::vector<std::uint64_t>& out) {
  if (j.contains("token_ids")) {
    throw ClientError{400,
                      "\"token_ids\": this router indexes the engines' block hashes (--key "
                      "hashes); send \"hashes\" and \"tokens\", or start it with --key tokens"};
  }
  const auto hs = j.find("hashes");
  if (hs == j.end()) throw ClientError{400, fmt::format("\"hashes\" is missing; send {}", shape)};
  if (!hs->is_array()) {
    throw ClientError{400, "\"hashes\" must be an array of block hashes, not " + describe(*hs)};
  }
  out.reserve(hs->size());
  for (std::size_t i = 0; i < hs->size(); ++i) out.push_back(hash_of((*hs)[i], i));
  const auto tk = j.find("tokens");
  if (tk == j.end()) throw ClientError{400, fmt::format("\"tokens\" is missing; send {}", shape)};
  if (!tk->is_number_unsigned() && !(tk->is_number_integer() && tk->get<std::int64_t>() >= 0)) {
    throw ClientError{
        400, "\"tokens\" must be the prompt's token count (an integer >= 0), not " + describe(*tk)};
  }
  return tk->get<std::uint64_t>();
}

/// A /route body of a router keyed by tokens: the prompt and its adapter.
struct TokenRequest {
  std::vector<std::uint32_t> tokens;
  std::optional<std::int64_t> lora;
};

// --key tokens: the prompt's token ids and LoRA id (KvRouter::route_tokens
// keys them, per group for a hybrid model).
TokenRequest token_request_of(const json& j, std::string_view shape) {
  const auto ts = j.find("token_ids");
  if (ts == j.end() || !ts->is_array()) {
    throw ClientError{400, fmt::format("\"token_ids\" (an array of token ids) is missing; this "
                                       "router indexes tokens (--key tokens): send {}",
                                       shape)};
  }
  TokenRequest out;
  std::vector<std::uint32_t>& tokens = out.tokens;
  tokens.reserve(ts->size());
  for (std::size_t i = 0; i < ts->size(); ++i) {
    const json& t = (*ts)[i];
    if (!t.is_number_unsigned() || t.get<std::uint64_t>() > UINT32_MAX) {
      throw ClientError{400, fmt::format("\"token_ids\"[{}] must be a token id (0 .. 2^32-1), "
                                         "not {}",
                                         i, describe(t))};
    }
    tokens.push_back(t.get<std::uint32_t>());
  }
  if (const auto l = j.find("lora_id"); l != j.end() && !l->is_null()) {
    if (!l->is_number_integer()) {
      throw ClientError{400,
                        "\"lora_id\" must be an integer (the adapter's id), not " + describe(*l)};
    }
    out.lora = l->get<std::int64_t>();
  }
  return out;
}

}  // namespace

HttpReply RouterService::Impl::route(const std::string& body) {
  static constexpr std::string_view kShape =
      R"({"hashes": [u64, ...], "tokens": N} (--key hashes) or )"
      R"({"token_ids": [u32, ...]} (--key tokens))";
  const json j = parse_body(body, kShape, options.max_json_depth);
  std::vector<std::uint64_t> hashes;
  std::optional<TokenRequest> by_tokens;
  std::uint64_t tokens = 0;
  if (options.key == router::BlockKey::kTokens) {
    by_tokens = token_request_of(j, kShape);
  } else {
    tokens = hashes_of(j, kShape, hashes);
  }
  std::string id = string_field(j, "request_id", kShape, false);
  if (j.contains("request_id") && (id.empty() || id.size() > kMaxRequestIdBytes)) {
    throw ClientError{400, "\"request_id\" must be 1 to 256 bytes; leave it out to get one"};
  }
  if (index.instances().empty()) {
    throw ClientError{503,
                      "no live instance to route to: start kvbm-router with --instance, or "
                      "POST /instances"};
  }
  router::RouteDecision d;
  try {
    d = by_tokens ? router.route_tokens(by_tokens->tokens, by_tokens->lora)
                  : router.route(hashes, tokens);
  } catch (const UsageError&) {  // the last instance was removed meanwhile
    throw ClientError{503, "no live instance to route to: POST /instances to add one"};
  }
  {
    std::lock_guard lock(flight_mu);
    if (id.empty()) id = fmt::format("{}-{}", prefix, next_request++);
    if (in_flight.size() >= options.max_in_flight || !in_flight.emplace(id, d).second) {
      router.finish(d);
      if (in_flight.contains(id)) {
        throw ClientError{409, "\"request_id\" " + quote(id) +
                                   " is in flight already; finish it or pick another id"};
      }
      throw ClientError{503, fmt::format("{} requests are in flight (--max-in-flight): POST "
                                         "/finish the requests that have ended",
                                         in_flight.size())};
    }
    in_flight_gauge->Set(static_cast<double>(in_flight.size()));
  }
  std::string name;
  {
    std::lock_guard lock(instances_mu);
    name = d.instance < names.size() ? names[d.instance] : std::string();
  }
  return json_reply(200, json{{"instance", name},
                              {"instance_id", d.instance},
                              {"request_id", id},
                              {"overlap",
                               {{"prefix_blocks", d.overlap.prefix_blocks},
                                {"per_tier", tier_counts(d.overlap.per_tier)},
                                {"stale", d.overlap.stale}}},
                              {"cost", d.cost},
                              {"tokens_to_compute", d.tokens_to_compute},
                              {"load", d.load},
                              {"used_stale", d.used_stale}});
}

HttpReply RouterService::Impl::finish(const std::string& body) {
  static constexpr std::string_view kShape = R"({"request_id": "..."})";
  const json j = parse_body(body, kShape, options.max_json_depth);
  const std::string id = string_field(j, "request_id", kShape, true);
  router::RouteDecision d;
  {
    std::lock_guard lock(flight_mu);
    const auto it = in_flight.find(id);
    if (it == in_flight.end()) {
      throw ClientError{404, "unknown \"request_id\" " + quote(id) +
                                 ": never routed by this router run, or finished already "
                                 "(finish each routed request once)"};
    }
    d = it->second;
    in_flight.erase(it);
    in_flight_gauge->Set(static_cast<double>(in_flight.size()));
  }
  router.finish(d);
  std::string name;
  {
    std::lock_guard lock(instances_mu);
    name = d.instance < names.size() ? names[d.instance] : std::string();
  }
  return json_reply(200, json{{"request_id", id}, {"instance", name}, {"load", d.load}});
}

json RouterService::Impl::instance_json(const std::string& name, const Instance& in,
                                        const router::KvRouterStats& rs) const {
  json o{{"name", name},
         {"id", in.id},
         {"endpoint", in.source.endpoint},
         {"replay_endpoint", in.source.replay_endpoint},
         {"topic", in.source.topic},
         {"load", in.id < rs.load.size() ? rs.load[in.id] : 0},
         {"decisions", in.id < rs.per_instance.size() ? rs.per_instance[in.id] : 0}};
  try {
    const router::InstanceState s = index.state(in.id);
    o["state"] = router::to_string(s.stale);
    o["next_sequence"] = s.next_sequence;
    o["held_batches"] = s.held_batches;
    o["blocks"] = tier_counts(s.blocks);
  } catch (const UsageError&) {
    o["state"] = "removed";
  }
  return o;
}

HttpReply RouterService::Impl::list_instances() {
  const router::KvRouterStats rs = router.stats();
  json list = json::array();
  std::lock_guard lock(instances_mu);
  for (const auto& [name, in] : instances) list.push_back(instance_json(name, in, rs));
  return json_reply(200, json{{"instances", std::move(list)}});
}

HttpReply RouterService::Impl::health() {
  const router::KvRouterStats rs = router.stats();
  json list = json::array();
  std::size_t fresh = 0;
  {
    std::lock_guard lock(instances_mu);
    for (const auto& [name, in] : instances) {
      json o = instance_json(name, in, rs);
      if (o["state"] == "fresh") ++fresh;
      list.push_back(std::move(o));
    }
  }
  std::size_t flying = 0;
  {
    std::lock_guard lock(flight_mu);
    flying = in_flight.size();
  }
  const int code = list.empty() ? 503 : 200;
  json g4_state = g4 ? g4->json() : json();  // a G4 down or refused degrades, as a stale instance
  const bool g4_ok = !g4 || g4_state["state"] == "ok";
  const char* status = list.empty() ? "no_instances" : fresh > 0 && g4_ok ? "ok" : "degraded";
  json body{{"status", status},
            {"policy", router::to_string(options.router.policy)},
            {"block_size", options.router.block_size},
            {"instances", std::move(list)},
            {"fresh_instances", fresh},
            {"in_flight", flying},
            {"decisions", rs.decisions}};
  if (g4) body["g4"] = std::move(g4_state);
  if (!options.model_groups.empty()) body["model_groups"] = options.model_groups;
  return json_reply(code, body);
}

HttpReply RouterService::Impl::metrics() {
  std::vector<prometheus::MetricFamily> families = registry->Collect();
  for (auto& f : feed_metrics.Collect()) families.push_back(std::move(f));
  return {200, "text/plain; version=0.0.4; charset=utf-8",
          prometheus::TextSerializer().Serialize(families)};
}

HttpReply RouterService::Impl::add_instance(const std::string& body) {
  static constexpr std::string_view kShape =
      R"({"name": "...", "endpoint": "tcp://host:port", "replay_endpoint": "...", "topic": ""})";
  const json j = parse_body(body, kShape, options.max_json_depth);
  events::EventSource s;
  s.name = string_field(j, "name", kShape, true);
  s.endpoint = string_field(j, "endpoint", kShape, true);
  s.replay_endpoint = string_field(j, "replay_endpoint", kShape, false);
  s.topic = string_field(j, "topic", kShape, false);
  if (s.name.empty()) throw ClientError{400, "\"name\" is empty; name the instance"};
  if (s.endpoint.find("://") == std::string::npos) {
    throw ClientError{400, "\"endpoint\": " + quote(s.endpoint) +
                               " is not a ZeroMQ endpoint (e.g. tcp://engine-0:5557)"};
  }
  const router::KvRouterStats rs = router.stats();
  std::lock_guard lock(instances_mu);
  const std::string name = s.name;
  add(std::move(s));
  return json_reply(201, instance_json(name, instances.at(name), rs));
}

HttpReply RouterService::Impl::remove_instance(const std::string& name) {
  std::lock_guard lock(instances_mu);
  const auto it = instances.find(name);
  if (it == instances.end()) {
    throw ClientError{404, "no instance named " + quote(name) + " (GET /instances lists them)"};
  }
  feed.remove_instance(it->second.id);
  const InstanceId id = it->second.id;
  instances.erase(it);
  return json_reply(200, json{{"removed", name}, {"id", id}});
}

HttpReply RouterService::Impl::dispatch(const HttpRequest& r, std::size_t& endpoint) {
  const auto method = [&r](const char* want, std::string_view what) {
    if (r.method != want) {
      throw ClientError{405, fmt::format("{} takes {}, not {}", what, want, quote(r.method))};
    }
  };
  endpoint = endpoint_of(r.path);
  check_body(r, options.max_body_bytes);  // before anything is done with it
  if (r.path == "/route") {
    method("POST", "/route");
    return route(r.body);
  }
  if (r.path == "/finish") {
    method("POST", "/finish");
    return finish(r.body);
  }
  if (r.path == "/health") {
    method("GET", "/health");
    return health();
  }
  if (r.path == "/instances") {
    if (r.method == "POST") return add_instance(r.body);
    method("GET", "/instances");
    return list_instances();
  }
  if (r.path.starts_with("/instances/")) {
    method("DELETE", "/instances/NAME");
    return remove_instance(r.path.substr(11));
  }
  if (r.path == "/metrics") {
    method("GET", "/metrics");
    return metrics();
  }
  throw ClientError{404, fmt::format("no endpoint {} {}: the endpoints are POST /route, POST "
                                     "/finish, GET /health, GET /metrics, GET|POST /instances, "
                                     "DELETE /instances/NAME",
                                     quote(r.method), quote(r.path))};
}

RouterService::RouterService(const RouterProcessOptions& options)
    : impl_(std::make_unique<Impl>(options)) {
  std::lock_guard lock(impl_->instances_mu);
  for (const auto& s : options.instances) {
    try {
      impl_->add(s);
    } catch (const ClientError& e) {
      throw std::invalid_argument("--instance " + s.name + ": " + e.message);
    }
  }
}

RouterService::~RouterService() = default;

HttpReply RouterService::handle(const HttpRequest& request) {
  std::size_t endpoint = kEndpoints.size() - 1;
  HttpReply reply;
  try {
    reply = impl_->dispatch(request, endpoint);
  } catch (const ClientError& e) {
    reply = error_reply(e.status, e.message);
  }
  impl_->count(endpoint, reply.status);
  return reply;
}

router::KvEventFeed& RouterService::feed() noexcept { return impl_->feed; }
router::KvIndexer& RouterService::index() noexcept { return impl_->index; }
router::KvRouter& RouterService::router() noexcept { return impl_->router; }

std::optional<std::uint32_t> RouterService::instance_id(std::string_view name) const {
  std::lock_guard lock(impl_->instances_mu);
  const auto it = impl_->instances.find(name);
  if (it == impl_->instances.end()) return std::nullopt;
  return it->second.id;
}

}  // namespace kvbm::router_process
