#include "router/g4_health.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <utility>

#include "kvbm/clock.h"
#include "kvbm/detail/worker.h"
#include "kvbm/remote/remote_store.h"

namespace kvbm::router_process {
namespace {

// "health-probe" in ASCII: the probe block's sequence hash.
constexpr std::uint64_t kProbeHash = 0x6865616c74682d70ULL;

RemoteStoreOptions probe_options(const std::vector<std::string>& urls,
                                 std::chrono::milliseconds period,
                                 std::shared_ptr<prometheus::Registry> registry) {
  RemoteStoreOptions o;
  o.urls = urls;
  // A namespace of the router's own: the probe never meets an engine's block.
  o.name_space.model = "kvbm-router";
  o.name_space.dtype = "u8";
  o.name_space.layout = LayoutConfig{
      .num_layers = 1, .outer_dim = 1, .page_size = 1, .inner_dim = 16, .dtype_bytes = 1};
  o.name_space.user_namespace = "health-probe";
  o.connections_per_server = 1;
  o.ttl = std::chrono::seconds(60);
  // A server back (or an ACL fixed) is seen within about one period.
  o.backoff_max = std::max<std::chrono::milliseconds>(period, o.backoff_initial);
  o.metrics_registry = std::move(registry);
  return o;
}

}  // namespace

G4Health::G4Health(const std::vector<std::string>& urls, std::chrono::milliseconds period,
                   std::shared_ptr<prometheus::Registry> registry)
    : store_(RemoteStore::create(probe_options(urls, period, std::move(registry)))) {
  worker_ = std::make_unique<detail::PeriodicWorker>("G4 health check", Clock::steady(), period,
                                                     [this] { check(); });
  worker_->wake();  // the first check now, not one period from now
}

G4Health::~G4Health() { worker_->stop(); }

void G4Health::check() {
  std::array<std::byte, 16> out{};
  std::array<std::byte, 16> in{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>('a' + i);
  const std::array<std::span<const std::byte>, 1> put_regions{std::span<const std::byte>(out)};
  const std::array<std::span<std::byte>, 1> get_regions{std::span<std::byte>(in)};
  const RemotePut put{.hash = kProbeHash, .regions = put_regions};
  const RemoteGet get{.hash = kProbeHash, .regions = get_regions};
  const std::uint64_t hash = kProbeHash;
  // SET, GET, EXISTS: each refused command keeps the tier refused until it passes.
  (void)store_->put(std::span(&put, 1));
  (void)store_->get(std::span(&get, 1));
  (void)store_->exists(std::span(&hash, 1));
  checks_.fetch_add(1, std::memory_order_release);
}

nlohmann::json G4Health::json() const {
  const RemoteStoreStats s = store_->stats();
  nlohmann::json g{{"state", to_string(s.state)},
                   {"checks", checks()},
                   {"servers", s.servers},
                   {"servers_down", s.servers_down},
                   {"servers_refused", s.servers_refused}};
  switch (s.state) {
    case RemoteState::kOk:
      g["reason"] = nullptr;
      break;
    case RemoteState::kDown:
      g["reason"] = "not answering";
      break;
    case RemoteState::kRefused:
      g["reason"] = to_string(remote_refusal_of(s.refusal));
      g["server"] = s.refused_server;
      g["user"] = s.refused_user;
      g["refusal"] = s.refusal;
      break;
  }
  return g;
}

}  // namespace kvbm::router_process
