// replay/metrics_server.h: the Prometheus endpoint of kvbm-replay.
//
// A MetricsServer serves a prometheus-cpp registry over HTTP at /metrics
// (prometheus-cpp's pull Exposer) from construction to destruction, on its
// own threads. Port 0 binds any free port; port() says which.
//
// Thread-safety: construct and destroy on one thread; port() from any.

#pragma once

#include <memory>
#include <string>

namespace prometheus {
class Exposer;
class Registry;
}  // namespace prometheus

namespace kvbm::replay {

/// Serves one registry at http://address:port/metrics.
class MetricsServer {
 public:
  /// Binds address:port and starts serving. Throws std::runtime_error when
  /// the address cannot be bound.
  MetricsServer(const std::string& address, int port,
                std::shared_ptr<prometheus::Registry> registry);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  /// Returns the port bound.
  [[nodiscard]] int port() const noexcept { return port_; }
  /// Returns "http://address:port/metrics".
  [[nodiscard]] std::string url() const;

 private:
  std::string address_;
  int port_ = 0;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace kvbm::replay
