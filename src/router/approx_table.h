// src/router/approx_table.h: where the router sent each prefix, for instances
// that publish no KV events (KvRouter::set_approximate).
//
// An entry says "instance i was sent block h": it is assumed to hold it until
// the entry's TTL runs out. record() adds or refreshes a routed request's
// blocks, its last block first, so that when the table is full the oldest
// entries go and, within a request, its tail before its head (as a pool
// evicts). prefix() counts the leading blocks an instance holds by the table.
// Memory is bounded by max_blocks entries (about 80 bytes each).
//
// Not thread-safe: the KvRouter's lock guards it.

#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>

#include "kvbm/clock.h"
#include "kvbm/router/overlap.h"

namespace kvbm::router::impl {

class ApproxTable {
 public:
  ApproxTable(Clock::duration ttl, std::size_t max_blocks) : ttl_(ttl), max_blocks_(max_blocks) {}

  /// `instance` was sent `hashes` (a request's blocks, in prefix order) at `now`.
  void record(InstanceId instance, std::span<const std::uint64_t> hashes, Clock::time_point now);
  /// How many of `hashes`, from the first, `instance` holds by the table at `now`.
  [[nodiscard]] std::size_t prefix(InstanceId instance, std::span<const std::uint64_t> hashes,
                                   Clock::time_point now) const;
  /// Forgets everything recorded for `instance`.
  void forget(InstanceId instance);
  /// Entries held (expired ones may linger until the next record()).
  [[nodiscard]] std::size_t size() const noexcept { return map_.size(); }

 private:
  struct Key {
    std::uint64_t hash;
    InstanceId instance;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept {
      return static_cast<std::size_t>(k.hash ^ (std::uint64_t{k.instance} * 0x9E3779B97F4A7C15ULL));
    }
  };
  struct Entry {
    Key key;
    Clock::time_point expires;
  };

  const Clock::duration ttl_;
  const std::size_t max_blocks_;
  std::list<Entry> order_;  // least recently recorded first
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> map_;
};

}  // namespace kvbm::router::impl
