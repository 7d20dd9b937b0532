// src/facade/tier_engines.cpp: the engines of each tier below G1 (facade/tier_engines.h).

#include "facade/tier_engines.h"

#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "kvbm/disk/disk_engine.h"
#include "kvbm/error.h"
#include "kvbm/transfer/bounce_engine.h"
#include "kvbm/transfer/cuda_engine.h"
#include "kvbm/transfer/host_engine.h"

namespace kvbm::facade {
namespace {

// Completes every batch at once without touching memory (metadata only).
class NullEngine final : public TransferEngine {
 public:
  NullEngine(std::string name, std::size_t src_blocks, std::size_t dst_blocks)
      : name_(std::move(name)), src_blocks_(src_blocks), dst_blocks_(dst_blocks) {}
  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  [[nodiscard]] std::shared_ptr<TransferCompletion> submit(
      std::span<const TransferPair> pairs) override {
    KVBM_CHECK(!pairs.empty(), name_, ": an empty batch");
    for (const auto& p : pairs) {
      KVBM_CHECK(p.src < src_blocks_ && p.dst < dst_blocks_, name_, ": block id out of range");
    }
    auto c = std::make_shared<TransferCompletion>();
    c->complete({});
    return c;
  }

 private:
  std::string name_;
  std::size_t src_blocks_, dst_blocks_;
};

// A copy between G1 and pinned host memory: CUDA, or host copies when G1 is
// emulated in host memory.
std::shared_ptr<TransferEngine> device_host_engine(const EngineContext& ctx, const Layout& src,
                                                   const Layout& dst, CudaDirection dir,
                                                   const std::string& name) {
  if (!ctx.memory[TierId::kG1].emulated) {
    CudaEngineOptions o;
    o.device = ctx.config.cuda_device;
    o.name = name;
    o.registry = ctx.config.metrics_registry;
    return std::make_shared<CudaTransferEngine>(src, dst, dir, o);
  }
  HostEngineOptions o;
  o.threads = ctx.config.copy_threads;
  o.name = name;
  o.registry = ctx.config.metrics_registry;
  return std::make_shared<HostTransferEngine>(src, dst, o);
}

// Disk writes from the tier above; reads into G1 through the bounce buffer.
void build_disk_engines(const EngineContext& ctx, TierId t, TierEngines& out) {
  const KvBlockManagerConfig& c = ctx.config;
  const TierId above = ctx.specs[t].above;
  const TierMemory& self = ctx.memory[t];
  const TierMemory& device = ctx.memory[TierId::kG1];
  DiskEngineOptions w;
  const DiskTierOptions& d = *ctx.specs[t].disk;
  if (d.queue_depth) w.queue_depth = d.queue_depth;
  w.workers = d.workers;
  w.io_engine = d.io_engine;
  w.name = copy_path_name(above, t);
  w.registry = c.metrics_registry;
  out.down = std::make_shared<DiskWriteEngine>(*ctx.memory[above].layout, *self.file, w);
  DiskEngineOptions r = w;
  r.name = copy_path_name(t, TierId::kG1);
  auto& read =
      *out.parts.emplace_back(std::make_unique<DiskReadEngine>(*self.file, *self.bounce_layout, r));
  std::unique_ptr<TransferEngine> to_device;
  if (!device.emulated) {
    CudaEngineOptions o;
    o.device = c.cuda_device;
    o.name = "bounce_to_G1";
    to_device = std::make_unique<CudaTransferEngine>(*self.bounce_layout, *device.layout,
                                                     CudaDirection::kHostToDevice, o);
  } else {
    HostEngineOptions o;
    o.threads = 1;
    o.name = "bounce_to_G1";
    to_device = std::make_unique<HostTransferEngine>(*self.bounce_layout, *device.layout, o);
  }
  auto& copy = *out.parts.emplace_back(std::move(to_device));
  BounceEngineOptions bo;
  bo.bounce_blocks = c.bounce_blocks;
  bo.src_blocks = ctx.specs[t].blocks;
  bo.dst_blocks = ctx.specs[TierId::kG1].blocks;
  bo.name = copy_path_name(t, TierId::kG1);
  out.up = std::make_shared<BounceTransferEngine>(read, copy, bo);
}

}  // namespace

void build_engines(const EngineContext& ctx, TierId t, TierEngines& out) {
  const TierId above = ctx.specs[t].above;
  const std::size_t from = ctx.specs[above].blocks;
  const std::size_t self = ctx.specs[t].blocks;
  const std::size_t device = ctx.specs[TierId::kG1].blocks;
  if (!ctx.config.move_bytes) {
    out.down = std::make_shared<NullEngine>(copy_path_name(above, t), from, self);
    out.up = std::make_shared<NullEngine>(copy_path_name(t, TierId::kG1), self, device);
    return;
  }
  switch (ctx.specs[t].storage) {
    case StorageKind::kPinnedHost: {
      const Layout& g1 = *ctx.memory[TierId::kG1].layout;
      const Layout& host = *ctx.memory[t].layout;
      out.down = device_host_engine(ctx, *ctx.memory[above].layout, host,
                                    CudaDirection::kDeviceToHost, copy_path_name(above, t));
      out.up = device_host_engine(ctx, host, g1, CudaDirection::kHostToDevice,
                                  copy_path_name(t, TierId::kG1));
      return;
    }
    case StorageKind::kDisk:
      build_disk_engines(ctx, t, out);
      return;
    case StorageKind::kDevice:
    case StorageKind::kRemote:
      break;
  }
  KVBM_CHECK(false, "KvBlockManager: tier ", to_string(t), " has no engines of its own");
}

}  // namespace kvbm::facade
