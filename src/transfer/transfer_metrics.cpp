#include "kvbm/transfer/transfer_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include "kvbm/error.h"

namespace kvbm {

struct TransferMetrics::Series {
  std::shared_ptr<prometheus::Registry> registry;
  std::string path;

  struct CounterSeries {
    prometheus::Family<prometheus::Counter>* family = nullptr;
    prometheus::Counter* counter = nullptr;
  };
  CounterSeries blocks, bytes, failed_blocks;

  CounterSeries counter(const std::string& name, const std::string& help) {
    auto& family = prometheus::BuildCounter().Name(name).Help(help).Register(*registry);
    KVBM_CHECK(!family.Has({{"path", path}}), "metrics registry already holds ", name, "{path=\"",
               path, "\"}: give each transfer engine that shares a registry its own name");
    return {&family, &family.Add({{"path", path}})};
  }
};

TransferMetrics::TransferMetrics(std::shared_ptr<prometheus::Registry> registry,
                                 std::string_view path)
    : s_(std::make_unique<Series>()) {
  KVBM_CHECK(registry != nullptr, "TransferMetrics needs a prometheus registry");
  s_->registry = std::move(registry);
  s_->path = std::string(path);
  auto& s = *s_;
  s.blocks = s.counter("kvbm_transfer_blocks_total", "Total blocks transferred successfully");
  try {
    s.bytes =
        s.counter("kvbm_transfer_bytes_total", "Total bytes of blocks transferred successfully");
    s.failed_blocks =
        s.counter("kvbm_transfer_failed_blocks_total", "Total blocks whose transfer failed");
  } catch (...) {  // undo, then rethrow: nothing is swallowed
    // Leave the registry as it was: drop the series created so far.
    for (auto* c : {&s.blocks, &s.bytes}) {
      if (c->counter != nullptr) c->family->Remove(c->counter);
    }
    throw;
  }
}

TransferMetrics::~TransferMetrics() {
  auto& s = *s_;
  for (auto* c : {&s.blocks, &s.bytes, &s.failed_blocks}) c->family->Remove(c->counter);
}

void TransferMetrics::add(std::uint64_t blocks, std::uint64_t bytes,
                          std::uint64_t failed_blocks) noexcept {
  auto& s = *s_;
  if (blocks != 0) s.blocks.counter->Increment(static_cast<double>(blocks));
  if (bytes != 0) s.bytes.counter->Increment(static_cast<double>(bytes));
  if (failed_blocks != 0) s.failed_blocks.counter->Increment(static_cast<double>(failed_blocks));
}

TransferCounts TransferMetrics::counts() const noexcept {
  const auto& s = *s_;
  auto value = [](const Series::CounterSeries& c) {
    return static_cast<std::uint64_t>(c.counter->Value());
  };
  return {value(s.blocks), value(s.bytes), value(s.failed_blocks)};
}

const std::shared_ptr<prometheus::Registry>& TransferMetrics::registry() const noexcept {
  return s_->registry;
}
const std::string& TransferMetrics::path() const noexcept { return s_->path; }

}  // namespace kvbm
