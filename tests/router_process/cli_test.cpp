// tests/router_process/cli_test.cpp: the kvbm-router program itself, run as a
// child process: it refuses bad options with exit status 2 and a message,
// prints where it listens (--listen 127.0.0.1:0 takes any free port), routes
// a request over HTTP to the instance a real kvbm publisher says holds its
// prefix, and exits 0 on SIGTERM.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/config.h"
#include "router_child.h"
#include "router_process_test_util.h"
#include "zmq_tsan.h"  // libzmq is not instrumented for TSan

namespace kvbm::router_process {
namespace cli_test {

using nlohmann::json;
using test::Child;

TEST(RouterProcessCli, BadOptionsExit2WithAMessage) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bogus", "1"}, "unknown option '--bogus'"},
      {{"--policy", "best"}, "--policy: 'best' is not kv, round_robin or random"},
      {{"--instance", "engine-0"}, "is not NAME=ENDPOINT"},
      {{"--instance", "e=tcp://127.0.0.1:1;replica=x"}, "neither replay=ENDPOINT nor topic"},
      {{"--tier-cost", "G5=1"}, "TIER one of G1, G2, G3, G4"},
      {{"--listen", "8000"}, "is not HOST:PORT"},
      {{"--block-size", "0"}, "at least 1 token"},
      {{"--load-weight"}, "a value is missing"},
      {{"--max-body-bytes", "1"}, "--max-body-bytes: at least 2"},
      {{"--max-json-depth", "1"}, "--max-json-depth: 2..10000"},
      {{"--max-json-depth", "10001"}, "--max-json-depth: 2..10000"},
      {{"--model-groups", "no-such-model"}, "unknown preset 'no-such-model'; known: gpt-oss-20b"},
      {{"--model-groups", "gpt-oss-20b", "--block-size", "32"},
       "are hashed in blocks of 16 tokens"},
      {{"--model-groups", "gpt-oss-20b", "--model-groups", "gemma3-27b"}, "given already"},
      {{"--model-groups-file", "/nonexistent/groups.json"}, "--model-groups-file: "},
  };
  for (const auto& [args, says] : cases) {
    Child c(args);
    EXPECT_EQ(c.wait_exit(), 2) << args[0];
    EXPECT_NE(c.err().find(says), std::string::npos) << says;
  }
  Child help({"--help"});
  EXPECT_NE(help.line().find("kvbm-router"), std::string::npos);
  EXPECT_EQ(help.wait_exit(), 0);
}

#if KVBM_HAVE_ZMQ

TEST(RouterProcessCli, ServesRoutesAndStopsOnSigterm) {
  test::KvbmPublisher a("engine-a");
  test::KvbmPublisher b("engine-b");
  b.store({11, 12, 13});  // published before the router starts: it asks for a replay
  Child c({"--listen", "127.0.0.1:0", "--instance", a.spec(), "--instance", b.spec(),
           "--block-size", "16", "--tier-cost", "G2=0.1", "--load-weight", "0.5"});
  const std::string url = test::listening_url(c);
  ASSERT_NE(url, "");

  test::HttpClient http;
  json d;
  ASSERT_TRUE(test::poll_until([&] {  // until the replay has reached the index
    d = json::parse(http.post(url + "/route", R"({"hashes": [11, 12, 13], "tokens": 48})").body);
    http.post(url + "/finish", json{{"request_id", d["request_id"]}}.dump());
    return d["overlap"]["prefix_blocks"] == 3;
  }));
  EXPECT_EQ(d["instance"], "engine-b");
  const json h = json::parse(http.get(url + "/health").body);
  EXPECT_EQ(h["policy"], "kv");
  EXPECT_EQ(h["instances"].size(), 2u);
  EXPECT_EQ(h["in_flight"], 0);

  c.signal(SIGTERM);
  EXPECT_EQ(c.wait_exit(), 0);
  EXPECT_NE(c.err().find("stopping"), std::string::npos);
}

TEST(RouterProcessCli, AnInstanceTheFeedRefusesEndsTheProgram) {
  Child c({"--listen", "127.0.0.1:0", "--instance", "x=tcp://no-port"});
  EXPECT_EQ(c.wait_exit(), 1);
  EXPECT_NE(c.err().find("--instance x"), std::string::npos);
}

#endif

}  // namespace cli_test
}  // namespace kvbm::router_process
