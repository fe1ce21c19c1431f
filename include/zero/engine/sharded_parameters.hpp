#pragma once
// ShardedParameters<T, K, Comm, Exec>: the compute copy of ZeRO stage 3 (K: sharded,
// engine/kept.hpp), of which each rank keeps only its block of every layer. acquire() gathers a
// layer for as long as its handle lives (gather/parameter_gather.hpp, which also prefetches the
// next layer); the step writes this rank's blocks in place and refreshes the layers that stay
// gathered.
//
// Over a stream space (Exec) the blocks may live in the space's memory (device memory over
// CudaStreamSpace, device_twin over DeviceTwinSpace), and so do the gathered layers: acquire()
// hands forward and backward a view in that memory once the gather's collective completed,
// without waiting for the unpacking of an out-of-order image (forward's kernels are queued after
// it), the step writes the blocks with work on the stream, and set_layer stages a block through
// the host (a cold path). Over a stream space in host memory, forward and backward read the layers
// from the host, so acquire() returns once the queued unpacking has run.

#include "zero/comm/communicator.hpp"
#include "zero/engine/detail/host_staging.hpp"
#include "zero/engine/kept.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/report.hpp"
#include "zero/gather/parameter_gather.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/sharded_tensor.hpp"

#include "zero/core/dropped_waits.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/stream_space.hpp"

#include <concepts>
#include <cstddef>

namespace zero {

template <Element T, KeptState K, GatheringCommunicator Comm, ExecutionSpace Exec = HostThreads>
requires K::sharded &&
    ((HostAccessibleSpace<typename K::space> && HostAccessibleSpace<typename Exec::memory_space>) ||
     (StreamSpace<Exec> &&
      std::same_as<typename K::space, typename Exec::memory_space>)) class ShardedParameters {
  using Tensor = ShardedTensor<T, typename K::policy>;
  using Gather = ParameterGather<T, Comm, Exec>;
  using ViewMemory = HandedOutMemory<typename K::space>; // of the views handed out

 public:
  ShardedParameters(Comm& shard, const ModelLayout& model, const EngineOptions& options,
                    Comm* hpz = nullptr, Exec exec = {})
      : model_(model), exec_(exec), shard_(shard, model.sharded, layout_agreed),
        gather_(shard, *model.sharded, model.images,
                typename Gather::Limits{options.persistence_threshold, options.prefetch_elements,
                                        options.max_live_elements, options.max_reuse_distance},
                options.weight_quantization(), hpz, exec) {}

  // Layer l's weights, its parameters in order: this rank keeps its block. Collective when the
  // layer stays gathered.
  void set_layer(std::size_t l, View<const float> values) {
    gather_.invalidate(blocks_, l);
    detail::write_on_host(exec_, shard_.block(l), [&](View<T> block) {
      model_.pack_my_block(l, values.data(), block.data());
    });
    if (gather_.persistent(l)) gather_.refresh_persistent(blocks_);
  }

  LayerParameters acquire(std::size_t l) {
    LayerParameters held(*model_.sharded, l, handed_out(gather_.acquire(blocks_, l)),
                         [this](std::size_t layer) { gather_.release(layer); });
    if constexpr (StreamSpace<Exec> && ViewMemory::host_accessible) {
      // The host reads it: after the queued unpacking.
      typename Exec::event_type unpacked;
      record(exec_, unpacked);
      if (!detail::wait_dropped("sharded_parameters.unpacked")) unpacked.synchronize();
    }
    return held;
  }

  // Where the step writes the new values of this rank's block of layer l.
  View<T, ViewMemory> update_target(std::size_t l) { return handed_out(shard_.block(l)); }
  void layer_updated(std::size_t) {}
  void require_nothing_acquired() const { gather_.require_nothing_acquired(); }
  void begin_update() { gather_.begin_update(blocks_); }
  void end_update() { gather_.refresh_persistent(blocks_); }
  void end_step() { gather_.end_step(); }

  StateBytes parameter_bytes() const noexcept {
    return {shard_.bytes_resident() + gather_.persistent_bytes(), 0};
  }
  IoStats nvme_traffic() const noexcept { return {}; } // nothing on NVMe
  std::size_t buffer_bytes() const noexcept { return gather_.pool_bytes(); }
  double gather_exposed_seconds() const noexcept { return gather_.exposed_seconds(); }
  GatherCounts gather_counts() const noexcept { return gather_.counts(); }

 private:
  const ModelLayout& model_;
  Exec exec_;
  Tensor shard_;
  ShardBlocks<Tensor> blocks_{shard_};
  Gather gather_;
};

} // namespace zero
