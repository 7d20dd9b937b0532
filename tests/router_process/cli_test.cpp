// tests/router_process/cli_test.cpp: the kvbm-router program itself, run as a
// child process: it refuses bad options with exit status 2 and a message,
// prints where it listens (--listen 127.0.0.1:0 takes any free port), routes
// a request over HTTP to the instance a real kvbm publisher says holds its
// prefix, and exits 0 on SIGTERM.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/config.h"
#include "router_process_test_util.h"
#include "zmq_tsan.h"  // libzmq is not instrumented for TSan

namespace kvbm::router_process {
namespace {

using nlohmann::json;

/// A child process running kvbm-router with `args`; its stdout and stderr are pipes.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    int out[2];
    int err[2];
    if (pipe(out) != 0 || pipe(err) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      close(out[0]);
      close(err[0]);
      std::vector<char*> argv;
      std::string bin = KVBM_ROUTER_BINARY;
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    out_ = fdopen(out[0], "r");
    err_ = err[0];
  }
  ~Child() {
    if (pid_ > 0 && status_ < 0) {
      kill(pid_, SIGKILL);
      wait_exit();
    }
    if (out_ != nullptr) fclose(out_);
    close(err_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  /// Returns the next line of its stdout ("" at the end).
  std::string line() {
    char buf[4096];
    return fgets(buf, sizeof buf, out_) != nullptr ? std::string(buf) : std::string();
  }
  /// Returns all of its stderr (after it exited).
  std::string err() {
    std::string s;
    char buf[4096];
    for (ssize_t n; (n = read(err_, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
    return s;
  }
  void signal(int sig) { kill(pid_, sig); }
  /// Waits for it to exit; returns its exit status (-1 when killed by a signal).
  int wait_exit() {
    int st = 0;
    waitpid(pid_, &st, 0);
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 1000;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  int err_ = -1;
  int status_ = -1;
};

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
  const std::string first = c.line();
  const auto at = first.find("http://");
  ASSERT_NE(at, std::string::npos) << first;
  const std::string url = first.substr(at, first.find(' ', at) - at);

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

}  // namespace
}  // namespace kvbm::router_process
