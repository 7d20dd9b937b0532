// tests/remote/redis_server.h: a real redis-server for a test.
//
// Starts `redis-server` on 127.0.0.1 on a free port (or on a Unix socket
// only) in a temporary directory, with persistence off (--save '',
// --appendonly no), and stops it at the end. kill() sends SIGKILL;
// start() again brings it back on the same port, empty. raw() is a plain
// hiredis connection for planting values behind the library's back.
//
//   if (!RedisServer::installed()) KVBM_SKIP_OR_FAIL(RedisServer::kSkipMessage);

#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <hiredis/hiredis.h>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "skip_or_fail.h"

namespace kvbm::test {

class RedisServer {
 public:
  static constexpr const char* kSkipMessage =
      "redis-server is not installed: the remote tier tests need a real server; install it with "
      "`bash scripts/deps.sh` (Debian: apt-get install redis-server)";

  /// Returns true when redis-server is on PATH.
  static bool installed() { return !find_binary().empty(); }

  struct Options {
    std::vector<std::string> extra_args{};  ///< e.g. {"--maxmemory", "3mb"}
    bool unix_socket = false;               ///< listen on a socket in the temp dir only
    std::string password{};                 ///< raw() and command() AUTH with it when set
  };

  RedisServer() : RedisServer(Options{}) {}
  explicit RedisServer(Options options) : options_(std::move(options)) {
    char tmpl[] = "/tmp/kvbm-redis-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    dir_str_ = dir_.string();
    port_ = options_.unix_socket ? 0 : free_port();
    start();
  }
  ~RedisServer() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] const std::string& dir() const { return dir_str_; }
  [[nodiscard]] std::string socket_path() const { return (dir_ / "redis.sock").string(); }
  [[nodiscard]] std::string url() const {
    return options_.unix_socket ? "unix://" + socket_path()
                                : "redis://127.0.0.1:" + std::to_string(port_) + "/0";
  }

  /// Starts the server (again) and waits until it answers PING.
  void start() {
    if (pid_ > 0) return;
    const std::string bin = find_binary();
    std::vector<std::string> args = {bin,
                                     "--port",
                                     std::to_string(port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     dir_.string(),
                                     "--daemonize",
                                     "no",
                                     "--logfile",
                                     (dir_ / "redis.log").string(),
                                     "--protected-mode",
                                     "no"};
    if (options_.unix_socket) {
      args.insert(args.end(), {"--unixsocket", socket_path(), "--unixsocketperm", "700"});
    }
    args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
    // argv is built before fork: the child of a threaded parent must not allocate.
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      // The server dies with the test process (even a crashed one), and holds
      // none of its output pipes open (it logs to its file).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int devnull = ::open("/dev/null", O_RDWR);
      if (devnull >= 0) {
        ::dup2(devnull, 0);
        ::dup2(devnull, 1);
        ::dup2(devnull, 2);
      }
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    pid_ = pid;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      if (auto c = raw(); c && command(c.get(), {"PING"}) == "PONG") return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("redis-server did not answer within 10 s; see " +
                             (dir_ / "redis.log").string());
  }

  /// Returns the process id (-1 when not running).
  [[nodiscard]] pid_t pid() const { return pid_; }

  /// Stops the server with SIGTERM (nothing when it is not running).
  void stop() { signal_and_wait(SIGTERM); }
  /// Kills the server with SIGKILL.
  void kill() { signal_and_wait(SIGKILL); }
  /// Freezes the server (SIGSTOP): connections stay open and nothing answers.
  void pause() const { ::kill(pid_, SIGSTOP); }
  /// Thaws a paused server (SIGCONT).
  void resume() const { ::kill(pid_, SIGCONT); }

  struct Free {
    void operator()(redisContext* c) const { redisFree(c); }
  };
  using Raw = std::unique_ptr<redisContext, Free>;
  /// A plain blocking connection, or null when the server does not answer.
  [[nodiscard]] Raw raw() const {
    timeval tv{1, 0};
    redisContext* c = options_.unix_socket ? redisConnectUnixWithTimeout(socket_path().c_str(), tv)
                                           : redisConnectWithTimeout("127.0.0.1", port_, tv);
    if (c == nullptr || c->err != 0) {
      if (c != nullptr) redisFree(c);
      return nullptr;
    }
    Raw r(c);
    if (!options_.password.empty() && command(c, {"AUTH", options_.password}) != "OK")
      return nullptr;
    return r;
  }
  /// Runs a command; returns the reply as text (integers in decimal, nil as "(nil)").
  static std::string command(redisContext* c, const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r == nullptr) return "(io error)";
    std::string out;
    switch (r->type) {
      case REDIS_REPLY_INTEGER:
        out = std::to_string(r->integer);
        break;
      case REDIS_REPLY_NIL:
        out = "(nil)";
        break;
      default:
        out.assign(r->str != nullptr ? r->str : "", r->str != nullptr ? r->len : 0);
    }
    freeReplyObject(r);
    return out;
  }
  /// Runs a command on a fresh connection.
  std::string command(const std::vector<std::string>& args) const {
    auto c = raw();
    return c ? command(c.get(), args) : "(unreachable)";
  }

  /// Returns the path of `name` on PATH, or "".
  static std::string find_binary(const std::string& name = "redis-server") {
    const char* path = std::getenv("PATH");
    std::string p = path != nullptr ? path : "/usr/bin:/bin";
    for (std::size_t start = 0; start <= p.size();) {
      std::size_t end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      std::string candidate = p.substr(start, end - start) + "/" + name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      start = end + 1;
    }
    return {};
  }
  /// Returns a TCP port on 127.0.0.1 that nothing listens on now.
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::close(fd);
      throw std::runtime_error("no free port");
    }
    ::close(fd);
    return ntohs(a.sin_port);
  }

 private:
  void signal_and_wait(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    ::kill(pid_, SIGCONT);  // a paused server must see the signal
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  Options options_;
  std::filesystem::path dir_;
  std::string dir_str_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvbm::test
