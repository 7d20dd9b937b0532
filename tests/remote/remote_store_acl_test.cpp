// Access control of kvbm/remote/remote_store.h against a real redis-server:
// requirepass, an ACL user limited to kvbm's keys and commands, credentials
// from the URL, a file or an environment variable, and that no credential is
// ever printed (logs, errors, metrics, the URL's masked form).

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "kvbm/env.h"
#include "kvbm/error.h"
#include "kvbm/logging.h"
#include "kvbm/remote/remote_store.h"
#include "remote/redis_server.h"
#include "remote/remote_test_util.h"

namespace kvbm {
namespace remote_store_acl_test {

using test::RedisServer;
using namespace test;  // NOLINT(google-build-using-namespace): the shared test helpers

constexpr const char* kSecret = "s3cr3t-Pa55";  // searched for in every output below
constexpr const char* kAdmin = "admin-Pa55";

/// Captures the kvbm logger's output for the test's life.
struct LogCapture {
  std::ostringstream text;
  LogCapture() {
    set_logger(std::make_shared<spdlog::logger>(
        "kvbm", std::make_shared<spdlog::sinks::ostream_sink_mt>(text)));
  }
  ~LogCapture() { set_logger(nullptr); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  [[nodiscard]] std::string str() const { return text.str(); }
};

/// A server whose default user has the password kAdmin and an ACL user
/// `kvbm` (password kSecret) allowed only kvbm's keys and commands.
RedisServer acl_server() {
  RedisServer::Options o;
  o.extra_args = {"--requirepass", kAdmin};
  o.password = kAdmin;
  return RedisServer(o);
}

void add_kvbm_user(RedisServer& s, const std::string& rules = "+get +set +exists") {
  std::vector<std::string> args = {
      "ACL",     "SETUSER",       "kvbm", "reset", "on", std::string(">") + kSecret,
      "~kvbm:*", "resetchannels", "-@all"};
  std::istringstream r(rules);
  for (std::string rule; r >> rule;) args.push_back(rule);
  ASSERT_EQ(s.command(args), "OK");
}

std::string serialized(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

TEST(RemoteStoreAclTest, UrlUserAndPasswordAreParsedAndNeverShown) {
  EXPECT_EQ(remote_url_error("redis://kvbm:pw@host:6379/0"), "");
  EXPECT_EQ(remote_url_error("redis://kvbm:p%40ss%3Aw@host:6379/0"), "");
  EXPECT_EQ(remote_url_error("redis+cluster://kvbm:pw@a:7000,b:7001"), "");
  EXPECT_EQ(remote_url_error("redis+cluster://a:7000"), "");
  // Errors mask the password whatever the scheme, and keep the user.
  for (const std::string& url : {std::string("redis://kvbm:") + kSecret + "@host:x/0",
                                 std::string("redis+cluster://kvbm:") + kSecret + "@a:7000,b:port",
                                 std::string("redis+cluster://kvbm:") + kSecret + "@a:7000/3",
                                 std::string("http://kvbm:") + kSecret + "@host",
                                 std::string("redis://kvbm:") + kSecret + "%zz@host:6379"}) {
    const std::string why = remote_url_error(url);
    EXPECT_NE(why, "") << "accepted";
    EXPECT_EQ(why.find(kSecret), std::string::npos) << why;
    EXPECT_NE(why.find("kvbm:****@"), std::string::npos) << why;
    try {
      auto o = options_for({url});
      (void)RemoteStore::create(o);
      ADD_FAILURE() << "created";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).find(kSecret), std::string::npos) << e.what();
    }
  }
  // A cluster URL is the only URL.
  EXPECT_THROW((void)RemoteStore::create(options_for({"redis+cluster://a:7000", "redis://b:1"})),
               UsageError);
}

TEST(RemoteStoreAclTest, AUrlJoinsTheGivenOnesUnlessAClusterIsAmongThem) {
  const std::vector<std::string> none, one{"redis://a:1/0"}, cluster{"redis+cluster://a:7000"};
  EXPECT_EQ(remote_url_joins_error(none, "redis+cluster://a:7000"), "");
  EXPECT_EQ(remote_url_joins_error(one, "redis://b:1/0"), "");
  const std::string alone =
      "a redis+cluster:// URL is given once and alone (list more nodes in "
      "it, comma-separated)";
  EXPECT_EQ(remote_url_joins_error(one, "redis+cluster://b:7000"), alone);
  EXPECT_EQ(remote_url_joins_error(cluster, "redis://b:1/0"), alone);
  // A URL that is wrong on its own says so first, its password masked.
  const std::string why =
      remote_url_joins_error(cluster, std::string("redis://kvbm:") + kSecret + "@host:x/0");
  EXPECT_EQ(why, remote_url_error(std::string("redis://kvbm:") + kSecret + "@host:x/0"));
  EXPECT_EQ(why.find(kSecret), std::string::npos) << why;
}

TEST(RemoteStoreAclTest, RequirepassAcceptsThePasswordAndRefusesOthersWithOneError) {
  KVBM_NEED_REDIS();
  RedisServer server({.extra_args = {"--requirepass", kSecret}, .password = kSecret});
  LogCapture log;
  auto registry = std::make_shared<prometheus::Registry>();
  const std::string host = "127.0.0.1:" + std::to_string(server.port());

  auto o = options_for({"redis://:" + std::string(kSecret) + "@" + host + "/0"});
  o.pool_name = "ok";
  o.metrics_registry = registry;
  auto good = RemoteStore::create(o);
  Blocks blocks(1, 20, good->block_bytes());
  ASSERT_EQ(count(good->put(blocks.puts), RemoteStatus::kOk), 20u);
  Destinations dst(blocks.hashes, good->block_bytes());
  ASSERT_EQ(count(good->get(dst.gets), RemoteStatus::kOk), 20u);
  EXPECT_EQ(dst.data, blocks.data);

  // A wrong password: every call is an access denied (at once while in backoff), one error line.
  auto bad_o = options_for({"redis://:wrong-one@" + host + "/0"});
  bad_o.pool_name = "bad";
  bad_o.metrics_registry = registry;
  auto clock = std::make_shared<ManualClock>();
  bad_o.env = std::make_shared<Env>(clock);
  auto bad = RemoteStore::create(bad_o);
  for (int i = 0; i < 5; ++i) {
    Destinations d(blocks.hashes, bad->block_bytes());
    EXPECT_EQ(count(bad->get(d.gets), RemoteStatus::kAccessDenied), 20u);
    EXPECT_EQ(d.data[0], std::vector<std::byte>(bad->block_bytes(), std::byte{0xEE}));
    clock->advance(bad_o.backoff_max);  // past the backoff: a new attempt, no new line
  }
  EXPECT_FALSE(bad->server_available(0));
  // No password at all: the server answers NOAUTH to each command.
  auto none_o = options_for({"redis://" + host + "/0"});
  none_o.pool_name = "none";
  auto none = RemoteStore::create(none_o);
  EXPECT_EQ(count(none->put(blocks.puts), RemoteStatus::kAccessDenied), 20u);
  EXPECT_EQ(count(none->put(blocks.puts), RemoteStatus::kAccessDenied), 20u);

  const std::string text = log.str();
  EXPECT_EQ(text.find(kSecret), std::string::npos) << text;
  std::size_t refused = 0;
  for (auto p = text.find("refused access"); p != std::string::npos;
       p = text.find("refused access", p + 1))
    ++refused;
  EXPECT_EQ(refused, 1u) << text;
  EXPECT_NE(text.find("WRONGPASS"), std::string::npos) << text;
  EXPECT_NE(text.find("denied a command (NOAUTH"), std::string::npos) << text;
  EXPECT_GT(
      metric(*registry, "kvbm_remote_errors_total", {{"pool", "bad"}, {"kind", "access_denied"}}),
      0.0);
  EXPECT_EQ(serialized(*registry).find(kSecret), std::string::npos);
}

TEST(RemoteStoreAclTest, UserLimitedToKvbmKeysAndCommandsIsEnoughAndNoMore) {
  KVBM_NEED_REDIS();
  RedisServer server = acl_server();
  add_kvbm_user(server);
  LogCapture log;
  const std::string host = "127.0.0.1:" + std::to_string(server.port());
  auto store =
      RemoteStore::create(options_for({"redis://kvbm:" + std::string(kSecret) + "@" + host}));
  Blocks blocks(1, 50, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 50u);
  for (bool p : store->exists(blocks.hashes)) EXPECT_TRUE(p);
  Destinations dst(blocks.hashes, store->block_bytes());
  ASSERT_EQ(count(store->get(dst.gets), RemoteStatus::kOk), 50u);
  EXPECT_EQ(dst.data, blocks.data);

  // Keys outside ~kvbm:* are refused: an access denied, logged once, never a crash.
  auto o = options_for({"redis://kvbm:" + std::string(kSecret) + "@" + host});
  o.key_prefix = "other";
  auto other = RemoteStore::create(o);
  EXPECT_EQ(count(other->put(blocks.puts), RemoteStatus::kAccessDenied), 50u);
  Destinations d2(blocks.hashes, other->block_bytes());
  EXPECT_EQ(count(other->get(d2.gets), RemoteStatus::kAccessDenied), 50u);
  EXPECT_TRUE(other->server_available(0));  // the server answers; the user may not

  // A user without SET reads and cannot write.
  add_kvbm_user(server, "+get +exists");
  auto reader =
      RemoteStore::create(options_for({"redis://kvbm:" + std::string(kSecret) + "@" + host}));
  EXPECT_EQ(count(reader->put(blocks.puts), RemoteStatus::kAccessDenied), 50u);
  EXPECT_EQ(count(reader->get(dst.gets), RemoteStatus::kOk), 50u);
  const std::string text = log.str();
  EXPECT_NE(text.find("NOPERM"), std::string::npos) << text;
  EXPECT_EQ(text.find(kSecret), std::string::npos) << text;
}

TEST(RemoteStoreAclTest, PasswordFromAFileOrAnEnvironmentVariable) {
  KVBM_NEED_REDIS();
  RedisServer server = acl_server();
  add_kvbm_user(server);
  const std::string url = "redis://127.0.0.1:" + std::to_string(server.port()) + "/0";
  const std::string file = server.dir() + "/kvbm.password";
  std::ofstream(file) << kSecret << "\n";

  auto from_file = options_for({url});
  from_file.username = "kvbm";
  from_file.password_file = file;
  auto a = RemoteStore::create(from_file);
  Blocks blocks(1, 10, a->block_bytes());
  ASSERT_EQ(count(a->put(blocks.puts), RemoteStatus::kOk), 10u);

  ::setenv("KVBM_TEST_REDIS_PASSWORD", kSecret, 1);
  auto from_env = options_for({"redis://kvbm@127.0.0.1:" + std::to_string(server.port())});
  from_env.password_env = "KVBM_TEST_REDIS_PASSWORD";
  // "redis://kvbm@host" names a password, not a user (redis://password@host): refused.
  EXPECT_THROW((void)RemoteStore::create(from_env), UsageError);
  from_env.urls = {url};
  from_env.username = "kvbm";
  auto b = RemoteStore::create(from_env);
  Destinations dst(blocks.hashes, b->block_bytes());
  ASSERT_EQ(count(b->get(dst.gets), RemoteStatus::kOk), 10u);
  EXPECT_EQ(dst.data, blocks.data);

  // Misconfigurations are UsageErrors at create() that name the source, never the password.
  auto check_refused = [&](RemoteStoreOptions o, const std::string& says) {
    try {
      (void)RemoteStore::create(std::move(o));
      ADD_FAILURE() << "created";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find(kSecret), std::string::npos) << e.what();
    }
  };
  auto missing = from_file;
  missing.password_file = server.dir() + "/absent";
  check_refused(missing, "absent");
  auto unset = from_env;
  unset.password_env = "KVBM_TEST_NO_SUCH_VARIABLE";
  check_refused(unset, "KVBM_TEST_NO_SUCH_VARIABLE");
  auto twice = from_file;
  twice.password_env = "KVBM_TEST_REDIS_PASSWORD";
  check_refused(twice, "more than one place");
  ::unsetenv("KVBM_TEST_REDIS_PASSWORD");
}

}  // namespace remote_store_acl_test
}  // namespace kvbm
