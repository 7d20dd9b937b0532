#include "replay/metrics_server.h"

#include <stdexcept>

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

namespace kvbm::replay {

MetricsServer::MetricsServer(const std::string& address, int port,
                             std::shared_ptr<prometheus::Registry> registry)
    : address_(address), registry_(std::move(registry)) {
  const std::string bind =
      (address.find(':') != std::string::npos ? "[" + address + "]" : address) + ":" +
      std::to_string(port);
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(bind);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot serve metrics on " + bind + ": " + e.what());
  }
  exposer_->RegisterCollectable(registry_);
  const auto ports = exposer_->GetListeningPorts();
  port_ = ports.empty() ? port : ports.front();
}

MetricsServer::~MetricsServer() {
  if (exposer_) exposer_->RemoveCollectable(registry_);
}

std::string MetricsServer::url() const {
  return "http://" + (address_.find(':') != std::string::npos ? "[" + address_ + "]" : address_) +
         ":" + std::to_string(port_) + "/metrics";
}

}  // namespace kvbm::replay
