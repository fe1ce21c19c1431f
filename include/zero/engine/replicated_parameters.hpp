#pragma once
// ReplicatedParameters<T, Updated, Comm, Space>: the compute copy of ZeRO stages 0-2, which every
// rank keeps whole (a replica: each layer's parameters in order). acquire() is a view of it. The
// step writes what this rank updated: stage 0 all of it; stages 1/2 its block of each layer, which
// an all-gather then shares, launched as soon as the layer is updated and waited for only when the
// layer is next acquired, so the gathers overlap the rest of the update and the next forward.
// Where a layer's image is its parameters in order (FlatContiguous), the gather runs in place;
// other layouts gather into a staging image and unpack it. A layer larger than the gather bucket
// (allgather_bucket_elements) is gathered as several collectives over pieces of its image.
//
// Over a stream space (Exec) the copy may live in the space's memory (device memory over
// CudaStreamSpace, device_twin over DeviceTwinSpace): the step writes it with work on the stream,
// the gathers start after that work (a communicator ordered after a caller stream is pointed at
// Exec's while they launch), out-of-order images are unpacked along run tables on the stream, and
// acquire() hands forward and backward a view in that memory with no host wait (their kernels are
// queued after). set_layer stages a layer through the host (a cold path).

#include "zero/comm/communicator.hpp"
#include "zero/core/dropped_waits.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/run_table.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/engine/detail/host_staging.hpp"
#include "zero/engine/kept.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/report.hpp"
#include "zero/shard/layer_gather.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/sharded_tensor.hpp"

#include <chrono>
#include <concepts>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <vector>

namespace zero {

// Updated: how the optimizer states are kept, which says what the step updates here (sharded: this
// rank's block of each layer, then shared; not: all of it).
template <Element T, KeptState Updated, GatheringCommunicator Comm, MemorySpace Space,
          ExecutionSpace Exec = HostThreads>
requires HostAccessibleSpace<Space> ||
    (StreamSpace<Exec>&&
         std::same_as<Space, typename Exec::memory_space>)class ReplicatedParameters {
  using Tensor = ShardedTensor<T, ReplicatedIn<Space>>;
  using ViewMemory = HandedOutMemory<Space>; // of the views handed out and passed on

 public:
  ReplicatedParameters(Comm& shard, const ModelLayout& model, const EngineOptions& options,
                       Comm* /*hpz: refused below*/ = nullptr, Exec exec = {})
      : comm_(shard), model_(model), exec_(exec), copy_(shard, model.replica, layout_agreed),
        gather_bucket_(options.allgather_bucket_elements), gathers_(model.layers()),
        holders_(model.layers(), 0) {
    // The options were agreed before the stores are built: every rank refuses alike.
    require_on_every_rank(
        options.hpz_partition_size == 1,
        "engine: hpz_partition_size (zero_hpz_partition_size, ZeRO++'s hpZ) cuts stage 3's "
        "weights a second time, and this plan keeps whole parameters on every rank; use "
        "stage 3");
    require_on_every_rank(
        !options.quantized_weights,
        "engine: quantized_weights (zero_quantized_weights, ZeRO++'s qwZ) quantizes stage 3's "
        "parameter gathers, and this plan keeps whole parameters on every rank; use stage 3");
    if constexpr (Updated::sharded)
      if (!model.images.all_in_order()) {
        staging_.emplace(shard, model.replica, layout_agreed);
        if constexpr (!Space::host_accessible) {
          unpacking_.resize(model.layers());
          for (std::size_t l = 0; l < model.layers(); ++l)
            if (!model.images.in_order(l)) {
              std::vector<CopyRun> runs;
              model.images.append_unpack_runs(l, Range{0, model.sharded->layer(l).flat_numel}, 0, 0,
                                              runs);
              unpacking_[l] = RunTable<Space>(runs);
            }
        }
      }
  }
  ReplicatedParameters(const ReplicatedParameters&) = delete;
  ReplicatedParameters& operator=(const ReplicatedParameters&) = delete;
  ~ReplicatedParameters() {
    for (std::vector<Work>& pieces : gathers_)
      for (Work& w : pieces)
        detail::wait_quietly(w); // never leave a gather on freed buffers
  }

  // Layer l's weights, its parameters in order.
  void set_layer(std::size_t l, View<const float> values) {
    finish_gather(l);
    detail::write_on_host(exec_, copy_.block(l), [&](View<T> block) {
      convert_n(values.data(), block.data(), values.size());
    });
  }

  // A view of layer l's weights; handles may be kept across step(), which then completes their
  // layers' gathers before it returns.
  LayerParameters acquire(std::size_t l) {
    const auto start = std::chrono::steady_clock::now();
    if (finish_gather(l))
      exposed_seconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++holders_[l];
    return LayerParameters(*model_.sharded, l, View<const T, ViewMemory>(values(l)),
                           [this](std::size_t layer) { --holders_[layer]; });
  }

  // Where the step writes the new values of what this rank updates of layer l. No gather of the
  // layer is in flight once it is handed out: the gather writes the whole image, this rank's
  // block too, and a reader between steps (split masters read their high parts here) would race
  // with it.
  View<T, ViewMemory> update_target(std::size_t l) {
    if constexpr (!Updated::sharded) {
      return handed_out(copy_.block(l));
    } else {
      finish_gather(l);
      const Range mine = model_.my_flat_range(l);
      return image(l).subview(mine.begin, mine.size());
    }
  }
  void layer_updated(std::size_t) {}
  void begin_update() {
    for (std::size_t l = 0; l < gathers_.size(); ++l)
      finish_gather(l);
  }
  // Stages 1/2 share what every rank updated, layer by layer in forward's order. The gathers are
  // launched once the whole update is done (run alongside it, they would compete with it for
  // memory bandwidth) and overlap the next forward instead.
  void end_update() {
    if constexpr (Updated::sharded) {
      const CallerScope<Comm, Exec> caller( // after the step's writes
          detail::wait_dropped("replicated_parameters.caller") ? nullptr : &comm_, exec_);
      for (std::size_t l = 0; l < gathers_.size(); ++l)
        gathers_[l] = gather_layer_image_in_pieces(comm_, *model_.sharded, l,
                                                   View<const T, ViewMemory>(update_target(l)),
                                                   image(l), gather_bucket_);
      for (std::size_t l = 0; l < gathers_.size(); ++l)
        if (holders_[l] > 0) finish_gather(l); // a handle kept across the step reads it now
    }
  }
  void require_nothing_acquired() const {} // views may stay across the step
  void end_step() {}
  double gather_exposed_seconds() const noexcept { return exposed_seconds_; }
  GatherCounts gather_counts() const noexcept { return {}; } // every rank keeps every layer

  StateBytes parameter_bytes() const noexcept { return {copy_.bytes_resident(), 0}; }
  IoStats nvme_traffic() const noexcept { return {}; } // nothing on NVMe
  std::size_t buffer_bytes() const noexcept { return staging_ ? staging_->bytes_resident() : 0; }

 private:
  View<T, ViewMemory> values(std::size_t l) {
    return handed_out(copy_.block(l)).first(model_.sharded->layer(l).numel);
  }
  // Layer l's image: the copy itself where it is in order.
  View<T, ViewMemory> image(std::size_t l) {
    return handed_out(model_.images.in_order(l) ? copy_.block(l) : staging_->block(l));
  }
  // Completes layer l's gather, if one is in flight; tells whether there was one.
  bool finish_gather(std::size_t l) {
    if (gathers_[l].empty()) return false;
    for (Work& piece : gathers_[l])
      piece.wait();
    gathers_[l].clear();
    if (model_.images.in_order(l)) return true;
    if constexpr (Space::host_accessible)
      model_.images.unpack(l, staging_->block(l).data(), copy_.block(l).data());
    else // queued after the gather, which the host waited for
      convert_runs(exec_, View<const T, Space>(staging_->block(l)), values(l), unpacking_[l]);
    return true;
  }

  Comm& comm_;
  const ModelLayout& model_;
  Exec exec_;
  Tensor copy_;
  std::optional<Tensor> staging_;          // layers whose image is not in order (stages 1/2)
  std::vector<RunTable<Space>> unpacking_; // their unpacking, in device memory
  std::size_t gather_bucket_;              // elements per gather collective at most
  std::vector<std::vector<Work>> gathers_; // per layer: its pieces in flight
  std::vector<int> holders_;
  double exposed_seconds_ = 0;            // acquire() waited for a gather the step launched
  DrainOnDestruction<Exec> drain_{exec_}; // last: queued unpacking ends before the buffers go
};

} // namespace zero
