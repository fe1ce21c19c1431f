#pragma once
// NvmeParameters<T, K, Comm, Exec>: stage 3's compute copy with this rank's blocks on the NVMe tier
// (offload_param.device = "nvme"). The first layers whose blocks add up to at most max_in_cpu
// elements stay in memory, as DeepSpeed's max_in_cpu says; the others live in a swap file.
// acquire() gathers a layer as the in-memory store does, reading its block through one of
// `buffer_count` bounce buffers, each sized to the rank's largest block (`buffer_size` is the
// most a buffer may hold). The optimizer step writes each updated block through a staging buffer,
// asynchronously: one is filled while the one before it is written (beside a device a third holds
// the layer ZeRO-Offload's step has updated but not handed on yet, one layer behind).
//
// Over a host execution space the tier gathers on the host thread, the next block read ahead of
// use. Beside a device stream space (ZeRO-Infinity on the GPU: GPU <- pinned host <- NVMe), the
// block read into its bounce buffer is copied to the device and gathered there, as the blocks in
// host memory are (offload/device_staged_blocks.hpp); the bounce buffer goes back once that gather
// completed. The ranks then agree on what can fail on one of them over `control`, the engine's
// host communicator, since a communicator of device memory cannot move the host's messages.

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
#include "zero/offload/device_staged_blocks.hpp"
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
#include <type_traits>
#include <vector>

namespace zero {

namespace detail {
// Beside a device, the NVMe reads copied to the device (DeviceStagedBlocks); nothing otherwise.
struct no_staged_blocks {
  template <class... Args>
  explicit no_staged_blocks(Args&&... /*unused*/) {}
};
template <class T, class Reads, class Exec, bool beside_device>
struct staged_nvme_blocks {
  using type = no_staged_blocks;
};
template <class T, class Reads, class Exec>
struct staged_nvme_blocks<T, Reads, Exec, true> {
  using type = DeviceStagedBlocks<T, Reads, Exec>;
};
} // namespace detail

template <Element T, KeptState K, GatheringCommunicator Comm, ExecutionSpace Exec = HostThreads>
class NvmeParameters {
  static_assert(K::sharded, "zero: parameters on NVMe are stage 3's shards");
  static_assert(std::same_as<typename K::space, nvme>);
  using Tensor = ShardedTensor<T, typename K::policy>;
  static constexpr bool beside_device = !Exec::memory_space::host_accessible;
  using GatherExec = std::conditional_t<beside_device, Exec, HostThreads>;
  using Gather = ParameterGather<T, Comm, GatherExec>;
  using Reads = NvmeBlocks<T, Tensor>;
  using Staged = typename detail::staged_nvme_blocks<T, Reads, Exec, beside_device>::type;
  static constexpr std::size_t unit = NvmeSlice<T>::unit_elements;
  // One being filled and one being written; beside a device a third, for the layer the offloaded
  // store has updated but not yet handed on (it hands a layer on one layer late).
  static constexpr std::size_t staging_buffers = beside_device ? 3 : 2;

 public:
  // Over a host space the tier gathers on the host thread, whatever the engine's space (`exec` is
  // not used).
  NvmeParameters(Comm& shard, const ModelLayout& model, const EngineOptions& options,
                 Comm* hpz = nullptr, Exec exec = {}) requires(!beside_device)
      : NvmeParameters(shard, shard, model, options, hpz, exec) {}
  // Beside a device: `control`, a host communicator of the same ranks, agrees what can fail.
  template <class Control>
  NvmeParameters(Comm& shard, Control& control, const ModelLayout& model,
                 const EngineOptions& options, Comm* hpz, Exec exec)
      : model_(model),
        // What can fail on one rank only is agreed, so that the others do not go on to wait in a
        // collective (see nvme_optimizer_store.hpp).
        tier_(agreed(control, "opening the parameters' swap directory",
                     [&] {
                       return NvmeTier(detail::tier_options(
                                           options.nvme, options.nvme.parameters.nvme_path,
                                           "parameters", "parameters", "nvme.parameters.nvme_path"),
                                       model.world_rank);
                     })),
        shard_(control, model.sharded, typename K::policy{.space = {&tier_, "parameters"}}),
        in_memory_(
            agreed(control, "allocating the parameter blocks kept in memory",
                   [&] { return keep_in_memory(model, options.nvme.parameters.max_in_cpu); })),
        buffer_elements_(agreed(
            control, "sizing the parameters' buffers",
            [&] { return checked_buffer_size(model, options.nvme.parameters.buffer_size); })),
        reads_(shard_, memory_blocks(),
               agreed(control, "allocating the parameters' read buffers",
                      [&] {
                        return tier_.make_bounce_buffers(options.nvme.parameters.buffer_count,
                                                         buffer_elements_ * sizeof(T));
                      })),
        staged_(reads_, model.my_block_sizes(), exec),
        staging_(agreed(control, "allocating the parameters' staging buffers",
                        [&] {
                          return tier_.make_bounce_buffers(staging_buffers,
                                                           buffer_elements_ * sizeof(T));
                        })),
        gather_(shard, *model.sharded, model.images,
                typename Gather::Limits{options.persistence_threshold, options.prefetch_elements,
                                        options.max_live_elements, options.max_reuse_distance},
                options.weight_quantization(), hpz, gather_exec(exec)) {
    // Every block starts at zero, as in memory, until set_layer.
    agreed(control, "writing the parameters' initial blocks", [&] {
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
    gather_.invalidate(blocks(), l);
    reads_.release(l); // a block read ahead would be stale
    const View<T> block = update_target(l);
    model_.pack_my_block(l, values.data(), block.data());
    layer_updated(l);
    finish_writes();
    if (gather_.persistent(l)) gather_.refresh_persistent(blocks());
  }

  LayerParameters acquire(std::size_t l) {
    return LayerParameters(*model_.sharded, l, handed_out(gather_.acquire(blocks(), l)),
                           [this](std::size_t layer) { gather_.release(layer); });
  }

  // Where the step writes layer l's new block: memory, or a staging buffer written to disk when
  // the layer is done (layer_updated). Beside a device two layers may be open at once.
  View<T> update_target(std::size_t l) {
    const std::size_t n = model_.sharded->block(l, model_.rank).size();
    if (in_memory_[l]) return in_memory_[l]->view();
    if (n == 0) return {}; // nothing of the layer on this rank: nothing to write
    return {reinterpret_cast<T*>(staging_[staging_of(l)].data()), n};
  }
  void layer_updated(std::size_t l) {
    if (in_memory_[l]) return;
    for (std::size_t b = 0; b < staging_buffers; ++b)
      if (open_[b] == l) {
        writes_[b] = write_block(l, b);
        open_[b].reset();
      }
  }
  void require_nothing_acquired() const { gather_.require_nothing_acquired(); }
  void begin_update() {
    open_.fill(std::nullopt); // a layer an update that failed left open (a corrupt checkpoint)
    gather_.begin_update(blocks());
    if constexpr (beside_device) staged_.drop();
    reads_.drop_reads();
  }
  void end_update() {
    finish_writes();
    gather_.refresh_persistent(blocks());
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
  // The gathered layers' pool and the blocks on their way (in the engine's memory), the read and
  // staging buffers (in host memory).
  std::size_t buffer_bytes() const noexcept {
    std::size_t staged = 0;
    if constexpr (beside_device) staged = staged_.buffer_bytes();
    return gather_.pool_bytes() + staged + reads_.buffer_bytes() +
           staging_.count() * staging_.bytes();
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
  // The staging buffer layer l's new block is written into: the one it opened, or the next one
  // not open, in turn, so that the write waited for is the one queued longest ago.
  std::size_t staging_of(std::size_t l) {
    for (std::size_t b = 0; b < staging_buffers; ++b)
      if (open_[b] == l) return b;
    for (std::size_t tried = 0; tried < staging_buffers; ++tried) {
      staging_in_use_ = (staging_in_use_ + 1) % staging_buffers;
      const std::size_t b = staging_in_use_;
      if (open_[b]) continue;
      if (writes_[b].pending()) writes_[b].wait();
      open_[b] = l;
      return b;
    }
    fail(ErrorKind::invalid_argument,
         "NVMe parameters: layer " + std::to_string(l) + "'s block opened while " +
             std::to_string(staging_buffers) +
             " layers wait to be written, the most the staging buffers hold");
  }
  // The source the gather reads: the reads themselves, or their copies to the device.
  auto& blocks() noexcept {
    if constexpr (beside_device)
      return staged_;
    else
      return reads_;
  }
  static GatherExec gather_exec(Exec exec) {
    if constexpr (beside_device)
      return exec;
    else
      return {};
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
  Reads reads_;
  [[no_unique_address]] Staged staged_; // beside a device only
  BounceBuffers staging_;
  std::array<Work, staging_buffers> writes_{};
  std::array<std::optional<std::size_t>, staging_buffers> open_{}; // the layer each one holds
  std::size_t staging_in_use_ = 0;
  Gather gather_;
};

} // namespace zero
