// tests/textbook_lru.h: TextbookLru, the prefix cache of the shipped trace's reference figures
// (../shared/data/README.md) written out plainly, with nothing of kvbm but SequenceHash: a list in
// recency order and a map from each hash to its place in it.
//
// A request's hits are its leading blocks that are in the cache; then every block of it is
// touched (moved to the most recent end) or inserted, front to back, so the hits first and the
// request's last block most recent; then the least recently used blocks go until the cache holds
// at most its capacity. Evicting once the request is in, rather than at each insertion, never
// evicts a block of the request for itself (a block manager holds a request's blocks while it
// allocates); on the shipped trace both give the README's figures.
//
// The trace tests replay a prefix of the trace under KVBM_STRESS_SCALE < 1 (the sanitizer
// stages), where the README's figures do not apply, and compare kvbm with this model instead;
// at full scale they check the model against the README too.

#pragma once

#include <cstddef>
#include <list>
#include <span>
#include <unordered_map>

#include "kvbm/sequence_hash.h"

namespace kvbm::test {

/// An LRU cache of block hashes fed one request at a time (see the file comment).
class TextbookLru {
 public:
  explicit TextbookLru(std::size_t capacity) : capacity_(capacity) {}

  /// Serves one request: returns its hits and leaves its blocks most recently used.
  std::size_t request(std::span<const SequenceHash> hashes) {
    std::size_t hits = 0;
    while (hits < hashes.size() && where_.contains(hashes[hits])) ++hits;
    for (const SequenceHash& h : hashes) {
      if (const auto it = where_.find(h); it != where_.end()) {
        order_.splice(order_.end(), order_, it->second);
      } else {
        where_.emplace(h, order_.insert(order_.end(), h));
      }
    }
    while (order_.size() > capacity_) {
      where_.erase(order_.front());
      order_.pop_front();
    }
    hits_ += hits;
    blocks_ += hashes.size();
    return hits;
  }

  /// Returns the hits of every request so far.
  [[nodiscard]] std::size_t hits() const noexcept { return hits_; }
  /// Returns the blocks of every request so far.
  [[nodiscard]] std::size_t blocks() const noexcept { return blocks_; }
  /// Returns the number of blocks cached now.
  [[nodiscard]] std::size_t size() const noexcept { return order_.size(); }

 private:
  std::size_t capacity_;
  std::list<SequenceHash> order_;  // least recently used first
  std::unordered_map<SequenceHash, std::list<SequenceHash>::iterator> where_;
  std::size_t hits_ = 0;
  std::size_t blocks_ = 0;
};

}  // namespace kvbm::test
