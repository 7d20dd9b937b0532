// tests/router/router_test_util.h: event builders for the router tests.

#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvbm/events/kv_event.h"

namespace kvbm::router::test {

inline events::KvEvent stored(std::vector<std::uint64_t> hashes, std::string medium = "GPU") {
  events::BlockStored e;
  e.block_hashes = std::move(hashes);
  e.block_size = 16;
  e.medium = std::move(medium);
  return e;
}

inline events::KvEvent removed(std::vector<std::uint64_t> hashes, std::string medium = "GPU") {
  events::BlockRemoved e;
  e.block_hashes = std::move(hashes);
  e.medium = std::move(medium);
  return e;
}

inline events::KvEvent cleared() { return events::AllBlocksCleared{}; }

inline events::KvEventBatch batch(std::vector<events::KvEvent> events) {
  events::KvEventBatch b;
  b.events = std::move(events);
  return b;
}

}  // namespace kvbm::router::test
