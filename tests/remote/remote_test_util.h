// tests/remote/remote_test_util.h: blocks, destinations, options and metric
// readers shared by the remote store tests (single server, ACL, cluster).

#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "kvbm/remote/remote_store.h"
#include "remote/redis_server.h"

namespace kvbm::test {

using namespace std::chrono_literals;

#define KVBM_NEED_REDIS() \
  if (!test::RedisServer::installed()) KVBM_SKIP_OR_FAIL(test::RedisServer::kSkipMessage)

inline RemoteNamespace test_namespace(std::string user = "test") {
  RemoteNamespace ns;
  ns.model = "tiny-model@1";
  ns.dtype = "bf16";
  ns.layout = LayoutConfig{
      .num_layers = 2, .outer_dim = 2, .page_size = 16, .inner_dim = 64, .dtype_bytes = 2};
  ns.user_namespace = std::move(user);
  return ns;  // 4 regions of 2 KiB: 8 KiB per block
}

inline RemoteStoreOptions options_for(std::vector<std::string> urls,
                                      RemoteNamespace ns = test_namespace()) {
  RemoteStoreOptions o;
  o.urls = std::move(urls);
  o.name_space = std::move(ns);
  o.connect_timeout = 200ms;
  o.command_timeout = 500ms;
  o.backoff_initial = 20ms;
  o.backoff_max = 200ms;
  return o;
}

/// The bytes of block `hash`: a function of the hash and the seed alone, so
/// another process can check them.
inline std::vector<std::byte> block_bytes_of(std::uint64_t hash, std::size_t n,
                                             std::uint64_t seed = 7) {
  std::mt19937_64 rng(hash ^ (seed * 0x9E3779B97F4A7C15ULL));
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min<std::size_t>(8, n - i));
  }
  return out;
}

/// Blocks held in memory with their region views, for put().
struct Blocks {
  std::vector<std::uint64_t> hashes;
  std::vector<std::vector<std::byte>> data;
  std::vector<std::vector<std::span<const std::byte>>> regions;
  std::vector<RemotePut> puts;

  Blocks(std::uint64_t first, std::size_t count, std::size_t bytes, std::size_t parts = 4,
         std::uint64_t seed = 7) {
    for (std::size_t i = 0; i < count; ++i) {
      hashes.push_back(0xA000'0000'0000'0000ULL + first + i * 0x1'0000'0001ULL);
      data.push_back(block_bytes_of(hashes.back(), bytes, seed));
    }
    for (std::size_t i = 0; i < count; ++i) {
      std::vector<std::span<const std::byte>> r;
      const std::size_t part = bytes / parts;
      for (std::size_t p = 0; p < parts; ++p) r.emplace_back(data[i].data() + p * part, part);
      regions.push_back(std::move(r));
    }
    for (std::size_t i = 0; i < count; ++i) puts.push_back({hashes[i], 0, regions[i]});
  }
};

/// Destinations for get(), one contiguous region each, pre-filled with 0xEE.
struct Destinations {
  std::vector<std::vector<std::byte>> data;
  std::vector<std::span<std::byte>> region;
  std::vector<RemoteGet> gets;

  Destinations(const std::vector<std::uint64_t>& hashes, std::size_t bytes) {
    data.assign(hashes.size(), std::vector<std::byte>(bytes, std::byte{0xEE}));
    for (auto& d : data) region.emplace_back(d);
    for (std::size_t i = 0; i < hashes.size(); ++i) gets.push_back({hashes[i], 0, {&region[i], 1}});
  }
};

/// The value of a counter or gauge series whose labels include `labels`; -1 when absent.
inline double metric(prometheus::Registry& registry, const std::string& name,
                     const std::map<std::string, std::string>& labels = {}) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      bool match = true;
      for (const auto& kv : labels) {
        const std::string& k = kv.first;  // named: clang 14 cannot capture structured bindings
        const std::string& v = kv.second;
        match &= std::any_of(
            m.label.begin(), m.label.end(),
            [&](const prometheus::ClientMetric::Label& l) { return l.name == k && l.value == v; });
      }
      if (match)
        return family.type == prometheus::MetricType::Gauge ? m.gauge.value : m.counter.value;
    }
  }
  return -1;
}

inline std::size_t count(const std::vector<RemoteStatus>& v, RemoteStatus s) {
  return static_cast<std::size_t>(std::count(v.begin(), v.end(), s));
}

}  // namespace kvbm::test
