// src/facade/tiers.cpp: the table of the facade's tiers (facade/tiers.h).

#include "facade/tiers.h"

namespace kvbm::facade {

TierSpecs describe_tiers(const KvBlockManagerConfig& c, const TierSizes& blocks) {
  TierSpecs t;
  t[0] = {.option = "device",
          .storage = StorageKind::kDevice,
          .blocks = blocks[0],
          .size = &c.device,
          .listeners = &c.device_listeners,
          .mode = OffloadMode::kNone,  // nothing is above G1
          .policy = nullptr,
          .pipeline = {}};
  t[1] = {.option = "host",
          .storage = StorageKind::kPinnedHost,
          .blocks = blocks[1],
          .size = &c.host,
          .listeners = &c.host_listeners,
          .mode = c.device_to_host,
          .policy = &c.device_to_host_policy,
          .pipeline = c.pipeline};
  t[2] = {.option = "disk",
          .storage = StorageKind::kDisk,
          .blocks = blocks[2],
          .size = &c.disk,
          .listeners = &c.disk_listeners,
          .mode = c.host_to_disk,
          .policy = &c.host_to_disk_policy,
          .pipeline = c.host_to_disk_pipeline.value_or(c.pipeline)};
  return t;
}

}  // namespace kvbm::facade
