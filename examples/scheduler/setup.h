// examples/scheduler/setup.h: the KvBlockManager the scheduler example runs on.
//
// A small model layout (2 layers, K and V, 16 tokens of 32 two-byte
// elements: 4 KiB per block) so that moving bytes stays cheap, G1 emulated
// in host memory when there is no GPU, write-through G1 -> G2 -> G3, and a
// private temporary directory for the G3 file, removed with the ScratchDir.

#pragma once

#include <stdlib.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "kvbm/kv_block_manager.h"

namespace kvbm_example {

/// A private temporary directory, removed with everything in it on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvbm-scheduler-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::filesystem::filesystem_error("mkdtemp", tmpl,
                                              std::error_code(errno, std::generic_category()));
    }
    path_ = tmpl;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

/// Pool sizes and modes of the example's KvBlockManager.
struct TierSizes {
  std::size_t g1_blocks = 96;
  std::size_t g2_blocks = 192;
  std::size_t g3_blocks = 1536;  ///< 0: no disk tier
  std::uint32_t block_size = 16;
  bool move_bytes = true;
};

/// Returns the configuration described in the file comment; `disk_dir` is
/// used when sizes.g3_blocks > 0.
inline kvbm::KvBlockManagerConfig make_config(const TierSizes& sizes,
                                              const std::filesystem::path& disk_dir) {
  kvbm::KvBlockManagerConfig c;
  c.layout.num_layers = 2;
  c.layout.outer_dim = 2;
  c.layout.page_size = sizes.block_size;
  c.layout.inner_dim = 32;
  c.layout.dtype_bytes = 2;
  c.device.blocks = sizes.g1_blocks;
  c.host.blocks = sizes.g2_blocks;
  c.disk.blocks = sizes.g3_blocks;
  if (sizes.g3_blocks > 0) c.disk_directory = disk_dir;
  c.disk_direct_io = kvbm::DirectIo::kOff;  // a scratch file: the page cache is fine
  c.device_to_host = kvbm::OffloadMode::kWriteThrough;
  c.host_to_disk = kvbm::OffloadMode::kWriteThrough;
  c.move_bytes = sizes.move_bytes;
  // A swap-out waits for its offload: flush small batches quickly.
  c.pipeline.batch_config.flush_interval = std::chrono::milliseconds(1);
  c.bounce_blocks = 8;
  return c;
}

}  // namespace kvbm_example
