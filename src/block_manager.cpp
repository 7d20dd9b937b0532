#include "kvbm/block_manager.h"

#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include "kvbm/eviction/make_backend.h"
#include "kvbm/logging.h"

namespace kvbm::detail {

std::shared_ptr<BlockStore> make_block_store(std::uint32_t block_count, std::uint32_t block_size,
                                             DuplicatePolicy duplicate_policy,
                                             EvictionPolicy eviction,
                                             const std::shared_ptr<BlockRegistry>& registry,
                                             std::shared_ptr<prometheus::Registry> metrics,
                                             std::string name,
                                             std::vector<std::shared_ptr<PoolListener>> listeners) {
  if (!metrics) metrics = std::make_shared<prometheus::Registry>();
  BlockStore::Options options;
  options.block_count = block_count;
  options.block_size = block_size;
  options.duplicate_policy = duplicate_policy;
  options.tracker = registry->frequency_tracker();
  options.backend = make_eviction_backend(eviction, block_count, options.tracker);
  options.metrics = std::make_unique<PoolMetrics>(std::move(metrics), name);
  options.name = std::move(name);
  options.listeners = std::move(listeners);
  auto store = std::make_shared<BlockStore>(std::move(options));
  logger()->debug("pool {}: {} blocks of {} tokens, {} eviction, {} duplicates", store->name(),
                  block_count, block_size, to_string(eviction),
                  duplicate_policy == DuplicatePolicy::kAllow ? "allow" : "reject");
  return store;
}

}  // namespace kvbm::detail
