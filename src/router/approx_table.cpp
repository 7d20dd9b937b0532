// src/router/approx_table.cpp: where the router sent each prefix (router/approx_table.h).

#include "router/approx_table.h"

#include <iterator>

namespace kvbm::router::impl {

void ApproxTable::record(InstanceId instance, std::span<const std::uint64_t> hashes,
                         Clock::time_point now) {
  // Every entry has the same TTL: the least recently recorded expire first.
  while (!order_.empty() && order_.front().expires <= now) {
    map_.erase(order_.front().key);
    order_.pop_front();
  }
  for (std::size_t i = hashes.size(); i-- > 0;) {  // last block first
    const Key key{hashes[i], instance};
    if (const auto found = map_.find(key); found != map_.end()) {
      found->second->expires = now + ttl_;
      order_.splice(order_.end(), order_, found->second);
      continue;
    }
    order_.push_back(Entry{key, now + ttl_});
    map_.emplace(key, std::prev(order_.end()));
    if (map_.size() > max_blocks_) {
      map_.erase(order_.front().key);
      order_.pop_front();
    }
  }
}

std::size_t ApproxTable::prefix(InstanceId instance, std::span<const std::uint64_t> hashes,
                                Clock::time_point now) const {
  std::size_t n = 0;
  for (const std::uint64_t h : hashes) {
    const auto found = map_.find(Key{h, instance});
    if (found == map_.end() || found->second->expires <= now) break;
    ++n;
  }
  return n;
}

void ApproxTable::forget(InstanceId instance) {
  for (auto it = order_.begin(); it != order_.end();) {
    if (it->key.instance == instance) {
      map_.erase(it->key);
      it = order_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace kvbm::router::impl
