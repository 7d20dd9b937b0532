// tests/remote/redis_cluster.h: a real Redis Cluster for a test.
//
// Starts primaries x (1 + replicas) redis-server processes (RedisServer, each
// on a free loopback port with its cluster bus on another, in its own
// temporary directory, persistence off), joins them with `redis-cli --cluster
// create ... --cluster-replicas N --cluster-yes`, waits until every node says
// cluster_state:ok, and stops them all at the end. The node timeout is 1 s, so
// a failover takes about 2 s. Nodes are killed, frozen and thawed through
// node(i) (RedisServer::kill(), pause(), resume()); add_primary() adds one;
// cli() runs redis-cli.
//
//   if (!RedisCluster::installed()) KVBM_SKIP_OR_FAIL(RedisCluster::kSkipMessage);

#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "remote/redis_server.h"

namespace kvbm::test {

class RedisCluster {
 public:
  static constexpr const char* kSkipMessage =
      "redis-server or redis-cli is not installed: the Redis Cluster tests need both; install "
      "them with `bash scripts/deps.sh` (Debian: apt-get install redis-server redis-tools)";

  /// Returns true when redis-server and redis-cli are on PATH.
  static bool installed() {
    return !RedisServer::find_binary().empty() && !RedisServer::find_binary("redis-cli").empty();
  }

  struct Options {
    int primaries = 3;
    int replicas = 1;                       ///< per primary
    std::string password{};                 ///< requirepass and masterauth on every node
    std::vector<std::string> extra_args{};  ///< for every node
  };

  RedisCluster() : RedisCluster(Options{}) {}
  explicit RedisCluster(Options options) : options_(std::move(options)) {
    const int n = options_.primaries * (1 + options_.replicas);
    for (int i = 0; i < n; ++i) nodes_.push_back(std::make_unique<RedisServer>(node_options()));
    std::vector<std::string> args = {"--cluster", "create"};
    for (auto& node : nodes_) args.push_back(address(*node));
    args.insert(args.end(),
                {"--cluster-replicas", std::to_string(options_.replicas), "--cluster-yes"});
    const std::string out = cli(args);
    if (out.find("[OK] All 16384 slots covered") == std::string::npos) {
      throw std::runtime_error("redis-cli --cluster create failed:\n" + out);
    }
    wait_ok();
  }

  [[nodiscard]] std::size_t size() const { return nodes_.size(); }

  /// Starts one more node, joins it as an empty primary (`redis-cli --cluster
  /// add-node`) and returns its index; `rebalance --cluster-use-empty-masters`
  /// then gives it slots.
  std::size_t add_primary() {
    wait_agreed();  // redis-cli refuses to add a node while the nodes disagree
    nodes_.push_back(std::make_unique<RedisServer>(node_options()));
    const std::string out =
        cli({"--cluster", "add-node", address(*nodes_.back()), address(*nodes_.front())});
    if (out.find("[OK] New node added correctly") == std::string::npos) {
      throw std::runtime_error("redis-cli --cluster add-node failed:\n" + out);
    }
    wait_ok();
    wait_agreed();
    return nodes_.size() - 1;
  }

  /// Waits (up to 20 s) until `redis-cli --cluster check` finds the nodes agreeing
  /// about the configuration (after a reshard, the new epochs take a moment to spread).
  void wait_agreed() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::string out;
    while (std::chrono::steady_clock::now() < until) {
      out = cli({"--cluster", "check", address(*nodes_.front())});
      if (out.find("[ERR]") == std::string::npos && out.find("[WARNING]") == std::string::npos)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw std::runtime_error("the cluster's nodes did not agree within 20 s:\n" + out);
  }
  [[nodiscard]] RedisServer& node(std::size_t i) { return *nodes_[i]; }
  static std::string address(const RedisServer& s) {
    return "127.0.0.1:" + std::to_string(s.port());
  }

  /// redis+cluster://[user:password@]127.0.0.1:<first>,127.0.0.1:<second> (two seeds).
  [[nodiscard]] std::string url(const std::string& userinfo = "") const {
    return "redis+cluster://" + (userinfo.empty() ? "" : userinfo + "@") + address(*nodes_[0]) +
           "," + address(*nodes_[1]);
  }

  /// Runs redis-cli with `args` (and -a password when set); returns its output.
  [[nodiscard]] std::string cli(const std::vector<std::string>& args) const {
    std::string cmd = RedisServer::find_binary("redis-cli");
    if (!options_.password.empty()) cmd += " --no-auth-warning -a '" + options_.password + "'";
    for (const auto& a : args) cmd += " '" + a + "'";
    cmd += " 2>&1";
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      std::size_t got = 0;
      while ((got = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, got);
      ::pclose(p);
    }
    return out;
  }

  /// Returns, for each slot, the index of the node serving it as primary (-1:
  /// none), asked of the first live node that answers.
  std::vector<int> slot_map() {
    std::vector<int> out(16384, -1);
    for (auto& n : nodes_) {
      if (n->pid() <= 0) continue;
      const std::string nodes = n->command({"CLUSTER", "NODES"});
      if (nodes.empty() || nodes.starts_with("(")) continue;
      std::istringstream lines(nodes);
      for (std::string line; std::getline(lines, line);) {
        if (line.find("master") == std::string::npos || line.find(",fail") != std::string::npos)
          continue;
        std::istringstream f(line);
        std::string id, addr, flags, master, ping, pong, epoch, state, range;
        f >> id >> addr >> flags >> master >> ping >> pong >> epoch >> state;
        const int index = index_of(addr.substr(0, addr.find('@')));
        while (f >> range) {
          if (range.starts_with("[")) continue;  // a slot being imported or migrated
          const auto dash = range.find('-');
          const int lo = std::stoi(range.substr(0, dash));
          const int hi = dash == std::string::npos ? lo : std::stoi(range.substr(dash + 1));
          for (int slot = lo; slot <= hi; ++slot) out[static_cast<std::size_t>(slot)] = index;
        }
      }
      return out;
    }
    return out;
  }

  /// Returns the index of the node serving `slot` as primary (-1: none).
  int primary_of(std::uint16_t slot) { return slot_map()[slot]; }

  /// Returns whether node i is a primary now.
  bool is_primary(std::size_t i) {
    return node(i).command({"INFO", "replication"}).find("role:master") != std::string::npos;
  }

  /// Returns the node id of node i.
  std::string id_of(std::size_t i) { return node(i).command({"CLUSTER", "MYID"}); }

  /// Returns the index of a replica of primary `p` (-1 when none).
  int replica_of(std::size_t p) {
    const std::string id = id_of(p);
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (i == p || nodes_[i]->pid() <= 0) continue;
      const std::string info = nodes_[i]->command({"CLUSTER", "NODES"});
      std::istringstream lines(info);
      for (std::string line; std::getline(lines, line);) {
        if (line.find("myself") != std::string::npos && line.find(id) != std::string::npos)
          return static_cast<int>(i);
      }
    }
    return -1;
  }

  /// Waits (up to 30 s) until every running primary's replicas have acknowledged all it
  /// wrote: every running replica is online at its primary (a replica still waiting for its
  /// first sync is listed with offset 0, or not yet at all) and each replica's offset in
  /// INFO replication equals master_repl_offset. WAIT would not do: it waits only for the
  /// writes of the connection that sends it.
  void wait_replicated() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < until) {
      if (replicated()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("the replicas did not catch up within 30 s");
  }

  /// Waits (up to 30 s) until every running node says cluster_state:ok.
  void wait_ok() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < until) {
      bool ok = true;
      for (auto& n : nodes_) {
        if (n->pid() <= 0) continue;
        ok &= n->command({"CLUSTER", "INFO"}).find("cluster_state:ok") != std::string::npos;
      }
      if (ok) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error("the cluster did not reach cluster_state:ok within 30 s");
  }

 private:
  /// One look at wait_replicated()'s condition.
  bool replicated() {
    std::size_t replicas = 0, online = 0;
    for (auto& n : nodes_) {
      if (n->pid() <= 0) continue;
      const std::string info = n->command({"INFO", "replication"});
      if (info.find("role:slave") != std::string::npos) ++replicas;
      if (info.find("role:master") == std::string::npos) continue;
      const auto at = info.find("master_repl_offset:");
      if (at == std::string::npos) return false;
      const std::string offset = info.substr(at + 19, info.find('\r', at) - at - 19);
      for (auto p = info.find(",state=online,offset="); p != std::string::npos;
           p = info.find(",state=online,offset=", p + 1)) {
        ++online;
        const auto from = p + 21;
        if (info.substr(from, info.find(',', from) - from) != offset) return false;
      }
    }
    return online == replicas;
  }

  RedisServer::Options node_options() const {
    RedisServer::Options o;
    o.password = options_.password;
    o.extra_args = {"--cluster-enabled",      "yes",
                    "--cluster-config-file",  "nodes.conf",
                    "--cluster-node-timeout", "1000",
                    "--cluster-port",         std::to_string(RedisServer::free_port())};
    // A replica's first sync starts at once, not after Redis 7's 5 s diskless-sync wait.
    o.extra_args.insert(o.extra_args.end(), {"--repl-diskless-sync-delay", "0"});
    if (!options_.password.empty()) {
      o.extra_args.insert(o.extra_args.end(),
                          {"--requirepass", options_.password, "--masterauth", options_.password});
    }
    o.extra_args.insert(o.extra_args.end(), options_.extra_args.begin(), options_.extra_args.end());
    return o;
  }

  int index_of(const std::string& addr) const {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (address(*nodes_[i]) == addr) return static_cast<int>(i);
    }
    return -1;
  }

  Options options_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

}  // namespace kvbm::test
