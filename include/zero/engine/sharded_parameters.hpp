#pragma once
// ShardedParameters<T, K, Comm, Exec>: the compute copy of ZeRO stage 3 (K: sharded,
// engine/kept.hpp), of which each rank keeps only its block of every layer. acquire() gathers a
// layer for as long as its handle lives (gather/parameter_gather.hpp, which also prefetches the
// next layer); the step writes this rank's blocks in place and refreshes the layers that stay
// gathered. Over a stream space the gathered layers are unpacked in stream order; since forward and
// backward read them from the host (the memory is host-accessible), acquire() returns once that has
// run.

#include "zero/comm/communicator.hpp"
#include "zero/engine/kept.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/report.hpp"
#include "zero/gather/parameter_gather.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/sharded_tensor.hpp"

#include "zero/core/execution_space.hpp"
#include "zero/core/stream_space.hpp"

#include <cstddef>

namespace zero {

template <Element T, KeptState K, GatheringCommunicator Comm, ExecutionSpace Exec = HostThreads>
requires(K::sharded&& HostAccessibleSpace<typename K::space>) class ShardedParameters {
  using Tensor = ShardedTensor<T, typename K::policy>;
  using Gather = ParameterGather<T, Comm, Exec>;

 public:
  ShardedParameters(Comm& shard, const ModelLayout& model, const EngineOptions& options,
                    Comm* hpz = nullptr, Exec exec = {})
      : model_(model), exec_(exec), shard_(shard, model.sharded),
        gather_(shard, *model.sharded, model.images,
                typename Gather::Limits{options.persistence_threshold, options.prefetch_elements,
                                        options.max_live_elements, options.max_reuse_distance},
                options.weight_quantization(), hpz, exec) {}

  // Layer l's weights, its parameters in order: this rank keeps its block. Collective when the
  // layer stays gathered.
  void set_layer(std::size_t l, View<const float> values) {
    gather_.invalidate(blocks_, l);
    model_.pack_my_block(l, values.data(), shard_.block(l).data());
    if (gather_.persistent(l)) gather_.refresh_persistent(blocks_);
  }

  LayerParameters acquire(std::size_t l) {
    LayerParameters held(*model_.sharded, l, gather_.acquire(blocks_, l),
                         [this](std::size_t layer) { gather_.release(layer); });
    if constexpr (StreamSpace<Exec>) { // the host reads it: after the queued unpacking
      typename Exec::event_type unpacked;
      record(exec_, unpacked);
      unpacked.synchronize();
    }
    return held;
  }

  View<T> update_target(std::size_t l) { return shard_.block(l); }
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
