#pragma once
// NvmeParameters<T, Plan, Comm>: stage 3's compute copy with this rank's blocks on the NVMe tier
// (offload_param.device = "nvme"). The first layers whose blocks add up to at most max_in_cpu
// elements stay in memory, as DeepSpeed's max_in_cpu says; the others live in a swap file.
// acquire() gathers a layer as the in-memory store does, reading its block through one of
// `buffer_count` bounce buffers, each sized to the rank's largest block (`buffer_size` is the
// most a buffer may hold), the next block read ahead of use. The
// optimizer step writes each updated block through a staging buffer, asynchronously.

#include "zero/comm/agreed.hpp"
#include "zero/comm/communicator.hpp"
#include "zero/core/buffer.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/engine/kept.hpp"
#include "zero/engine/layer_parameters.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/report.hpp"
#include "zero/gather/parameter_gather.hpp"
#include "zero/nvme/bounce_buffers.hpp"
#include "zero/nvme/nvme_slice.hpp"
#include "zero/nvme/nvme_tier.hpp"
#include "zero/offload/detail/tier_options.hpp"
#include "zero/offload/nvme_blocks.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/sharded_tensor.hpp"

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace zero {

template <Element T, KeptState K, GatheringCommunicator Comm>
class NvmeParameters {
  static_assert(K::sharded, "zero: parameters on NVMe are stage 3's shards");
  static_assert(std::same_as<typename K::space, nvme>);
  using Tensor = ShardedTensor<T, typename K::policy>;
  using Gather = ParameterGather<T, Comm>;
  static constexpr std::size_t unit = NvmeSlice<T>::unit_elements;
  static constexpr std::size_t staging_buffers = 2; // one being filled, one being written

 public:
  // `exec`, the engine's execution space, is not used: the tier gathers on the host thread (a
  // device space is refused with NVMe, stage/placement.hpp).
  template <ExecutionSpace Exec = HostThreads>
  NvmeParameters(Comm& shard, const ModelLayout& model, const EngineOptions& options,
                 Comm* hpz = nullptr, Exec /*exec*/ = {})
      : model_(model),
        // What can fail on one rank only is agreed, so that the others do not go on to wait in a
        // collective (see nvme_optimizer_store.hpp).
        tier_(agreed(shard, "opening the parameters' swap directory",
                     [&] {
                       return NvmeTier(detail::tier_options(
                                           options.nvme, options.nvme.parameters.nvme_path,
                                           "parameters", "parameters", "nvme.parameters.nvme_path"),
                                       model.world_rank);
                     })),
        shard_(shard, model.sharded, typename K::policy{.space = {&tier_, "parameters"}}),
        in_memory_(
            agreed(shard, "allocating the parameter blocks kept in memory",
                   [&] { return keep_in_memory(model, options.nvme.parameters.max_in_cpu); })),
        buffer_elements_(agreed(
            shard, "sizing the parameters' buffers",
            [&] { return checked_buffer_size(model, options.nvme.parameters.buffer_size); })),
        blocks_(shard_, memory_blocks(),
                agreed(shard, "allocating the parameters' read buffers",
                       [&] {
                         return tier_.make_bounce_buffers(options.nvme.parameters.buffer_count,
                                                          buffer_elements_ * sizeof(T));
                       })),
        staging_(agreed(shard, "allocating the parameters' staging buffers",
                        [&] {
                          return tier_.make_bounce_buffers(staging_buffers,
                                                           buffer_elements_ * sizeof(T));
                        })),
        gather_(shard, *model.sharded, model.images,
                typename Gather::Limits{options.persistence_threshold, options.prefetch_elements,
                                        options.max_live_elements, options.max_reuse_distance},
                options.weight_quantization(), hpz) {
    // Every block starts at zero, as in memory, until set_layer.
    agreed(shard, "writing the parameters' initial blocks", [&] {
      std::memset(staging_[0].data(), 0, staging_[0].size());
      for (std::size_t l = 0; l < model.layers(); ++l)
        if (!in_memory_[l]) write_block(l, 0).wait();
    });
  }

  NvmeParameters(const NvmeParameters&) = delete;
  NvmeParameters& operator=(const NvmeParameters&) = delete;
  ~NvmeParameters() {
    for (Work& w : writes_)
      detail::wait_quietly(w); // the files go with the tier: an error here changes nothing
  }

  // Layer l's weights, its parameters in order: this rank keeps its block. Collective when the
  // layer stays gathered.
  void set_layer(std::size_t l, View<const float> values) {
    gather_.invalidate(blocks_, l);
    blocks_.release(l); // a block read ahead would be stale
    const View<T> block = update_target(l);
    model_.pack_my_block(l, values.data(), block.data());
    layer_updated(l);
    finish_writes();
    if (gather_.persistent(l)) gather_.refresh_persistent(blocks_);
  }

  LayerParameters acquire(std::size_t l) {
    return LayerParameters(*model_.sharded, l, gather_.acquire(blocks_, l),
                           [this](std::size_t layer) { gather_.release(layer); });
  }

  // Where the step writes layer l's new block: memory, or a staging buffer written to disk when
  // the layer is done.
  View<T> update_target(std::size_t l) {
    const std::size_t n = model_.sharded->block(l, model_.rank).size();
    if (in_memory_[l]) return in_memory_[l]->view();
    if (staged_layer_ != l) {
      next_staging();
      staged_layer_ = l;
    }
    return {reinterpret_cast<T*>(staging_[staging_in_use_].data()), n};
  }
  void layer_updated(std::size_t l) {
    if (in_memory_[l] || staged_layer_ != l) return;
    writes_[staging_in_use_] = write_block(l, staging_in_use_);
    staged_layer_.reset();
  }
  void require_nothing_acquired() const { gather_.require_nothing_acquired(); }
  void begin_update() {
    gather_.begin_update(blocks_);
    blocks_.drop_reads();
  }
  void end_update() {
    finish_writes();
    gather_.refresh_persistent(blocks_);
  }
  void end_step() { gather_.end_step(); }

  // A block kept in memory counts there only: the swap file keeps room for it, but never holds it.
  StateBytes parameter_bytes() const noexcept {
    std::size_t memory = gather_.persistent_bytes(), kept = 0;
    for (const auto& b : in_memory_)
      if (b) {
        memory += b->size_bytes();
        kept += NvmeSlice<T>::transfer_elements({0, b->size()}) * sizeof(T);
      }
    return {memory, shard_.bytes_stored() - kept};
  }
  IoStats nvme_traffic() const { return tier_.stats(); }
  std::size_t buffer_bytes() const noexcept {
    return gather_.pool_bytes() + blocks_.buffer_bytes() + staging_.count() * staging_.bytes();
  }
  double gather_exposed_seconds() const noexcept { return gather_.exposed_seconds(); }
  GatherCounts gather_counts() const noexcept { return gather_.counts(); }

 private:
  static std::vector<std::optional<Buffer<T>>> keep_in_memory(const ModelLayout& model,
                                                              std::size_t budget) {
    std::vector<std::optional<Buffer<T>>> kept(model.layers());
    std::size_t used = 0;
    for (std::size_t l = 0; l < model.layers(); ++l) {
      const std::size_t n = model.sharded->block(l, model.rank).size();
      if (used + n > budget) break;
      kept[l].emplace(n);
      used += n;
    }
    return kept;
  }
  static std::size_t checked_buffer_size(const ModelLayout& model, std::size_t buffer_size) {
    std::size_t largest = unit;
    std::size_t largest_layer = 0;
    for (std::size_t l = 0; l < model.layers(); ++l) {
      const std::size_t n =
          NvmeSlice<T>::transfer_elements({0, model.sharded->block(l, model.rank).size()});
      if (n > largest) {
        largest = n;
        largest_layer = l;
      }
    }
    require(buffer_size >= largest, "offload_param.buffer_size is " + std::to_string(buffer_size) +
                                        " elements, but layer " + std::to_string(largest_layer) +
                                        "'s block on rank " + std::to_string(model.rank) +
                                        " moves " + std::to_string(largest) +
                                        " elements at once; raise buffer_size to at least that");
    return largest;
  }
  std::vector<const Buffer<T>*> memory_blocks() const {
    std::vector<const Buffer<T>*> blocks;
    for (const auto& b : in_memory_)
      blocks.push_back(b ? &*b : nullptr);
    return blocks;
  }

  Work write_block(std::size_t l, std::size_t staging) {
    const Range all{0, model_.sharded->block(l, model_.rank).size()};
    return shard_.write(
        l, all,
        View<const T>(reinterpret_cast<const T*>(staging_[staging].data()), buffer_elements_));
  }
  // The staging buffer whose write finished longest ago.
  void next_staging() {
    staging_in_use_ = (staging_in_use_ + 1) % staging_buffers;
    if (writes_[staging_in_use_].pending()) writes_[staging_in_use_].wait();
  }
  void finish_writes() {
    for (Work& w : writes_)
      if (w.pending()) w.wait();
  }

  const ModelLayout& model_;
  NvmeTier tier_;
  Tensor shard_;
  std::vector<std::optional<Buffer<T>>> in_memory_;
  std::size_t buffer_elements_;
  NvmeBlocks<T, Tensor> blocks_;
  BounceBuffers staging_;
  std::array<Work, staging_buffers> writes_{};
  std::size_t staging_in_use_ = 0;
  std::optional<std::size_t> staged_layer_;
  Gather gather_;
};

} // namespace zero
