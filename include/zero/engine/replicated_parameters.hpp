#pragma once
// ReplicatedParameters<T, Updated, Comm, Space>: the compute copy of ZeRO stages 0-2, which every
// rank keeps whole (a replica: each layer's parameters in order). acquire() is a view of it. The
// step writes what this rank updated: stage 0 all of it; stages 1/2 its block of each layer, which
// an all-gather then shares, launched as soon as the layer is updated and waited for only when the
// layer is next acquired, so the gathers overlap the rest of the update and the next forward.
// Where a layer's image is its parameters in order (FlatContiguous), the gather runs in place;
// other layouts gather into a staging image and unpack it. A layer larger than the gather bucket
// (allgather_bucket_elements) is gathered as several collectives over pieces of its image.

#include "zero/comm/communicator.hpp"
#include "zero/engine/kept.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/report.hpp"
#include "zero/shard/layer_gather.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/sharded_tensor.hpp"

#include <chrono>
#include <cstddef>
#include <optional>
#include <vector>

namespace zero {

// Updated: how the optimizer states are kept, which says what the step updates here (sharded: this
// rank's block of each layer, then shared; not: all of it).
template <Element T, KeptState Updated, GatheringCommunicator Comm, HostAccessibleSpace Space>
class ReplicatedParameters {
  using Tensor = ShardedTensor<T, ReplicatedIn<Space>>;

 public:
  ReplicatedParameters(Comm& shard, const ModelLayout& model, const EngineOptions& options,
                       Comm* /*hpz: refused below*/ = nullptr)
      : comm_(shard), model_(model), copy_(shard, model.replica),
        gather_bucket_(options.allgather_bucket_elements), gathers_(model.layers()),
        holders_(model.layers(), 0) {
    require(options.hpz_partition_size == 1,
            "engine: hpz_partition_size (zero_hpz_partition_size, ZeRO++'s hpZ) cuts stage 3's "
            "weights a second time, and this plan keeps whole parameters on every rank; use "
            "stage 3");
    require(!options.quantized_weights,
            "engine: quantized_weights (zero_quantized_weights, ZeRO++'s qwZ) quantizes stage 3's "
            "parameter gathers, and this plan keeps whole parameters on every rank; use stage 3");
    if constexpr (Updated::sharded)
      if (!model.images.all_in_order()) staging_.emplace(shard, model.replica);
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
    convert_n(values.data(), copy_.block(l).data(), values.size());
  }

  // A view of layer l's weights; handles may be kept across step(), which then completes their
  // layers' gathers before it returns.
  LayerParameters acquire(std::size_t l) {
    const auto start = std::chrono::steady_clock::now();
    if (finish_gather(l))
      exposed_seconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++holders_[l];
    return LayerParameters(*model_.sharded, l, View<const T>(values(l)),
                           [this](std::size_t layer) { --holders_[layer]; });
  }

  // Where the step writes the new values of what this rank updates of layer l.
  View<T> update_target(std::size_t l) {
    if constexpr (!Updated::sharded) {
      return copy_.block(l);
    } else {
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
      for (std::size_t l = 0; l < gathers_.size(); ++l)
        gathers_[l] = gather_layer_image_in_pieces(
            comm_, *model_.sharded, l, View<const T>(update_target(l)), image(l), gather_bucket_);
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
  View<T> values(std::size_t l) { return copy_.block(l).first(model_.sharded->layer(l).numel); }
  // Layer l's image: the copy itself where it is in order.
  View<T> image(std::size_t l) {
    return model_.images.in_order(l) ? copy_.block(l) : staging_->block(l);
  }
  // Completes layer l's gather, if one is in flight; tells whether there was one.
  bool finish_gather(std::size_t l) {
    if (gathers_[l].empty()) return false;
    for (Work& piece : gathers_[l])
      piece.wait();
    gathers_[l].clear();
    if (!model_.images.in_order(l))
      model_.images.unpack(l, staging_->block(l).data(), copy_.block(l).data());
    return true;
  }

  Comm& comm_;
  const ModelLayout& model_;
  Tensor copy_;
  std::optional<Tensor> staging_;          // layers whose image is not in order (stages 1/2)
  std::size_t gather_bucket_;              // elements per gather collective at most
  std::vector<std::vector<Work>> gathers_; // per layer: its pieces in flight
  std::vector<int> holders_;
  double exposed_seconds_ = 0; // acquire() waited for a gather the step launched
};

} // namespace zero
