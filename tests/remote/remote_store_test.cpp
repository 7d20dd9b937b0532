// Tests of kvbm/remote/remote_store.h against real redis-server processes.

#include "kvbm/remote/remote_store.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "kvbm/error.h"
#include "kvbm/logging.h"
#include "remote/redis_server.h"
#include "remote/remote_test_util.h"

namespace kvbm {
namespace remote_store_test {

using test::RedisServer;
using namespace test;  // NOLINT(google-build-using-namespace): the shared test helpers
using namespace std::chrono_literals;

// A failed remote call reports its status as an ErrorKind; a hit or a miss is no failure.
TEST(RemoteStatus, MapsOntoErrorKinds) {
  EXPECT_EQ(error_kind_of(RemoteStatus::kOk), std::nullopt);
  EXPECT_EQ(error_kind_of(RemoteStatus::kNotFound), std::nullopt);
  EXPECT_EQ(error_kind_of(RemoteStatus::kCorrupt), ErrorKind::kCorrupt);
  EXPECT_EQ(error_kind_of(RemoteStatus::kUnavailable), ErrorKind::kUnavailable);
  EXPECT_EQ(error_kind_of(RemoteStatus::kConnectionLost), ErrorKind::kUnavailable);
  EXPECT_EQ(error_kind_of(RemoteStatus::kTimeout), ErrorKind::kTimeout);
  EXPECT_EQ(error_kind_of(RemoteStatus::kOutOfMemory), ErrorKind::kNoSpace);
  EXPECT_EQ(error_kind_of(RemoteStatus::kServerError), ErrorKind::kIo);
  EXPECT_EQ(error_kind_of(RemoteStatus::kAccessDenied), ErrorKind::kRefused);
}

TEST(RemoteStoreTest, BadUrlsAndOptionsThrowUsageError) {
  EXPECT_THROW((void)RemoteStore::create(options_for({})), UsageError);
  EXPECT_THROW((void)RemoteStore::create(options_for({"http://x"})), UsageError);
  EXPECT_THROW((void)RemoteStore::create(options_for({"redis://host:notaport/0"})), UsageError);
  EXPECT_THROW((void)RemoteStore::create(options_for({"unix://relative.sock"})), UsageError);
  EXPECT_THROW((void)RemoteStore::create(options_for({"redis://:pw@host:6379/x"})), UsageError);
}

TEST(RemoteStoreTest, RoundTripOfManyBlocksEveryByteCompared) {
  KVBM_NEED_REDIS();
  RedisServer server;
  auto registry = std::make_shared<prometheus::Registry>();
  auto o = options_for({server.url()});
  o.metrics_registry = registry;
  auto store = RemoteStore::create(o);
  const std::size_t n = 300;
  Blocks blocks(1, n, store->block_bytes());
  auto put = store->put(blocks.puts);
  ASSERT_EQ(count(put, RemoteStatus::kOk), n);

  std::vector<std::uint64_t> asked = blocks.hashes;
  for (std::uint64_t i = 0; i < 50; ++i) asked.push_back(0xB000 + i);  // never written
  auto present = store->exists(asked);
  for (std::size_t i = 0; i < asked.size(); ++i) EXPECT_EQ(present[i], i < n) << i;

  Destinations dst(asked, store->block_bytes());
  auto got = store->get(dst.gets);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], RemoteStatus::kOk) << i;
    ASSERT_EQ(dst.data[i], blocks.data[i]) << "block " << i << " differs";
  }
  for (std::size_t i = n; i < asked.size(); ++i) {
    EXPECT_EQ(got[i], RemoteStatus::kNotFound);
    EXPECT_EQ(dst.data[i], std::vector<std::byte>(store->block_bytes(), std::byte{0xEE}))
        << "a miss was written";
  }
  const auto s = store->stats();
  EXPECT_EQ(s.hits, n);
  EXPECT_EQ(s.misses, 50u);
  EXPECT_EQ(s.puts, n);
  EXPECT_EQ(s.read_bytes, n * store->block_bytes());
  EXPECT_EQ(s.written_bytes, n * store->block_bytes());
  EXPECT_EQ(server.command({"DBSIZE"}), std::to_string(n));
  EXPECT_EQ(metric(*registry, "kvbm_remote_hits_total", {{"pool", "G4"}}), static_cast<double>(n));
  EXPECT_EQ(metric(*registry, "kvbm_remote_misses_total"), 50.0);
  EXPECT_EQ(metric(*registry, "kvbm_remote_puts_total"), static_cast<double>(n));
  EXPECT_EQ(metric(*registry, "kvbm_remote_read_bytes_total"),
            static_cast<double>(n * store->block_bytes()));
  EXPECT_EQ(metric(*registry, "kvbm_remote_written_bytes_total"),
            static_cast<double>(n * store->block_bytes()));
  EXPECT_EQ(metric(*registry, "kvbm_remote_servers_available"), 1.0);
}

TEST(RemoteStoreTest, UnixSocketRoundTripAndScatteredDestination) {
  KVBM_NEED_REDIS();
  RedisServer server({.unix_socket = true});
  auto store = RemoteStore::create(options_for({server.url()}));
  Blocks blocks(100, 20, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 20u);
  // Read each block into two halves of different buffers.
  const std::size_t half = store->block_bytes() / 2;
  std::vector<std::vector<std::byte>> a(20, std::vector<std::byte>(half)),
      b(20, std::vector<std::byte>(half));
  std::vector<std::array<std::span<std::byte>, 2>> regions;
  for (std::size_t i = 0; i < 20; ++i)
    regions.push_back({std::span<std::byte>(a[i]), std::span<std::byte>(b[i])});
  std::vector<RemoteGet> gets;
  for (std::size_t i = 0; i < 20; ++i) gets.push_back({blocks.hashes[i], 0, regions[i]});
  auto got = store->get(gets);
  for (std::size_t i = 0; i < 20; ++i) {
    ASSERT_EQ(got[i], RemoteStatus::kOk);
    EXPECT_EQ(0, std::memcmp(a[i].data(), blocks.data[i].data(), half));
    EXPECT_EQ(0, std::memcmp(b[i].data(), blocks.data[i].data() + half, half));
  }
}

TEST(RemoteStoreTest, AnotherNamespaceOrLayoutNeverSeesTheBlocks) {
  KVBM_NEED_REDIS();
  RedisServer server;
  auto store = RemoteStore::create(options_for({server.url()}));
  Blocks blocks(1, 10, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 10u);

  auto other_ns = RemoteStore::create(options_for({server.url()}, test_namespace("tenant-b")));
  auto ns_dtype = test_namespace();
  ns_dtype.dtype = "fp16";  // same bytes per element, another type
  auto other_dtype = RemoteStore::create(options_for({server.url()}, ns_dtype));
  for (auto* other : {other_ns.get(), other_dtype.get()}) {
    EXPECT_NE(other->fingerprint(), store->fingerprint());
    for (bool p : other->exists(blocks.hashes)) EXPECT_FALSE(p);
    Destinations dst(blocks.hashes, other->block_bytes());
    EXPECT_EQ(count(other->get(dst.gets), RemoteStatus::kNotFound), 10u);
  }
  // A value of our namespace planted under the other namespace's key: refused by the header.
  const std::string value = server.command({"GET", store->key_of(blocks.hashes[0])});
  ASSERT_EQ(value.size(), kRemoteHeaderBytes + store->block_bytes());
  ASSERT_EQ(server.command({"SET", other_ns->key_of(blocks.hashes[0]), value}), "OK");
  Destinations dst(blocks.hashes, other_ns->block_bytes());
  auto got = other_ns->get(std::span(dst.gets).first(1));
  EXPECT_EQ(got[0], RemoteStatus::kCorrupt);
  EXPECT_EQ(other_ns->stats().count(RemoteStatus::kCorrupt), 1u);
  // A value planted under another hash's key: refused too.
  ASSERT_EQ(server.command({"SET", store->key_of(blocks.hashes[1]), value}), "OK");
  EXPECT_EQ(store->get(std::span(dst.gets).subspan(1, 1))[0], RemoteStatus::kCorrupt);
}

TEST(RemoteStoreTest, CorruptedValueIsACountedMissAndTheDestinationIsUntouched) {
  KVBM_NEED_REDIS();
  RedisServer server;
  auto registry = std::make_shared<prometheus::Registry>();
  auto o = options_for({server.url()});
  o.metrics_registry = registry;
  auto store = RemoteStore::create(o);
  Blocks blocks(1, 8, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 8u);
  // One payload byte, one header byte, and a truncated value.
  ASSERT_EQ(server.command({"SETRANGE", store->key_of(blocks.hashes[2]), "5000", "X"}),
            std::to_string(kRemoteHeaderBytes + store->block_bytes()));
  server.command({"SETRANGE", store->key_of(blocks.hashes[4]), "20", "X"});
  server.command({"SET", store->key_of(blocks.hashes[6]), "short"});
  Destinations dst(blocks.hashes, store->block_bytes());
  auto got = store->get(dst.gets);
  for (std::size_t i = 0; i < 8; ++i) {
    if (i == 2 || i == 4 || i == 6) {
      EXPECT_EQ(got[i], RemoteStatus::kCorrupt) << i;
      EXPECT_EQ(dst.data[i], std::vector<std::byte>(store->block_bytes(), std::byte{0xEE}));
    } else {
      EXPECT_EQ(got[i], RemoteStatus::kOk) << i;
      EXPECT_EQ(dst.data[i], blocks.data[i]);
    }
  }
  const auto s = store->stats();
  EXPECT_EQ(s.hits, 5u);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.count(RemoteStatus::kCorrupt), 3u);
  EXPECT_EQ(metric(*registry, "kvbm_remote_errors_total", {{"kind", "corrupt"}}), 3.0);
  EXPECT_EQ(metric(*registry, "kvbm_remote_hits_total"), 5.0);
}

TEST(RemoteStoreTest, PrefixHashIsExtraIdentity) {
  KVBM_NEED_REDIS();
  RedisServer server;
  auto store = RemoteStore::create(options_for({server.url()}));
  Blocks blocks(1, 2, store->block_bytes());
  blocks.puts[0].prefix_hash = 0x1111;
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 2u);
  Destinations dst(blocks.hashes, store->block_bytes());
  dst.gets[0].prefix_hash = 0x2222;  // another prefix with the same sequence hash
  dst.gets[1].prefix_hash = 0x3333;  // the value carries none
  auto got = store->get(dst.gets);
  EXPECT_EQ(got[0], RemoteStatus::kCorrupt);
  EXPECT_EQ(got[1], RemoteStatus::kCorrupt);
  dst.gets[0].prefix_hash = 0x1111;
  dst.gets[1].prefix_hash = 0;  // not checked
  got = store->get(dst.gets);
  EXPECT_EQ(got[0], RemoteStatus::kOk);
  EXPECT_EQ(got[1], RemoteStatus::kOk);
}

TEST(RemoteStoreTest, TwoServersSpreadKeysAndASecondClientFindsEach) {
  KVBM_NEED_REDIS();
  RedisServer a, b;
  const std::vector<std::string> urls = {a.url(), b.url()};
  auto store = RemoteStore::create(options_for(urls));
  const std::size_t n = 400;
  Blocks blocks(1, n, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), n);
  const auto on_a = std::stoul(a.command({"DBSIZE"}));
  const auto on_b = std::stoul(b.command({"DBSIZE"}));
  EXPECT_EQ(on_a + on_b, n);
  EXPECT_GT(on_a, n / 4);
  EXPECT_GT(on_b, n / 4);
  RedisServer* servers[2] = {&a, &b};
  auto second = RemoteStore::create(options_for(urls));
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t s = second->server_of(blocks.hashes[i]);
    ASSERT_EQ(s, store->server_of(blocks.hashes[i]));
    ASSERT_EQ(servers[s]->command({"EXISTS", second->key_of(blocks.hashes[i])}), "1") << i;
  }
  Destinations dst(blocks.hashes, second->block_bytes());
  auto got = second->get(dst.gets);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], RemoteStatus::kOk);
    ASSERT_EQ(dst.data[i], blocks.data[i]);
  }
}

TEST(RemoteStoreTest, JumpHashIsStableAndMovesFewKeys) {
  std::size_t moved = 0;
  for (std::uint64_t k = 0; k < 10000; ++k) {
    const auto h = k * 0x9E3779B97F4A7C15ULL;
    ASSERT_LT(jump_consistent_hash(h, 3), 3u);
    ASSERT_EQ(jump_consistent_hash(h, 1), 0u);
    const auto before = jump_consistent_hash(h, 3), after = jump_consistent_hash(h, 4);
    if (before != after) {
      ++moved;
      ASSERT_EQ(after, 3u);  // a key only ever moves to the new server
    }
  }
  EXPECT_NEAR(static_cast<double>(moved) / 10000, 0.25, 0.03);
}

TEST(RemoteStoreTest, KilledServerGivesMissesWithinTheTimeoutThenRecoversAfterRestart) {
  KVBM_NEED_REDIS();
  RedisServer server;
  std::ostringstream log_text;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text);
  set_logger(std::make_shared<spdlog::logger>("kvbm", sink));
  auto registry = std::make_shared<prometheus::Registry>();
  auto o = options_for({server.url()});
  o.metrics_registry = registry;
  auto store = RemoteStore::create(o);
  Blocks blocks(1, 64, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 64u);

  server.kill();
  Destinations dst(blocks.hashes, store->block_bytes());
  for (int round = 0; round < 5; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    auto got = store->get(dst.gets);
    auto put = store->put(blocks.puts);
    auto present = store->exists(blocks.hashes);
    const auto elapsed = std::chrono::steady_clock::now() - t0;
    EXPECT_LT(elapsed, 3 * (o.command_timeout + 100ms))
        << "three calls must each end within the timeout";
    EXPECT_EQ(count(got, RemoteStatus::kOk), 0u);
    EXPECT_EQ(count(put, RemoteStatus::kOk), 0u);
    for (bool p : present) EXPECT_FALSE(p);
  }
  EXPECT_FALSE(store->server_available(0));
  const auto s = store->stats();
  EXPECT_GT(s.count(RemoteStatus::kUnavailable) + s.count(RemoteStatus::kConnectionLost), 0u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_GT(metric(*registry, "kvbm_remote_errors_total", {{"kind", "unavailable"}}) +
                metric(*registry, "kvbm_remote_errors_total", {{"kind", "connection_lost"}}),
            0.0);
  EXPECT_EQ(metric(*registry, "kvbm_remote_servers_available"), 0.0);
  EXPECT_EQ(dst.data[0], std::vector<std::byte>(store->block_bytes(), std::byte{0xEE}));
  // One line for the change of state, not one per block or per call.
  sink->flush();
  const std::string text = log_text.str();
  std::size_t lines = 0;
  for (std::size_t p = text.find("failed ("); p != std::string::npos;
       p = text.find("failed (", p + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << text;

  server.start();  // same port, empty
  std::vector<RemoteStatus> put;
  const auto until = std::chrono::steady_clock::now() + 5s;
  do {
    put = store->put(blocks.puts);  // fails fast while in backoff, then reconnects
  } while (count(put, RemoteStatus::kOk) != 64 && std::chrono::steady_clock::now() < until);
  ASSERT_EQ(count(put, RemoteStatus::kOk), 64u);
  EXPECT_TRUE(store->server_available(0));
  auto got = store->get(dst.gets);
  for (std::size_t i = 0; i < 64; ++i) {
    ASSERT_EQ(got[i], RemoteStatus::kOk);
    ASSERT_EQ(dst.data[i], blocks.data[i]);
  }
  sink->flush();
  EXPECT_NE(log_text.str().find("answers again"), std::string::npos);
  EXPECT_EQ(metric(*registry, "kvbm_remote_servers_available"), 1.0);
  set_logger(nullptr);
}

TEST(RemoteStoreTest, ServerKilledDuringCallsFailsOnlyThoseBlocksWithinTheTimeout) {
  KVBM_NEED_REDIS();
  RedisServer server;
  auto o = options_for({server.url()});
  auto store = RemoteStore::create(o);
  Blocks blocks(1, 400, store->block_bytes());  // 3.2 MB per call: a kill lands inside some
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 400u);
  std::atomic<bool> stop{false};
  std::atomic<int> wrong_bytes{0}, slow_calls{0}, calls{0};
  std::thread reader([&] {
    Destinations dst(blocks.hashes, store->block_bytes());
    while (!stop) {
      const auto t0 = std::chrono::steady_clock::now();
      auto got = store->get(dst.gets);
      if (std::chrono::steady_clock::now() - t0 > o.command_timeout + 200ms) ++slow_calls;
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (got[i] == RemoteStatus::kOk && dst.data[i] != blocks.data[i]) ++wrong_bytes;
      }
      ++calls;
    }
  });
  while (calls < 3) std::this_thread::yield();
  server.kill();
  const int at_kill = calls;
  while (calls < at_kill + 5) std::this_thread::yield();
  stop = true;
  reader.join();
  EXPECT_EQ(wrong_bytes.load(), 0);
  EXPECT_EQ(slow_calls.load(), 0);
  EXPECT_FALSE(store->server_available(0));
  const auto s = store->stats();
  EXPECT_GT(s.count(RemoteStatus::kConnectionLost) + s.count(RemoteStatus::kUnavailable), 0u);
}

TEST(RemoteStoreTest, FrozenServerTimesOutWithinTheDeadlineThenRecovers) {
  KVBM_NEED_REDIS();
  RedisServer server;
  auto o = options_for({server.url()});
  o.backoff_initial = 2s;  // long enough that the second call below surely lands in it
  o.backoff_max = 2s;
  auto store = RemoteStore::create(o);
  Blocks blocks(1, 32, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 32u);
  server.pause();  // connected, silent: only the deadline ends the wait
  Destinations dst(blocks.hashes, store->block_bytes());
  const auto t0 = std::chrono::steady_clock::now();
  auto got = store->get(dst.gets);
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(elapsed, o.command_timeout - 10ms);
  EXPECT_LT(elapsed, o.command_timeout + 250ms);
  EXPECT_EQ(count(got, RemoteStatus::kTimeout), 32u);
  EXPECT_EQ(store->stats().count(RemoteStatus::kTimeout), 32u);
  // In backoff now: the next call fails at once instead of waiting again.
  const auto t1 = std::chrono::steady_clock::now();
  auto again = store->get(dst.gets);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, o.command_timeout / 2);
  EXPECT_EQ(count(again, RemoteStatus::kOk), 0u);
  server.resume();
  const auto until = std::chrono::steady_clock::now() + 8s;
  do {
    got = store->get(dst.gets);
  } while (count(got, RemoteStatus::kOk) != 32 && std::chrono::steady_clock::now() < until);
  for (std::size_t i = 0; i < 32; ++i) {
    ASSERT_EQ(got[i], RemoteStatus::kOk);
    ASSERT_EQ(dst.data[i], blocks.data[i]);
  }
}

TEST(RemoteStoreTest, ManyThreadsWriteAndReadOverlappingPrefixes) {
  KVBM_NEED_REDIS();
  RedisServer a, b;
  auto store = RemoteStore::create(options_for({a.url(), b.url()}));
  constexpr int kThreads = 4;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread writes blocks [t*20, t*20+60): neighbours overlap by 40 blocks, same bytes.
      for (int round = 0; round < 5; ++round) {
        Blocks blocks(static_cast<std::uint64_t>(t) * 20, 60, store->block_bytes());
        if (count(store->put(blocks.puts), RemoteStatus::kOk) != 60) ++bad;
        Destinations dst(blocks.hashes, store->block_bytes());
        auto got = store->get(dst.gets);
        for (std::size_t i = 0; i < 60; ++i) {
          if (got[i] != RemoteStatus::kOk || dst.data[i] != blocks.data[i]) ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(store->stats().hits, 4u * 5 * 60);
}

TEST(RemoteStoreTest, RestartedServerIsReconnectedInsideTheCall) {
  KVBM_NEED_REDIS();
  RedisServer server;
  auto store = RemoteStore::create(options_for({server.url()}));
  Blocks blocks(1, 16, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 16u);
  server.stop();
  server.start();  // the store's connections are now stale
  EXPECT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 16u);
}

TEST(RemoteStoreTest, FullServerWithNoevictionReportsOutOfMemory) {
  KVBM_NEED_REDIS();
  RedisServer server({.extra_args = {"--maxmemory", "3mb", "--maxmemory-policy", "noeviction"}});
  auto store = RemoteStore::create(options_for({server.url()}));
  std::size_t oom = 0, ok = 0;
  for (std::uint64_t batch = 0; batch < 20; ++batch) {
    Blocks blocks(batch * 100, 100, store->block_bytes());
    auto put = store->put(blocks.puts);
    oom += count(put, RemoteStatus::kOutOfMemory);
    ok += count(put, RemoteStatus::kOk);
  }
  EXPECT_GT(oom, 0u);
  EXPECT_EQ(store->stats().count(RemoteStatus::kOutOfMemory), oom);
  EXPECT_EQ(store->stats().failed_puts, oom);
  EXPECT_TRUE(store->server_available(0));  // full is not down
  // What was stored still reads back.
  Blocks first(0, 100, store->block_bytes());
  Destinations dst(first.hashes, store->block_bytes());
  auto got = store->get(dst.gets);
  for (std::size_t i = 0; i < 100; ++i) {
    if (got[i] == RemoteStatus::kOk) {
      EXPECT_EQ(dst.data[i], first.data[i]);
    }
  }
}

TEST(RemoteStoreTest, FullServerWithAllkeysLruEvictsOldBlocks) {
  KVBM_NEED_REDIS();
  RedisServer server({.extra_args = {"--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"}});
  auto store = RemoteStore::create(options_for({server.url()}));
  const std::size_t batches = 20, per = 100;  // 16 MB into 4 MB
  for (std::uint64_t batch = 0; batch < batches; ++batch) {
    Blocks blocks(batch * per, per, store->block_bytes());
    ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), per);
  }
  Blocks first(0, per, store->block_bytes());
  Destinations dst(first.hashes, store->block_bytes());
  auto got = store->get(dst.gets);
  EXPECT_GT(count(got, RemoteStatus::kNotFound), per / 2)
      << "the oldest blocks should have been evicted";
  for (std::size_t i = 0; i < per; ++i) {
    if (got[i] == RemoteStatus::kOk) {
      EXPECT_EQ(dst.data[i], first.data[i]);
    }
  }
}

TEST(RemoteStoreTest, AnotherProcessReadsWhatOneProcessWrote) {
  KVBM_NEED_REDIS();
  RedisServer server;
  const std::size_t n = 128;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // process A: its own client, writes and exits
    int rc = 1;
    try {
      auto a = RemoteStore::create(options_for({server.url()}));
      Blocks blocks(1, n, a->block_bytes(), 4, /*seed=*/42);
      rc = count(a->put(blocks.puts), RemoteStatus::kOk) == n ? 0 : 2;
    } catch (...) {
      rc = 3;
    }
    ::_exit(rc);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto b = RemoteStore::create(options_for({server.url()}));  // process B
  Blocks expected(1, n, b->block_bytes(), 4, /*seed=*/42);
  Destinations dst(expected.hashes, b->block_bytes());
  auto got = b->get(dst.gets);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], RemoteStatus::kOk) << i;
    ASSERT_EQ(dst.data[i], expected.data[i]) << i;
  }
}

}  // namespace remote_store_test
}  // namespace kvbm
