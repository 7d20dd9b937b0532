// How RemoteStore::put's requests reach the socket, against a real redis-server: every
// sendmsg(2) goes through the syscall table of the store's Env (kvbm/env.h) and is recorded here
// on its way to the real call.
// Small values (64 KiB) go out several to a call, as a pipelining client sends them (one call per
// value made the server spend 1.6-2x the CPU per byte: docs/benchmarks.md); a large value
// (1 MiB) still goes out as soon as its own header is filled, while the next header is computed.

#include <sys/socket.h>
#include <sys/uio.h>

#include <map>
#include <mutex>

#include <gtest/gtest.h>

#include "kvbm/env.h"
#include "kvbm/io/syscalls.h"
#include "kvbm/remote/remote_store.h"
#include "remote/redis_server.h"
#include "remote/remote_test_util.h"

namespace kvbm {
namespace remote_store_send_test {

using test::RedisServer;
using namespace test;  // NOLINT(google-build-using-namespace): the shared test helpers

/// The bytes each sendmsg was offered, per socket, in call order.
struct SendLog {
  std::mutex mu;
  std::map<int, std::vector<std::size_t>> offers;
};
SendLog& send_log() {
  static SendLog log;
  return log;
}

std::int64_t recording_sendmsg(int fd, const msghdr* msg, int flags) {
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < msg->msg_iovlen; ++i) bytes += msg->msg_iov[i].iov_len;
  {
    std::lock_guard lock(send_log().mu);
    send_log().offers[fd].push_back(bytes);
  }
  return io::real_syscalls().sendmsg(fd, msg, flags);
}

/// A namespace whose blocks are `kib` KiB: 1 layer x K,V x 16 tokens x inner x 2 bytes.
RemoteNamespace namespace_of(std::size_t kib) {
  RemoteNamespace ns = test_namespace();
  ns.layout = LayoutConfig{.num_layers = 1,
                           .outer_dim = 2,
                           .page_size = 16,
                           .inner_dim = static_cast<std::uint32_t>(kib * 1024 / 64),
                           .dtype_bytes = 2};
  return ns;
}

/// Puts `n` blocks of `kib` KiB over one connection, reads them back byte for byte, and returns
/// the first offer to each socket the put wrote to.
std::vector<std::size_t> first_offers_of_put(std::size_t kib, std::size_t n) {
  RedisServer server;
  io::SyscallTable table = io::real_syscalls();
  table.sendmsg = recording_sendmsg;  // outlives the store; only this store's Env uses it
  {
    std::lock_guard lock(send_log().mu);
    send_log().offers.clear();
  }
  auto o = options_for({server.url()}, namespace_of(kib));
  o.connections_per_server = 1;
  o.command_timeout = std::chrono::seconds(10);
  o.env = std::make_shared<Env>(nullptr, &table);
  auto store = RemoteStore::create(o);
  Blocks blocks(1, n, store->block_bytes());
  EXPECT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), n);
  std::vector<std::size_t> first;
  {
    std::lock_guard lock(send_log().mu);
    for (const auto& [fd, offers] : send_log().offers) first.push_back(offers.front());
  }
  Destinations dst(blocks.hashes, store->block_bytes());
  const auto got = store->get(dst.gets);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(got[i], RemoteStatus::kOk) << i;
    EXPECT_EQ(dst.data[i], blocks.data[i]) << "block " << i << " differs";
  }
  return first;
}

TEST(RemoteStoreSendTest, SmallValuesGoOutSeveralToACall) {
  KVBM_NEED_REDIS();
  const auto first = first_offers_of_put(64, 16);  // about 1 MiB of SETs
  ASSERT_FALSE(first.empty());
  for (std::size_t bytes : first) {
    EXPECT_GE(bytes, std::size_t{512} * 1024)
        << "the first sendmsg of a put of 16 values of 64 KiB offered " << bytes
        << " bytes: the values go out one to a call";
  }
}

TEST(RemoteStoreSendTest, LargeValueGoesOutOnceItsOwnHeaderIsFilled) {
  KVBM_NEED_REDIS();
  const auto first = first_offers_of_put(1024, 4);
  ASSERT_FALSE(first.empty());
  for (std::size_t bytes : first) {
    EXPECT_GE(bytes, std::size_t{1} << 20);
    EXPECT_LT(bytes, std::size_t{2} << 20)
        << "the first 1 MiB value waited for the next value's header (its checksum) before it "
           "went out";
  }
}

}  // namespace remote_store_send_test
}  // namespace kvbm
