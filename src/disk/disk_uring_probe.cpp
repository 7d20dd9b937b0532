// src/disk/disk_uring_probe.cpp: whether this process can have an io_uring
// (DiskEngine::io_uring_available()), probed once: the build has liburing, the
// kernel grants a ring (not EPERM or ENOSYS, as in some containers) and its
// ring has the opcodes the engine uses. Logs one warning when not.

#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "disk/disk_engine_impl.h"
#include "kvbm/logging.h"

#if KVBM_HAVE_URING
#include <liburing.h>

#include <cstring>
#endif

namespace kvbm::detail {

#if KVBM_HAVE_URING
namespace {

/// The ring's opcodes, as a probe of the running kernel sees them.
bool probe(std::string& why) {
  io_uring ring{};
  const int rc = io_uring_queue_init(2, &ring, 0);
  if (rc < 0) {
    why = std::string("io_uring_queue_init: ") + std::strerror(-rc);
    return false;
  }
  io_uring_probe* p = io_uring_get_probe_ring(&ring);
  const bool ok = p != nullptr && io_uring_opcode_supported(p, IORING_OP_READ) != 0 &&
                  io_uring_opcode_supported(p, IORING_OP_READ_FIXED) != 0 &&
                  io_uring_opcode_supported(p, IORING_OP_WRITEV) != 0;
  if (p != nullptr) io_uring_free_probe(p);
  io_uring_queue_exit(&ring);
  if (!ok) why = "the kernel's io_uring lacks IORING_OP_READ, READ_FIXED or WRITEV";
  return ok;
}

}  // namespace

bool io_uring_available(std::string* why) noexcept {
  static const std::pair<bool, std::string> kProbe = [] {
    std::string w;
    const bool ok = probe(w);
    if (!ok) logger()->warn("io_uring unavailable ({}): disk engines use the thread pool", w);
    return std::pair<bool, std::string>(ok, std::move(w));
  }();
  if (why != nullptr && !kProbe.first) *why = kProbe.second;
  return kProbe.first;
}

#else  // !KVBM_HAVE_URING

bool io_uring_available(std::string* why) noexcept {
  if (why != nullptr) *why = "kvbm was built without liburing (install liburing-dev, reconfigure)";
  return false;
}

#endif

}  // namespace kvbm::detail
