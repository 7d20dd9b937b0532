// kvbm-replay (the built program, run as a child) with two instances sharing a G4 that
// refuses them, on a real redis-server started by the test on a loopback port: a wrong
// password, an ACL user whose key pattern leaves out kvbm's keys, an ACL user without SET.
// Each run exits 3 with a message naming the server (its URL without the password), the
// user, the server's reply and what to fix, instead of a table that looks like a cold
// cache; --json reports the tier's state. The same runs with the right credentials exit 0.

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "remote/redis_server.h"
#include "replay_test_util.h"

namespace kvbm::replay {
namespace remote_refused_test {

using kvbm::test::RedisServer;
using test::ScratchDir;

#define KVBM_NEED_REDIS() \
  if (!RedisServer::installed()) KVBM_SKIP_OR_FAIL(RedisServer::kSkipMessage)

constexpr const char* kAdmin = "admin-Pa55";
constexpr const char* kSecret = "kvbm-Pa55";  // must appear in no output

struct ReplayRun {
  int status = -1;  ///< exit status (-1: did not exit)
  std::string out, err;
};

// 24 requests sharing a 3-block prefix, each with a block of its own, through 2 instances.
ReplayRun replay_with(const std::string& url) {
  ScratchDir dir("kvbm-replay-refused");
  const std::string trace = (dir.path() / "trace.jsonl").string();
  {
    std::ofstream t(trace);
    for (int i = 0; i < 24; ++i) {
      t << R"({"timestamp": )" << i << R"(, "input_length": 16, "output_length": 1, )"
        << R"("hash_ids": [1, 2, 3, )" << 100 + i << "]}\n";
    }
  }
  const std::string err = (dir.path() / "stderr").string();
  const std::string cmd = std::string(KVBM_REPLAY_BINARY) + " --trace '" + trace +
                          "' --block-tokens 4 --instances 2 --g1-g2 write_through"
                          " --device-blocks 8 --host-blocks 16 --disk-blocks 0 --json --quiet"
                          " --remote '" +
                          url + "' 2>'" + err + "'";
  ReplayRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    ADD_FAILURE() << "cannot run " << cmd;
    return r;
  }
  char buf[4096];
  for (std::size_t got = 0; (got = std::fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, got);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err);
  r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  return r;
}

// Options of a server whose default user has a password.
RedisServer::Options admin_options() {
  return {.extra_args = {"--requirepass", kAdmin}, .password = kAdmin};
}

// Adds the ACL user `kvbm` (password kSecret) with `rules`.
void add_kvbm_user(RedisServer& s, const std::vector<std::string>& rules) {
  std::vector<std::string> args = {"ACL",           "SETUSER", "kvbm",
                                   "reset",         "on",      std::string(">") + kSecret,
                                   "resetchannels", "-@all"};
  args.insert(args.end(), rules.begin(), rules.end());
  ASSERT_EQ(s.command(args), "OK");
}

std::string host_of(const RedisServer& s) { return "127.0.0.1:" + std::to_string(s.port()); }

// The run failed loudly: exit 3, the message names `server`, `user`, `reply` and `fix`.
void expect_refused(const ReplayRun& r, const std::string& server, const std::string& user,
                    const std::string& reply, const std::string& fix) {
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_NE(r.err.find("G4 refused access: server " + server), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(user '" + user + "')"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(reply), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("To fix: " + fix), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("FAILED: G4 refused access"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(kSecret), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find(kSecret), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const auto& g4 = j["result"]["hits"]["G4"];
  EXPECT_EQ(g4["state"], "refused") << g4.dump();
  EXPECT_GT(g4["refused_blocks"].get<std::uint64_t>(), 0u) << g4.dump();
  EXPECT_EQ(g4["refused_user"], user);
  EXPECT_EQ(j["result"]["audit"], "") << "a pool does not balance";
}

// The same replay with working credentials: exit 0, G4 ok and hit.
void expect_served(const ReplayRun& r) {
  EXPECT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["result"]["hits"]["G4"]["state"], "ok");
  EXPECT_GT(j["result"]["hits"]["G4"]["blocks"].get<std::uint64_t>(), 0u) << "no G4 hit";
}

TEST(ReplayRemoteRefused, AWrongPasswordExitsNonZeroNamingTheServerAndTheFix) {
  KVBM_NEED_REDIS();
  RedisServer server(admin_options());
  const ReplayRun bad =
      replay_with("redis://:" + std::string(kSecret) + "@" + host_of(server) + "/0");
  expect_refused(bad, "redis://" + host_of(server) + "/0", "default", "WRONGPASS",
                 "the password or user is wrong");
  expect_served(replay_with("redis://:" + std::string(kAdmin) + "@" + host_of(server) + "/0"));
}

TEST(ReplayRemoteRefused, AKeyPatternWithoutKvbmsKeysExitsNonZeroNamingTheKey) {
  KVBM_NEED_REDIS();
  RedisServer server(admin_options());
  add_kvbm_user(server, {"~other:*", "+get", "+set", "+exists"});
  const std::string url = "redis://kvbm:" + std::string(kSecret) + "@" + host_of(server) + "/0";
  const ReplayRun bad = replay_with(url);
  expect_refused(bad, "redis://kvbm@" + host_of(server) + "/0", "kvbm", "NOPERM",
                 "user 'kvbm' may not run that command or touch that key");
  EXPECT_NE(bad.err.find(" kvbm:"), std::string::npos) << "the key is not named: " << bad.err;
  ASSERT_EQ(server.command({"ACL", "SETUSER", "kvbm", "~kvbm:*"}), "OK");
  expect_served(replay_with(url));
}

TEST(ReplayRemoteRefused, AUserWithoutSetExitsNonZeroNamingTheCommand) {
  KVBM_NEED_REDIS();
  RedisServer server(admin_options());
  add_kvbm_user(server, {"~kvbm:*", "+get", "+exists"});
  const std::string url = "redis://kvbm:" + std::string(kSecret) + "@" + host_of(server) + "/0";
  const ReplayRun bad = replay_with(url);
  expect_refused(bad, "redis://kvbm@" + host_of(server) + "/0", "kvbm", "'set' command",
                 "user 'kvbm' may not run that command");
  ASSERT_EQ(server.command({"ACL", "SETUSER", "kvbm", "+set"}), "OK");
  expect_served(replay_with(url));
}

}  // namespace remote_refused_test
}  // namespace kvbm::replay
