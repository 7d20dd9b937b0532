// src/facade/tiers.cpp: the table of the facade's tiers (facade/tiers.h).

#include "facade/tiers.h"

namespace kvbm::facade {

TierSpecs describe_tiers(const KvBlockManagerConfig& c, const TierSizes& blocks) {
  TierSpecs t;
  t[TierId::kG1] = {.id = TierId::kG1,
                    .option = "device",
                    .storage = StorageKind::kDevice,
                    .present = true,
                    .blocks = blocks.device,
                    .size = &c.device,
                    .listeners = &c.device_listeners,
                    .above = TierId::kG1,  // nothing is above G1
                    .mode = OffloadMode::kNone,
                    .policy = nullptr,
                    .pipeline = {}};
  t[TierId::kG2] = {.id = TierId::kG2,
                    .option = "host",
                    .storage = StorageKind::kPinnedHost,
                    .present = blocks.host > 0,
                    .blocks = blocks.host,
                    .size = &c.host,
                    .listeners = &c.host_listeners,
                    .above = TierId::kG1,
                    .mode = c.device_to_host,
                    .policy = &c.device_to_host_policy,
                    .pipeline = c.pipeline};
  t[TierId::kG3] = {.id = TierId::kG3,
                    .option = "disk",
                    .storage = StorageKind::kDisk,
                    .present = blocks.disk > 0,
                    .blocks = blocks.disk,
                    .size = &c.disk,
                    .listeners = &c.disk_listeners,
                    .above = TierId::kG2,
                    .mode = c.host_to_disk,
                    .policy = &c.host_to_disk_policy,
                    .pipeline = c.host_to_disk_pipeline.value_or(c.pipeline)};
  t[TierId::kG4] = {.id = TierId::kG4,
                    .option = "remote",
                    .storage = StorageKind::kRemote,
                    .present = !c.remote.urls.empty(),
                    .blocks = 0,
                    .size = nullptr,
                    .listeners = &c.remote_listeners,
                    .above = TierId::kG2,
                    .mode = c.host_to_remote,
                    .policy = &c.host_to_remote_policy,
                    .pipeline = {}};
  return t;
}

}  // namespace kvbm::facade
