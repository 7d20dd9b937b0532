// tests/router_process/router_child.h: the kvbm-router program (KVBM_ROUTER_BINARY,
// the one the build made) run as a child process, for the tests that talk to
// the program itself rather than to RouterService in the test's own process.

#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvbm::router_process::test {

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
  /// Returns true while it runs (it has not exited, nor been killed by a signal).
  bool alive() {
    if (status_ >= 0) return false;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == 0) return true;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return false;
  }
  /// Returns how it ended: its exit status, 1000 + the signal that killed it, -1 while it runs.
  [[nodiscard]] int ended() const { return status_; }
  /// Waits for it to exit; returns its exit status (-1 when killed by a signal).
  int wait_exit() {
    if (status_ < 0) {
      int st = 0;
      waitpid(pid_, &st, 0);
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    }
    return status_ < 1000 ? status_ : -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  int err_ = -1;
  int status_ = -1;
};

/// Returns the URL the child says it listens on (its first line of stdout), "" if none.
inline std::string listening_url(Child& c) {
  const std::string first = c.line();
  const auto at = first.find("http://");
  if (at == std::string::npos) return {};
  return first.substr(at, first.find(' ', at) - at);
}

}  // namespace kvbm::router_process::test
