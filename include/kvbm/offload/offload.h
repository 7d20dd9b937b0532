// kvbm/offload/offload.h: the offload pipeline, in one include.
#pragma once

#include "kvbm/clock.h"
#include "kvbm/offload/batcher.h"
#include "kvbm/offload/cancel.h"
#include "kvbm/offload/cancel_sweeper.h"
#include "kvbm/offload/cancellable_queue.h"
#include "kvbm/offload/config.h"
#include "kvbm/offload/container.h"
#include "kvbm/offload/cuda_event.h"
#include "kvbm/offload/offload_metrics.h"
#include "kvbm/offload/pipeline.h"
#include "kvbm/offload/policy.h"
#include "kvbm/offload/policy_evaluator.h"
#include "kvbm/offload/precondition.h"
#include "kvbm/offload/precondition_awaiter.h"
#include "kvbm/offload/transfer_executor.h"
#include "kvbm/offload/transfer_handle.h"
