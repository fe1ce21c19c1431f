#pragma once
// OffloadedParameters<T, K, Comm, Exec>: stage 3's compute copy kept in host memory beside a device
// stream space (ZeRO-Infinity's offload_param with device "cpu"): Placement<execute_on<Device>,
// parameters_in<pinned_host>, optimizer_states_in<pinned_host>>. Each rank keeps its block of
// every layer in host memory (pinned, so that its copies run asynchronously); acquire() copies the
// block to the device and all-gathers the layer there (offload/device_staged_blocks.hpp says why on
// the device), in the order the last step acquired the layers and within the live and prefetch
// bounds of ParameterGather (DeepSpeed's stage3_max_live_parameters and
// stage3_prefetch_bucket_size), and the gathered layer lives in device memory until released. No
// parameter block stays in device memory: the device holds the gathered layers, the layers kept
// gathered (persistence threshold), and the blocks on their way.
//
// The step writes this rank's new blocks straight into their host memory: the offloaded optimizer
// store (offload/offloaded_optimizer_store.hpp), whose update runs on the host, copies each
// layer's new compute copy from its staging into update_target(l), a host-to-host copy on the
// engine's stream, and nothing of it goes through device memory.
//
// A program whose placement offloads the parameters includes this header beside the offloaded
// optimizer store's:
//
//   #include <zero/offload/offloaded_optimizer_store.hpp>
//   #include <zero/offload/offloaded_parameters.hpp>
//   using Where = zero::Placement<zero::execute_on<zero::CudaStreamSpace>,
//                                 zero::parameters_in<zero::pinned_host>,
//                                 zero::optimizer_states_in<zero::pinned_host>>;

#include "zero/comm/communicator.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/engine/kept.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/model_states.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/report.hpp"
#include "zero/gather/parameter_gather.hpp"
#include "zero/offload/device_staged_blocks.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/sharded_tensor.hpp"

#include <cstddef>

namespace zero {

template <Element T, KeptState K, GatheringCommunicator Comm, SideStreams Exec>
requires K::sharded && HostAccessibleSpace<typename K::space> &&
    (!Exec::memory_space::host_accessible) class OffloadedParameters {
  using Tensor = ShardedTensor<T, typename K::policy>;
  using Gather = ParameterGather<T, Comm, Exec>;
  using Blocks = DeviceStagedBlocks<T, ShardBlocks<Tensor>, Exec>;
  using DeviceMemory = typename Exec::memory_space;
  using HostMemory = HandedOutMemory<typename K::space>;

 public:
  OffloadedParameters(Comm& shard, const ModelLayout& model, const EngineOptions& options,
                      Comm* hpz = nullptr, Exec exec = {})
      : model_(model), exec_(exec),
        shard_(model.sharded, layout_agreed, static_cast<int>(shard.rank()),
               static_cast<int>(shard.size())),
        blocks_(host_blocks_, model.my_block_sizes(), exec),
        gather_(shard, *model.sharded, model.images,
                typename Gather::Limits{options.persistence_threshold, options.prefetch_elements,
                                        options.max_live_elements, options.max_reuse_distance},
                options.weight_quantization(), hpz, exec) {}

  OffloadedParameters(const OffloadedParameters&) = delete;
  OffloadedParameters& operator=(const OffloadedParameters&) = delete;

  // Layer l's weights, its parameters in order: this rank keeps its block, written on the host
  // once nothing queued reads or writes it (a gather of l, and its copy, completed; other layers'
  // gathers in flight keep their blocks). Collective when the layer stays gathered.
  void set_layer(std::size_t l, View<const float> values) {
    gather_.invalidate(blocks_, l);
    exec_.fence(); // a step's copies into the blocks
    model_.pack_my_block(l, values.data(), shard_.block(l).data());
    blocks_.host_written(exec_);
    if (gather_.persistent(l)) gather_.refresh_persistent(blocks_);
  }

  LayerParameters acquire(std::size_t l) {
    return LayerParameters(*model_.sharded, l, handed_out(gather_.acquire(blocks_, l)),
                           [this](std::size_t layer) { gather_.release(layer); });
  }

  // Where the step writes the new values of this rank's block of layer l: host memory.
  View<T, HostMemory> update_target(std::size_t l) { return handed_out(shard_.block(l)); }
  void layer_updated(std::size_t) {}
  void require_nothing_acquired() const { gather_.require_nothing_acquired(); }
  void begin_update() {
    gather_.begin_update(blocks_);
    blocks_.drop();
  }
  void end_update() {
    blocks_.host_written(exec_);
    gather_.refresh_persistent(blocks_);
  }
  void end_step() { gather_.end_step(); }

  // The blocks in host memory and the layers kept gathered in device memory.
  StateBytes parameter_bytes() const noexcept {
    return {shard_.bytes_resident() + gather_.persistent_bytes(), 0};
  }
  IoStats nvme_traffic() const noexcept { return {}; }
  // Device memory: the gathered layers' pool and the blocks on their way.
  std::size_t buffer_bytes() const noexcept {
    return gather_.pool_bytes() + blocks_.buffer_bytes();
  }
  double gather_exposed_seconds() const noexcept { return gather_.exposed_seconds(); }
  GatherCounts gather_counts() const noexcept { return gather_.counts(); }
  // The blocks' way to the device (the tests reach its copy stream).
  Blocks& blocks() noexcept { return blocks_; }

 private:
  const ModelLayout& model_;
  Exec exec_;
  Tensor shard_;
  ShardBlocks<Tensor> host_blocks_{shard_};
  Blocks blocks_;
  Gather gather_;
};

namespace detail {
// The engine's parameter store for stage 3's shards in host memory beside a device space.
template <Element T, KeptState K, KeptState Updated, Communicator Comm, ExecutionSpace Exec>
requires parameters_streamed_from<typename K::space, Exec>
struct parameter_store_for<T, K, Updated, Comm, Exec, true> {
  using type = OffloadedParameters<T, K, Comm, Exec>;
};
} // namespace detail

} // namespace zero
