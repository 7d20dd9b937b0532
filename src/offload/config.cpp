#include "kvbm/offload/config.h"

#include "kvbm/error.h"

namespace kvbm {

void PipelineConfig::validate() const {
  const auto& b = batch_config;
  KVBM_CHECK(b.max_batch_size >= 1,
             "PipelineConfig: batch_config.max_batch_size must be at least 1 (got 0)");
  KVBM_CHECK(b.min_batch_size >= 1,
             "PipelineConfig: batch_config.min_batch_size must be at least 1 (got 0)");
  KVBM_CHECK(b.min_batch_size <= b.max_batch_size, "PipelineConfig: batch_config.min_batch_size (",
             b.min_batch_size, ") must not exceed batch_config.max_batch_size (", b.max_batch_size,
             ")");
  KVBM_CHECK(b.flush_interval.count() > 0,
             "PipelineConfig: batch_config.flush_interval must be positive (got ",
             b.flush_interval.count(), " ns)");
  KVBM_CHECK(policy_timeout.count() > 0, "PipelineConfig: policy_timeout must be positive (got ",
             policy_timeout.count(), " ns)");
  KVBM_CHECK(sweep_interval.count() > 0, "PipelineConfig: sweep_interval must be positive (got ",
             sweep_interval.count(), " ns)");
  KVBM_CHECK(space_wait.count() >= 0, "PipelineConfig: space_wait must not be negative (got ",
             space_wait.count(), " ns); use 0 to report kNoSpace at once");
  KVBM_CHECK(max_concurrent_transfers >= 1,
             "PipelineConfig: max_concurrent_transfers must be at least 1 (got 0)");
}

}  // namespace kvbm
