// examples/remote_two_instances.cpp: two engine instances, two processes, one cache.
//
//   kvbm_remote_two_instances [redis://host:port/db]
//
// Instance A (a child process) computes a 16-block prefix, which its
// KvBlockManager writes through G1 -> G2 -> G4 (Redis), and exits. Instance
// B (this process), with empty G1 and G2, onboards the same prefix: every
// block comes from G4, through G2, verified by checksum, and B compares every
// byte with what A computed. Without a URL the example starts its own
// redis-server on a free port of 127.0.0.1 (and stops it); it needs kvbm
// built with the remote tier (libhiredis-dev) and redis-server on PATH
// (`bash scripts/deps.sh` installs both).
//
// Exit status: 0 when B got every block with every byte; 1 otherwise; 2 when
// there is no server to use.

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <kvbm/kvbm.h>

namespace {

using namespace kvbm;

constexpr std::size_t kBlocks = 16;

KvBlockManagerConfig instance_config(const std::string& url) {
  KvBlockManagerConfig c;
  c.layout = {.num_layers = 4, .outer_dim = 2, .page_size = 16, .inner_dim = 128, .dtype_bytes = 2};
  c.device.blocks = 64;
  c.host.blocks = 64;
  c.device_to_host = OffloadMode::kWriteThrough;  // computed blocks go to G2 at once
  c.host_to_remote = OffloadMode::kWriteThrough;  // and on to G4, for the other instances
  c.remote.urls = {url};
  c.remote.model = "example-model@1";  // only instances of the same model share blocks
  c.remote.dtype = "bf16";
  return c;
}

std::vector<SequenceHash> prompt_hashes() {
  std::vector<Token> tokens(kBlocks * 16);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<Token>(i * 7 + 3);
  TokenBlockSequence seq(16);
  seq.extend(tokens);
  const auto hashes = seq.sequence_hashes();
  return {hashes.begin(), hashes.end()};
}

// "Computed" KV bytes of a block: a function of its hash, so B can check them.
std::vector<std::byte> kv_bytes(const SequenceHash& h, std::size_t n) {
  std::vector<std::byte> out(n);
  std::mt19937_64 rng(h.value());
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

void copy_in(const Layout& l, BlockId id, const std::vector<std::byte>& bytes) {
  std::vector<Region> regions;
  l.append_regions(id, regions);
  std::size_t off = 0;
  for (const auto& r : regions) {
    host_write(r.addr, bytes.data() + off, r.size);  // G1 may be GPU memory
    off += r.size;
  }
}

bool same(const Layout& l, BlockId id, const std::vector<std::byte>& bytes) {
  std::vector<Region> regions;
  l.append_regions(id, regions);
  std::size_t off = 0;
  std::vector<std::byte> got;
  for (const auto& r : regions) {
    got.resize(r.size);
    host_read(got.data(), r.addr, r.size);  // G1 may be GPU memory
    if (std::memcmp(got.data(), bytes.data() + off, r.size) != 0) return false;
    off += r.size;
  }
  return true;
}

// Instance A: computes the prefix into G1 and registers it (written through to G4).
int instance_a(const std::string& url) {
  auto kv = KvBlockManager::build(instance_config(url));
  const auto hashes = prompt_hashes();
  auto blocks = kv->device().allocate_blocks(hashes.size());
  if (!blocks) return 1;
  std::vector<CompleteBlock<G1>> complete;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    copy_in(kv->device_layout(), (*blocks)[i].block_id(), kv_bytes(hashes[i], kv->block_bytes()));
    complete.push_back(std::move((*blocks)[i]).stage(hashes[i], kv->block_size()).value());
  }
  (void)kv->register_blocks(std::move(complete));
  kv->drain();  // every write to G4 has landed (or failed) before the process exits
  std::printf("instance A (pid %d): computed and offloaded %zu blocks\n",
              static_cast<int>(::getpid()), hashes.size());
  return kv->audit().empty() ? 0 : 1;
}

// Instance B: onboards the prefix from G4 and checks every byte.
int instance_b(const std::string& url) {
  auto kv = KvBlockManager::build(instance_config(url));
  const auto hashes = prompt_hashes();
  OnboardHandle h = kv->onboard(hashes);
  h.wait();
  const OnboardCounts c = h.counts();
  const auto blocks = h.take_blocks();
  std::size_t good = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    good += same(kv->device_layout(), blocks[i].block_id(), kv_bytes(hashes[i], kv->block_bytes()));
  }
  std::printf(
      "instance B (pid %d): onboarded %zu of %zu blocks (G1 %zu, G2 %zu, G4 %zu); %zu with every "
      "byte equal\n",
      static_cast<int>(::getpid()), blocks.size(), hashes.size(), c.from(kvbm::TierId::kG1),
      c.from(kvbm::TierId::kG2), c.from(kvbm::TierId::kG4), good);
  return good == hashes.size() && c.from(kvbm::TierId::kG4) == hashes.size() ? 0 : 1;
}

// A redis-server of our own on a free port, stopped at exit.
struct OwnServer {
  pid_t pid = -1;
  std::filesystem::path dir;
  std::string url;

  bool start() {
    const char* bin = "redis-server";
    int port = 0;
    {
      const int s = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof a;
      if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
          ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        return false;
      }
      port = ntohs(a.sin_port);
      ::close(s);
    }
    char tmpl[] = "/tmp/kvbm-example-redis-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return false;
    dir = tmpl;
    const std::string port_s = std::to_string(port), dir_s = dir.string();
    pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      std::freopen("/dev/null", "w", stdout);
      ::execlp(bin, bin, "--port", port_s.c_str(), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", dir_s.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    url = "redis://127.0.0.1:" + port_s + "/0";
    // Wait until it accepts connections.
    for (int i = 0; i < 500; ++i) {
      const int s = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<std::uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      const bool up = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      ::close(s);
      if (up) return true;
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) return false;  // it exited: not installed
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  ~OwnServer() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::optional<OwnServer> own;
  std::string url;
  if (argc > 1) {
    url = argv[1];
  } else {
    own.emplace();
    if (!own->start()) {
      std::fprintf(stderr,
                   "no Redis URL given and redis-server could not be started; install it "
                   "(bash scripts/deps.sh) or pass redis://host:port/db\n");
      return 2;
    }
    url = own->url;
    std::printf("started redis-server at %s\n", url.c_str());
  }
  try {
    std::fflush(stdout);  // the child must not print this process's buffer again
    const pid_t child = ::fork();
    if (child < 0) return 1;
    if (child == 0) {
      int rc = 1;
      try {
        rc = instance_a(url);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "instance A: %s\n", e.what());
      }
      std::fflush(stdout);
      ::_exit(rc);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "instance A failed\n");
      return 1;
    }
    return instance_b(url);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
