#include "kvbm/transfer/transfer_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include "kvbm/detail/series_set.h"
#include "kvbm/error.h"

namespace kvbm {

struct TransferMetrics::Series {
  Series(std::shared_ptr<prometheus::Registry> r, std::string p)
      : path(std::move(p)),
        set(std::move(r), {{"path", path}}, "TransferMetrics",
            "give each transfer engine that shares a registry its own name") {}

  std::string path;
  detail::SeriesSet set;
  prometheus::Counter *blocks = nullptr, *bytes = nullptr, *failed_blocks = nullptr;
};

TransferMetrics::TransferMetrics(std::shared_ptr<prometheus::Registry> registry,
                                 std::string_view path)
    : s_(std::make_unique<Series>(std::move(registry), std::string(path))) {
  auto& s = *s_;
  s.blocks = s.set.counter("kvbm_transfer_blocks_total", "Total blocks transferred successfully");
  s.bytes =
      s.set.counter("kvbm_transfer_bytes_total", "Total bytes of blocks transferred successfully");
  s.failed_blocks =
      s.set.counter("kvbm_transfer_failed_blocks_total", "Total blocks whose transfer failed");
}

TransferMetrics::~TransferMetrics() = default;

void TransferMetrics::add(std::uint64_t blocks, std::uint64_t bytes,
                          std::uint64_t failed_blocks) noexcept {
  auto& s = *s_;
  if (blocks != 0) s.blocks->Increment(static_cast<double>(blocks));
  if (bytes != 0) s.bytes->Increment(static_cast<double>(bytes));
  if (failed_blocks != 0) s.failed_blocks->Increment(static_cast<double>(failed_blocks));
}

TransferCounts TransferMetrics::counts() const noexcept {
  const auto& s = *s_;
  auto value = [](const prometheus::Counter* c) { return static_cast<std::uint64_t>(c->Value()); };
  return {value(s.blocks), value(s.bytes), value(s.failed_blocks)};
}

const std::shared_ptr<prometheus::Registry>& TransferMetrics::registry() const noexcept {
  return s_->set.registry();
}
const std::string& TransferMetrics::path() const noexcept { return s_->path; }

}  // namespace kvbm
