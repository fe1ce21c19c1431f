#pragma once
// train_gpt --device cuda: every model state in the GPU's memory (the engine over
// CudaStreamSpace, docs/gpu-engine.md), the model's activations too, forward and backward on the
// engine's stream (device_training.hpp: DeviceModel's kernels, cuBLAS's products). One rank per
// GPU talks through NCCL; ranks that share a GPU through StagedCommunicator (device buffers
// carried through pinned host memory over MPI). Instantiated once per stage (stage0_cuda.cpp ...
// stage3_cuda.cpp).

#include "../common/gpu_place.hpp"
#include "../common/optimizer_config.hpp"
#include "device_training.hpp"
#include "run.hpp"
#include "weights.hpp"

#include <zero/comm/nccl_communicator.hpp>
#include <zero/comm/staged_communicator.hpp>
#include <zero/engine/cuda_engine.hpp>
#include <zero/optim/from_config.hpp>
#include <zero/precision/any_loss_scaler.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace train_gpt {

using OnTheGpu = zero::Placement<zero::execute_on<zero::CudaStreamSpace>>;
// fp32 (the exactness check against PyTorch), and bf16 or fp16 with fp32 master weights.
using GpuComputeTypes = zero::ComputeTypes<float, zero::half, zero::bfloat16>;
using StagedOverMpi = zero::StagedCommunicator<zero::CudaStreamSpace, zero::MpiCommunicator>;

template <class Plan, class Comm, class Optimizer>
History run_on_gpu_with(zero::MpiCommunicator& world, Comm& comm,
                        const examples::GpuStreams& streams, const Flags& f, const Tokens& data,
                        Optimizer optimizer) {
  using Engine =
      zero::Engine<Plan, Comm, OnTheGpu, Optimizer, zero::AnyLossScaler, GpuComputeTypes>;
  zero::EngineOptions options =
      f.ds ? zero::EngineOptions::from_config(*f.ds) : zero::EngineOptions{};
  options.compute_dtype = f.dtype;
  options.deterministic = f.deterministic;
  if (!f.ds) options.persistence_threshold = 0; // every layer sharded under stage 3
  options.moments = moment_storage(f);
  options.master = master_storage(f);
  const std::size_t before = examples::device_bytes_in_use();
  Engine engine(world, comm, gpt::specs(f.model), std::move(optimizer),
                zero::AnyLossScaler::for_run(f.dtype, f.ds ? &*f.ds : nullptr), options,
                streams.compute());
  const WholeTensors init = f.init_npy.empty() ? InitialWeights::random(f.model, f.seed)
                                               : InitialWeights::from_npy(f.model, f.init_npy);
  const std::vector<std::vector<float>> layers = layers_of(f.model, init, 0);
  for (std::size_t l = 0; l < engine.layers(); ++l)
    engine.set_layer(l, layers[l]);
  std::size_t built = 0, first_step = 0, last_step = 0; // built: the engine and the model
  History h = train_on_device(world, f, engine, data, streams.compute(), [&](int step, History&) {
    const std::size_t in_use = examples::device_bytes_in_use();
    if (step < 0) built = in_use;
    if (step == 0) first_step = in_use;
    last_step = in_use;
  });
  h.device_before = before;
  h.device_built = built;
  h.device_first_step = first_step;
  h.device_last_step = last_step;
  return h;
}

// Builds the communicator the ranks can use and trains with every model state on the GPU: NCCL
// where every rank of the node has a GPU of its own among those it sees (a launcher that shows
// each rank one GPU through CUDA_VISIBLE_DEVICES gets the staged communicator instead).
template <class Plan>
History run_on_gpu(zero::MpiCommunicator& world, const Flags& f, const Tokens& data) {
  const examples::GpuPlace place = examples::place_on_gpu(world);
  const examples::GpuStreams streams;
  cudaDeviceProp properties{};
  ZERO_CHECK_CUDA(cudaGetDeviceProperties(&properties, place.device));
  History h = zero::with_optimizer<zero::Adam, zero::AdamW>(
      examples::optimizer_config(f), [&](auto optimizer) {
        if (place.own_gpu) {
          zero::NcclCommunicator comm(world, place.device);
          return run_on_gpu_with<Plan>(world, comm, streams, f, data, std::move(optimizer));
        }
        StagedOverMpi comm(zero::MpiCommunicator(world.boost_communicator()), streams.caller(),
                           streams.transfer());
        return run_on_gpu_with<Plan>(world, comm, streams, f, data, std::move(optimizer));
      });
  h.device_name = properties.name;
  h.device_communicator = place.own_gpu ? "NCCL" : "staged through pinned host memory over MPI";
  return h;
}

} // namespace train_gpt
