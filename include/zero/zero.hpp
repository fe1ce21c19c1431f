#pragma once
// The common case in one include: what a training loop over zero::Engine needs and that zero::zero
// (the headers' target) can give without another dependency. The engine with its checkpoints,
// stages, plans and placements; the optimizers Adam, AdamW, SGD and LAMB; the loss scalers; the
// partitioners and layouts (zero/shard.hpp); the communicators that need nothing more
// (SelfCommunicator, CountingCommunicator); DeepSpeed configs (zero/config/config.hpp, which the
// engine's options read anyway); learning-rate schedules; activation checkpointing; half and
// bfloat16, buffers and views.
//
// Not here, because each needs a target of its own and the libraries it links: MpiCommunicator
// (<zero/comm/mpi_communicator.hpp>, zero::mpi), NcclCommunicator and the CUDA steps
// (<zero/comm/nccl_communicator.hpp>, <zero/optim/cuda_step.hpp>, zero::cuda), and the NVMe tier
// with the stores over it (<zero/offload/nvme_stores.hpp>, zero::nvme). Nor the estimator
// (zero/estimate/), a tool's concern rather than a training loop's.

#include "zero/comm/counting_communicator.hpp"
#include "zero/comm/self_communicator.hpp"
#include "zero/config/config.hpp"
#include "zero/core/bfloat16.hpp"
#include "zero/core/buffer.hpp"
#include "zero/core/convert.hpp"
#include "zero/core/half.hpp"
#include "zero/core/view.hpp"
#include "zero/engine/engine.hpp"
#include "zero/optim/adam.hpp"
#include "zero/optim/lamb.hpp"
#include "zero/optim/sgd.hpp"
#include "zero/precision/loss_scaler.hpp"
#include "zero/residual/checkpointed_layers.hpp"
#include "zero/schedule/lr_scheduler.hpp"
#include "zero/shard.hpp"
#include "zero/stage/placement.hpp"
#include "zero/stage/plan.hpp"
