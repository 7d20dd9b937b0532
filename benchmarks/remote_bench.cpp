// Remote tier throughput: RemoteStore::put and get of whole blocks (64 KiB,
// 1 MiB, 2 MiB) in batches of 32 against the Redis server (or, with a
// redis+cluster:// URL, the Redis Cluster) at $KVBM_REDIS_URL,
// beside the same values moved by a plain pipelined hiredis client (one
// connection, redisAppendCommandArgv + redisGetReply, no header, no checksum,
// no copy into a destination): the ratio store / bare is what the store costs
// on top of Redis. benchmarks/remote_vs_redis.sh starts a server and runs
// this next to redis-benchmark with the same value size, pipeline depth and
// connections, on one server and on a 3-primary cluster (where the bare
// client, which speaks to one server, skips: redis-benchmark --cluster is the
// baseline there).
//
//   KVBM_REDIS_URL  redis://127.0.0.1:PORT/0, unix:///path.sock or
//                   redis+cluster://127.0.0.1:PORT[,...] (required)
//
// Each iteration moves one batch; the batch's keys are overwritten every
// iteration, so the server's memory stays at one batch per size.

#include <cstdlib>
#include <cstring>
#include <hiredis/hiredis.h>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>

#include "kvbm/remote/remote_store.h"

namespace {

using namespace kvbm;

constexpr std::size_t kConnections = 2;

const char* redis_url() { return std::getenv("KVBM_REDIS_URL"); }

/// One block of `kib` KiB: 1 layer x K,V x 16 tokens x inner x 2 bytes.
LayoutConfig layout_of(std::size_t kib) {
  return LayoutConfig{.num_layers = 1,
                      .outer_dim = 2,
                      .page_size = 16,
                      .inner_dim = static_cast<std::uint32_t>(kib * 1024 / 64),
                      .dtype_bytes = 2};
}

RemoteStore& store_for(std::size_t kib) {
  static std::map<std::size_t, std::unique_ptr<RemoteStore>> stores;
  auto& s = stores[kib];
  if (!s) {
    RemoteStoreOptions o;
    o.urls = {redis_url()};
    o.name_space = {
        .model = "bench", .dtype = "bf16", .layout = layout_of(kib), .user_namespace = "bench"};
    o.connections_per_server = kConnections;
    o.command_timeout = std::chrono::milliseconds(10000);
    s = RemoteStore::create(o);
  }
  return *s;
}

struct Data {
  std::vector<std::vector<std::byte>> blocks;
  std::vector<std::span<const std::byte>> in;
  std::vector<std::span<std::byte>> out;
  std::vector<RemotePut> puts;
  std::vector<RemoteGet> gets;
  std::vector<std::uint64_t> hashes;
  Data(std::size_t bytes, std::size_t batch) {
    std::mt19937_64 rng(1);
    blocks.assign(batch, std::vector<std::byte>(bytes));
    for (auto& b : blocks) {
      for (auto& x : b) x = static_cast<std::byte>(rng());
    }
    for (std::size_t i = 0; i < batch; ++i) {
      in.emplace_back(blocks[i]);
      out.emplace_back(blocks[i]);
      hashes.push_back(0xBE00'0000'0000'0000ULL + i);
    }
    for (std::size_t i = 0; i < batch; ++i) {
      puts.push_back({hashes[i], 0, {&in[i], 1}});
      gets.push_back({hashes[i], 0, {&out[i], 1}});
    }
  }
};

bool need_url(benchmark::State& state) {
  if (redis_url() != nullptr) return true;
  state.SkipWithError(
      "set KVBM_REDIS_URL (benchmarks/remote_vs_redis.sh starts a server and does)");
  return false;
}

void BM_RemoteStore_Put(benchmark::State& state) {
  if (!need_url(state)) return;
  const auto kib = static_cast<std::size_t>(state.range(0)),
             batch = static_cast<std::size_t>(state.range(1));
  auto& store = store_for(kib);
  Data d(store.block_bytes(), batch);
  for (auto _ : state) {
    auto st = store.put(d.puts);
    for (auto s : st) {
      if (s != RemoteStatus::kOk) state.SkipWithError(std::string(to_string(s)).c_str());
    }
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * batch * store.block_bytes()));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch));
}

void BM_RemoteStore_Get(benchmark::State& state) {
  if (!need_url(state)) return;
  const auto kib = static_cast<std::size_t>(state.range(0)),
             batch = static_cast<std::size_t>(state.range(1));
  auto& store = store_for(kib);
  Data d(store.block_bytes(), batch);
  (void)store.put(d.puts);
  for (auto _ : state) {
    auto st = store.get(d.gets);
    for (auto s : st) {
      if (s != RemoteStatus::kOk) state.SkipWithError(std::string(to_string(s)).c_str());
    }
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * batch * store.block_bytes()));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch));
}

/// A plain blocking hiredis connection to $KVBM_REDIS_URL.
redisContext* bare_connection() {
  const std::string url = redis_url();
  if (url.starts_with("unix://")) return redisConnectUnix(url.substr(7).c_str());
  const std::string rest = url.substr(8);  // host:port/db
  const auto colon = rest.rfind(':');
  return redisConnect(rest.substr(0, colon).c_str(), std::atoi(rest.c_str() + colon + 1));
}

/// The baseline: SET or GET of the same values on one connection, pipelined `batch` deep.
void bare(benchmark::State& state, bool set) {
  if (!need_url(state)) return;
  if (std::string_view(redis_url()).starts_with("redis+cluster://")) {
    state.SkipWithError(
        "the bare client speaks to one server; redis-benchmark --cluster is the "
        "baseline on a cluster");
    return;
  }
  const auto kib = static_cast<std::size_t>(state.range(0)),
             batch = static_cast<std::size_t>(state.range(1));
  const std::size_t bytes = kib * 1024;
  std::unique_ptr<redisContext, void (*)(redisContext*)> c(bare_connection(), redisFree);
  Data d(bytes, batch);
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < batch; ++i)
    keys.push_back("bare:" + std::to_string(kib) + ":" + std::to_string(i));
  auto round = [&](bool do_set) {
    for (std::size_t i = 0; i < batch; ++i) {
      if (do_set) {
        const char* argv[3] = {"SET", keys[i].data(),
                               reinterpret_cast<const char*>(d.blocks[i].data())};
        const std::size_t lens[3] = {3, keys[i].size(), bytes};
        redisAppendCommandArgv(c.get(), 3, argv, lens);
      } else {
        const char* argv[2] = {"GET", keys[i].data()};
        const std::size_t lens[2] = {3, keys[i].size()};
        redisAppendCommandArgv(c.get(), 2, argv, lens);
      }
    }
    for (std::size_t i = 0; i < batch; ++i) {
      void* r = nullptr;
      if (redisGetReply(c.get(), &r) != REDIS_OK) {
        state.SkipWithError("hiredis error");
        return;
      }
      freeReplyObject(r);
    }
  };
  round(true);
  for (auto _ : state) round(set);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * batch * bytes));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch));
}
void BM_Hiredis_SetPipelined(benchmark::State& state) { bare(state, true); }
void BM_Hiredis_GetPipelined(benchmark::State& state) { bare(state, false); }

void sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"kib", "batch"});
  for (std::int64_t kib : {64, 1024, 2048}) b->Args({kib, 32});
  b->UseRealTime();
}

}  // namespace

BENCHMARK(BM_RemoteStore_Put)->Apply(sizes);
BENCHMARK(BM_RemoteStore_Get)->Apply(sizes);
BENCHMARK(BM_Hiredis_SetPipelined)->Apply(sizes);
BENCHMARK(BM_Hiredis_GetPipelined)->Apply(sizes);
BENCHMARK_MAIN();
