// Helpers shared by the tests in tests/replay/.

#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "replay/trace.h"
#include "skip_or_fail.h"
#include "test_util.h"

namespace kvbm::replay::test {

using kvbm::test::stress_scale;

/// The reason a test that replays the shipped trace gives when it is missing (KVBM_SKIP_OR_FAIL).
inline constexpr const char* kTraceMissing =
    "shipped trace missing: conversation_trace.jsonl is in neither " KVBM_SOURCE_DIR
    "/examples/data/ nor " KVBM_SHARED_DIR "/data/; nothing to replay";

/// The shipped trace (examples/data first, then ../shared/data), or nullopt.
inline std::optional<std::string> shipped_trace_path() {
  for (const char* p : {KVBM_SOURCE_DIR "/examples/data/conversation_trace.jsonl",
                        KVBM_SHARED_DIR "/data/conversation_trace.jsonl"}) {
    if (std::filesystem::exists(p)) return std::string(p);
  }
  return std::nullopt;
}

/// The shipped trace, read once per test binary; null when missing.
inline const Trace* shipped_trace() {
  static const std::optional<Trace> t = []() -> std::optional<Trace> {
    const auto p = shipped_trace_path();
    if (!p) return std::nullopt;
    return read_trace_file(*p, TraceOptions{});
  }();
  return t ? &*t : nullptr;
}

/// The first `n` requests of the shipped trace (its block and token counts theirs), or nullopt
/// when it is missing.
inline std::optional<Trace> first_requests(std::size_t n) {
  const Trace* tr = shipped_trace();
  if (tr == nullptr) return std::nullopt;
  Trace t = *tr;
  t.requests.resize(std::min(n, t.requests.size()));
  t.blocks = 0;
  t.input_tokens = 0;
  for (const TraceRequest& r : t.requests) {
    t.blocks += r.hashes.size();
    t.input_tokens += r.input_length;
  }
  return t;
}

/// A fresh directory under the test temp dir, removed with the object.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) {
    path_ = std::filesystem::temp_directory_path() /
            (name + "-" + std::to_string(static_cast<long>(::getpid())) + "-" +
             std::to_string(counter()++));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path path_;
};

}  // namespace kvbm::replay::test
