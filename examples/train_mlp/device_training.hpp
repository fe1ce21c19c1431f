#pragma once
// train_mlp --device cuda: every model state in the GPU's memory (the engine over
// CudaStreamSpace, docs/gpu-engine.md), the model's forward and backward as cuBLAS calls and
// kernels on one compute stream (device_mlp.hpp), the same flags and training loop as the host
// run (training.hpp's train(), with DeviceMlp as its model). One rank per GPU talks through
// NCCL; ranks that share a GPU (NCCL refuses them) through StagedCommunicator, which carries
// device buffers through pinned host memory over MPI. With --offload-optimizer (or --nvme) the
// optimizer states are on the host instead, updated by the CPU (ZeRO-Offload,
// docs/zero-offload.md). Instantiated once per stage (stage0_cuda.cpp ... stage3_cuda.cpp), and
// per stage and offloaded placement (stage1_cuda_offload.cpp ... stage3_cuda_offload.cpp).

#include "../common/gpu_place.hpp"
#include "device_mlp.hpp"
#include "run.hpp"

#include <zero/comm/nccl_communicator.hpp>
#include <zero/comm/staged_communicator.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/core/cuda_stream_space.hpp>
#include <zero/engine/cuda_engine.hpp>
#include <zero/offload/offloaded_optimizer_store.hpp>
#include <zero/offload/offloaded_parameters.hpp>
#if ZERO_TRAIN_MLP_NVME
#include <zero/offload/nvme_stores.hpp>
#endif

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace train {

using OnTheGpu = zero::Placement<zero::execute_on<zero::CudaStreamSpace>>;
// ZeRO-Offload: the optimizer states in host memory (pageable: every copy to and from the GPU
// goes through the store's pinned staging, so pinning the states would only lock memory), or on
// NVMe.
using OffloadedToCpu =
    zero::Placement<zero::execute_on<zero::CudaStreamSpace>, zero::optimizer_states_in<zero::host>>;
using OffloadedToNvme =
    zero::Placement<zero::execute_on<zero::CudaStreamSpace>, zero::optimizer_states_in<zero::nvme>>;
// ZeRO-Infinity's offload_param beside either (stage 3): the parameter shards in pinned host
// memory, from which each layer's block is copied to the GPU asynchronously.
using ParametersOffloadedToCpu =
    zero::Placement<zero::execute_on<zero::CudaStreamSpace>, zero::parameters_in<zero::pinned_host>,
                    zero::optimizer_states_in<zero::host>>;
using ParametersOffloadedBesideNvme =
    zero::Placement<zero::execute_on<zero::CudaStreamSpace>, zero::parameters_in<zero::pinned_host>,
                    zero::optimizer_states_in<zero::nvme>>;
// ... or on NVMe with the optimizer states (--nvme-params): each block read into a bounce buffer,
// then copied to the GPU.
using ParametersOnNvmeBesideGpu =
    zero::Placement<zero::execute_on<zero::CudaStreamSpace>, zero::parameters_in<zero::nvme>,
                    zero::optimizer_states_in<zero::nvme>>;
// bf16 or fp16: each placement's engines are compiled for those only (float would add a third
// instantiation of every stage for no check the GPU runs need).
using GpuComputeTypes = zero::ComputeTypes<zero::half, zero::bfloat16>;
using StagedOverMpi = zero::StagedCommunicator<zero::CudaStreamSpace, zero::MpiCommunicator>;

using examples::device_bytes_in_use;
using examples::GpuPlace;
using examples::GpuStreams;
using examples::place_on_gpu;

// A CUDA event that keeps time (zero::CudaEvent orders only): forward's and backward's GPU time.
class TimingEvent {
 public:
  TimingEvent() { ZERO_CHECK_CUDA(cudaEventCreate(&event_)); }
  ~TimingEvent() { ZERO_LOG_CUDA(cudaEventDestroy(event_)); }
  TimingEvent(const TimingEvent&) = delete;
  TimingEvent& operator=(const TimingEvent&) = delete;
  void record(cudaStream_t stream) { ZERO_CHECK_CUDA(cudaEventRecord(event_, stream)); }
  // Seconds from `start` to this event, both completed.
  double seconds_since(const TimingEvent& start) const {
    float ms = 0;
    ZERO_CHECK_CUDA(cudaEventElapsedTime(&ms, start.event_, event_));
    return ms / 1e3;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// The demo's model on the GPU, as train() calls it: the data in device memory once, the
// activations of a micro-step in buffers allocated once (so that device memory stays flat from
// step to step), forward and backward queued on the engine's stream.
template <class Engine>
class DeviceMlp {
 public:
  DeviceMlp(Engine& engine, const Flags& f, const Dataset& data, zero::CudaStreamSpace compute,
            std::size_t micro_rows)
      : engine_(engine), f_(f), data_(data), compute_(compute),
        model_(compute.stream(), micro_rows), x_(upload(data.x)), y_(upload(data.y)) {
    const mlp::Shape& shape = f.shape;
    std::size_t widest = 0, largest_layer = 0;
    for (std::size_t l = 0; l < shape.layers(); ++l) {
      pre_.emplace_back(micro_rows * shape.out(l), zero::uninitialized);
      act_.emplace_back(micro_rows * shape.in(l), zero::uninitialized);
      widest = std::max({widest, shape.in(l), shape.out(l)});
      largest_layer = std::max(largest_layer, shape.out(l) * shape.in(l) + shape.out(l));
    }
    target_ =
        zero::Buffer<float, zero::cuda>(micro_rows * shape.widths.back(), zero::uninitialized);
    delta_ = zero::Buffer<float, zero::cuda>(micro_rows * widest, zero::uninitialized);
    previous_ = zero::Buffer<float, zero::cuda>(micro_rows * widest, zero::uninitialized);
    weights_ = zero::Buffer<float, zero::cuda>(largest_layer, zero::uninitialized);
    grads_ = zero::Buffer<float, zero::cuda>(largest_layer, zero::uninitialized);
  }

  template <class T>
  double micro_step(std::size_t first, std::size_t rows, History& h) {
    const mlp::Shape& shape = f_.shape;
    const std::size_t layers = shape.layers();
    const cudaStream_t stream = compute_.stream();
    started_.record(stream);
    model_.gather_rows(x_.data(), data_.rows, data_.inputs, first, rows, act_[0].data());
    model_.gather_rows(y_.data(), data_.rows, data_.outputs, first, rows, target_.data());
    for (std::size_t l = 0; l < layers; ++l) {
      const zero::LayerParameters p = engine_.acquire(l); // stage 3: gathered, ready on the stream
      const float* w = widen<T>(p);
      const std::size_t in = shape.in(l), out = shape.out(l);
      model_.linear_forward(act_[l].data(), w, w + out * in, pre_[l].data(), rows, in, out);
      if (l + 1 < layers)
        model_.activate(shape.activation, pre_[l].data(), act_[l + 1].data(), rows * out);
    }
    forward_done_.record(stream);
    ZERO_CHECK_CUDA(cudaMemsetAsync(loss_.data(), 0, sizeof(double), stream));
    model_.loss_and_gradient(shape.loss, pre_[layers - 1].data(), target_.data(), delta_.data(),
                             rows, shape.widths.back(), static_cast<float>(engine_.loss_scale()),
                             loss_.data());
    for (std::size_t l = layers; l-- > 0;) {
      const zero::LayerParameters p = engine_.acquire(l);
      const float* w = widen<T>(p);
      const std::size_t in = shape.in(l), out = shape.out(l);
      model_.linear_backward(act_[l].data(), w, delta_.data(), grads_.data(),
                             grads_.data() + out * in, l > 0 ? previous_.data() : nullptr, rows, in,
                             out);
      // fp32 gradients rounded into the engine's buffer, on the stream; the reduction that
      // grads_ready starts is ordered after them.
      const std::size_t numel = out * in + out;
      const zero::View<T, zero::cuda> g = engine_.template gradients<T>(l);
      zero::convert(compute_, zero::View<const float, zero::cuda>(grads_.data(), numel),
                    g.first(numel));
      engine_.grads_ready(l);
      if (l > 0) {
        model_.activation_backward(shape.activation, pre_[l - 1].data(), act_[l].data(),
                                   previous_.data(), rows * in);
        std::swap(delta_, previous_);
      }
    }
    backward_done_.record(stream);
    zero::copy(compute_, zero::View<const double, zero::cuda>(loss_.view()), loss_host_.view());
    compute_.fence(); // the loss, for the step's line; the GPU's times of forward and backward
    h.forward_seconds += forward_done_.seconds_since(started_);
    h.backward_seconds += backward_done_.seconds_since(forward_done_);
    return loss_host_[0];
  }

  // Device memory after the run's first step and after its last: what a test checks stays flat.
  void after_step(int /*step*/) {
    after_last_step_ = device_bytes_in_use();
    if (after_first_step_ == 0) after_first_step_ = after_last_step_;
  }
  std::size_t after_first_step() const noexcept { return after_first_step_; }
  std::size_t after_last_step() const noexcept { return after_last_step_; }

 private:
  // The host's values in device memory, there for the compute stream's work once this returns
  // (from pageable memory CUDA may return before the copy lands: the stream is waited for).
  zero::Buffer<float, zero::cuda> upload(const std::vector<float>& host) const {
    zero::Buffer<float, zero::cuda> device(host.size(), zero::uninitialized);
    zero::copy(compute_, zero::View<const float>(host), device.view());
    compute_.fence(); // once, at construction; never in a step
    return device;
  }

  // The layer's weights in float for cuBLAS, on the stream.
  template <class T>
  const float* widen(const zero::LayerParameters& p) {
    const zero::View<const T, zero::cuda> values = p.values<T, zero::cuda>();
    zero::convert(compute_, values, weights_.view().first(values.size()));
    return weights_.data();
  }

  Engine& engine_;
  const Flags& f_;
  const Dataset& data_;
  zero::CudaStreamSpace compute_;
  mlp::DeviceModel model_;
  zero::Buffer<float, zero::cuda> x_, y_; // the whole dataset
  std::size_t after_first_step_ = 0, after_last_step_ = 0;
  std::vector<zero::Buffer<float, zero::cuda>> pre_, act_; // per layer: z, and the layer's input
  zero::Buffer<float, zero::cuda> target_, delta_, previous_, weights_, grads_;
  zero::Buffer<double, zero::cuda> loss_{1};
  zero::Buffer<double, zero::pinned_host> loss_host_{1};
  TimingEvent started_, forward_done_, backward_done_;
};

template <class Plan, class Where, class Comm, class Optimizer>
History run_on_gpu_with(zero::MpiCommunicator& world, Comm& comm, const GpuStreams& streams,
                        const Flags& f, const Dataset& data, InitialWeights& init,
                        Optimizer optimizer) {
  using Engine = zero::Engine<Plan, Comm, Where, Optimizer, AnyLossScaler, GpuComputeTypes>;
  const std::size_t before = device_bytes_in_use();
  Engine engine(world, comm, f.shape.specs(), std::move(optimizer), make_scaler(f),
                engine_options(f), streams.compute());
  for (std::size_t l = 0; l < engine.layers(); ++l)
    engine.set_layer(l, init.layer(l));
  const std::size_t micro_rows = f.batch / std::size_t(f.grad_accum) / std::size_t(world.size());
  DeviceMlp<Engine> model(engine, f, data, streams.compute(), micro_rows);
  ZERO_CHECK_CUDA(cudaStreamSynchronize(streams.compute().stream()));
  const std::size_t built = device_bytes_in_use();
  History h = train(world, f, engine, data, model);
  h.device_before = before;
  h.device_built = built;
  h.device_first_step = model.after_first_step();
  h.device_last_step = model.after_last_step();
  return h;
}

// Builds the communicator the ranks can use and trains with the model states on the GPU (Where:
// all of them, or all but the optimizer's).
template <class Plan, class Where = OnTheGpu>
History run_on_gpu(zero::MpiCommunicator& world, const Flags& f, const Dataset& data,
                   InitialWeights& init) {
  const GpuPlace place = place_on_gpu(world);
  // `--communicator nccl` is taken at its word: where a launcher shows each rank only its own
  // GPU (CUDA_VISIBLE_DEVICES per rank), the node's ranks outnumber the devices a rank sees, yet
  // each has one of its own; NCCL itself refuses ranks that share one.
  const bool nccl = f.communicator == "nccl" || (f.communicator == "auto" && place.own_gpu);
  const GpuStreams streams;
  cudaDeviceProp properties{};
  ZERO_CHECK_CUDA(cudaGetDeviceProperties(&properties, place.device));
  History h = zero::with_optimizer_on<Where>(examples::optimizer_config(f), [&](auto optimizer) {
    if (nccl) {
      zero::NcclCommunicator comm(world, place.device);
      return run_on_gpu_with<Plan, Where>(world, comm, streams, f, data, init,
                                          std::move(optimizer));
    }
    StagedOverMpi comm(zero::MpiCommunicator(world.boost_communicator()), streams.caller(),
                       streams.transfer());
    return run_on_gpu_with<Plan, Where>(world, comm, streams, f, data, init, std::move(optimizer));
  });
  h.device_name = properties.name;
  h.device_communicator = nccl ? "NCCL" : "staged through pinned host memory over MPI";
  return h;
}

// ZeRO-Offload's engines for a stage: the optimizer states in host memory, or on NVMe; at stage 3
// the parameter shards in host memory with them (--offload-param), or on NVMe (--nvme-params).
template <class Plan>
History run_offloaded_on_gpu(zero::MpiCommunicator& world, const Flags& f, const Dataset& data,
                             InitialWeights& init) {
  if constexpr (Plan::parameters) {
#if ZERO_TRAIN_MLP_NVME
    if (f.parameters_on_nvme)
      return run_on_gpu<Plan, ParametersOnNvmeBesideGpu>(world, f, data, init);
#endif
    if (f.parameters_on_cpu) {
      if (!f.optimizer_on_nvme)
        return run_on_gpu<Plan, ParametersOffloadedToCpu>(world, f, data, init);
#if ZERO_TRAIN_MLP_NVME
      return run_on_gpu<Plan, ParametersOffloadedBesideNvme>(world, f, data, init);
#endif
    }
  }
  if (f.optimizer_on_nvme) {
#if ZERO_TRAIN_MLP_NVME
    return run_on_gpu<Plan, OffloadedToNvme>(world, f, data, init);
#else
    zero::fail(zero::ErrorKind::unsupported,
               "this train_mlp was built without the NVMe tier (liburing was not found)");
#endif
  }
  return run_on_gpu<Plan, OffloadedToCpu>(world, f, data, init);
}

} // namespace train
