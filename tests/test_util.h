// tests/test_util.h: helpers shared by the core tests.
//
//   seq(i, chain)         the i-th SequenceHash of a lineage chain
//   chain(n, chain)       the first n hashes of that chain
//   root(v)               an independent position-0 hash
//   expect_balanced(m)    audit() is empty and the pool counts add up
//   metric_value(m, name) the value of `name{pool="<m's pool>"}`, or nullopt
//   make_registered(...)  allocates, stages and registers blocks in one go
//   test_seed()           a random seed (or $KVBM_TEST_SEED), printed for replay
//   test_seed64()         the same, 64 bits
//   env_test_seed()       $KVBM_TEST_SEED if set: the one variable that fixes every
//                         randomized test's seed (docs/testing.md)
//   eventually(pred)      waits (yielding, up to 10 s) for another thread's work
//   expect_usage_error(f, parts)  f() throws UsageError naming every one of `parts`

#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include "kvbm/block_manager.h"
#include "kvbm/error.h"
#include "kvbm/sequence_hash.h"

namespace kvbm::test {

/// Returns the i-th hash of chain `chain_id`: value (chain_id << 32) | (i + 1),
/// parented on the (i-1)-th hash of the same chain (position 0 has no parent).
inline SequenceHash seq(std::uint32_t i, std::uint32_t chain_id = 0) {
  const std::uint64_t base = std::uint64_t{chain_id} << 32;
  const std::uint64_t value = base | (std::uint64_t{i} + 1);
  if (i == 0) return SequenceHash(value, std::nullopt, 0);
  return SequenceHash(value, value - 1, i);
}

/// Returns the first n hashes of chain `chain_id`.
inline std::vector<SequenceHash> chain(std::uint32_t n, std::uint32_t chain_id = 0) {
  std::vector<SequenceHash> out;
  out.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) out.push_back(seq(i, chain_id));
  return out;
}

/// Returns an independent first-block hash with value `v` (v must not collide
/// with chain values used in the same test: chains use small low words).
inline SequenceHash root(std::uint64_t v) { return SequenceHash(v, std::nullopt, 0); }

/// Returns $KVBM_TEST_SEED, the one environment variable that fixes the seed of
/// every randomized test, or nullopt when it is unset or empty. A value that is
/// not an unsigned decimal integer fails the calling test (and yields nullopt).
inline std::optional<std::uint64_t> env_test_seed() {
  const char* env = std::getenv("KVBM_TEST_SEED");
  if (env == nullptr || *env == '\0') return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(env, &end, 10);
  if (*end != '\0' || *env == '-') {
    ADD_FAILURE() << "KVBM_TEST_SEED=" << env << " is not an unsigned integer";
    return std::nullopt;
  }
  return static_cast<std::uint64_t>(v);
}

/// $KVBM_STRESS_SCALE (the sanitizer stages set 0.1); 1 when unset or not positive.
inline double stress_scale() {
  const char* s = std::getenv("KVBM_STRESS_SCALE");
  if (s == nullptr || *s == '\0') return 1.0;
  const double v = std::strtod(s, nullptr);
  return v > 0.0 ? v : 1.0;
}

/// `n` scaled by stress_scale(), at least `at_least`.
inline std::size_t scaled(std::size_t n, std::size_t at_least) {
  return std::max(at_least, static_cast<std::size_t>(static_cast<double>(n) * stress_scale()));
}

/// Returns the seed for a randomized test: $KVBM_TEST_SEED when set, else a
/// fresh random one. Prints it so a failure can be replayed.
inline std::uint64_t test_seed64() {
  std::uint64_t seed = 0;
  if (const auto env = env_test_seed()) {
    seed = *env;
  } else {
    std::random_device rd;
    seed = (std::uint64_t{rd()} << 32) ^ rd();
  }
  std::cout << "seed: " << seed << " (replay with KVBM_TEST_SEED=" << seed << ")\n";
  return seed;
}

/// test_seed64() for 32-bit engines: $KVBM_TEST_SEED (its low 32 bits) or a
/// fresh random seed, printed.
inline std::uint32_t test_seed() {
  std::uint32_t seed = 0;
  if (const auto env = env_test_seed()) {
    seed = static_cast<std::uint32_t>(*env);
  } else {
    seed = std::random_device{}();
  }
  std::cout << "seed: " << seed << " (replay with KVBM_TEST_SEED=" << seed << ")\n";
  return seed;
}

/// Asserts the manager's accounting is consistent.
template <class Manager>
void expect_balanced(const Manager& m) {
  EXPECT_EQ(m.audit(), "");
  const PoolCounts c = m.pool_counts();
  EXPECT_TRUE(c.balanced()) << "reset " << c.reset << " + inactive " << c.inactive << " + in use "
                            << c.in_use << " != total " << c.total;
  EXPECT_EQ(c.in_use, c.mutable_out + c.immutable_out);
  EXPECT_LE(c.evictable, c.inactive);
}

/// Returns the value of series `name{pool="<pool>"}` in `registry`, or nullopt
/// when no such series exists.
inline std::optional<double> metric_value(prometheus::Registry& registry, std::string_view name,
                                          std::string_view pool) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      bool match = false;
      for (const auto& label : metric.label) {
        if (label.name == "pool" && label.value == pool) match = true;
      }
      if (!match) continue;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          return metric.counter.value;
        case prometheus::MetricType::Gauge:
          return metric.gauge.value;
        default:
          return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

/// Returns the value of series `name{pool="<m's pool>"}` in m's metrics registry.
template <class Manager>
std::optional<double> metric_value(const Manager& m, std::string_view name) {
  return metric_value(*m.metrics_registry(), name, m.pool_name());
}

/// Allocates one block per hash, stages and registers it; returns the handles
/// in hash order. Fails the test (and returns fewer) when allocation fails.
template <TierMarker T>
std::vector<ImmutableBlock<T>> make_registered(BlockManager<T>& m,
                                               const std::vector<SequenceHash>& hashes) {
  std::vector<ImmutableBlock<T>> out;
  if (hashes.empty()) return out;
  auto blocks = m.allocate_blocks(hashes.size());
  EXPECT_TRUE(blocks.has_value()) << "allocate_blocks(" << hashes.size() << ") failed";
  if (!blocks) return out;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    auto staged = std::move((*blocks)[i]).stage(hashes[i], m.block_size());
    EXPECT_TRUE(staged.ok());
    if (!staged.ok()) return out;
    out.push_back(m.register_block(std::move(staged).value()));
  }
  return out;
}

/// Returns the staged block, failing the test if staging failed.
template <TierMarker T>
CompleteBlock<T> stage_ok(MutableBlock<T>&& block, const SequenceHash& hash) {
  const std::uint32_t size = block.block_size();
  auto staged = std::move(block).stage(hash, size);
  if (!staged.ok()) {
    ADD_FAILURE() << "stage failed: " << staged.error().reason;
  }
  return std::move(staged).value();
}

/// Registers one fresh block with `hash` and returns the handle.
template <TierMarker T>
ImmutableBlock<T> register_one(BlockManager<T>& m, const SequenceHash& hash) {
  auto blocks = m.allocate_blocks(1);
  if (!blocks) throw std::runtime_error("register_one: pool exhausted");
  return m.register_block(stage_ok(std::move(blocks->front()), hash));
}

/// Returns presence of each hash in tier T through the manager's registry.
template <TierMarker T>
std::vector<bool> present(const BlockManager<T>& m, const std::vector<SequenceHash>& hashes) {
  return m.registry()->template presence<T>(hashes);
}

/// Returns true once `pred` holds, false when it still does not after 10 s.
/// For states nothing signals (a ManualClock's waiters, a handle's status):
/// it yields between looks, it does not sleep. Wait on a condition variable
/// or a handle where there is one.
inline bool eventually(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Expects `f` to throw UsageError whose message contains every one of `parts`.
template <class F>
void expect_usage_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected a UsageError";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << what;
  }
}

}  // namespace kvbm::test
