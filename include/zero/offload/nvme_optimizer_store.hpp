#pragma once
// NvmeOptimizerStore<Opt, Plan, Exec>: the optimizer store of ZeRO-Infinity on the host. This
// rank's fp32 master weights and optimizer moments live in swap files (sharded tensors on the
// NVMe tier); the only memory they take is `buffer_count` bounce slots, each holding one
// sub-group's master weights and moments, whatever the model's size.
//
// The step walks the sub-groups (SubGroupPlan) as a pipeline: while sub-group k is updated, k+1 is
// being read and k-1 written (pipeline_read / pipeline_write; without them each transfer is
// waited for). The update of a sub-group is the same fused pass as in memory, piece by piece, so
// the weights are bitwise those of the in-memory store.
//
// With 8-bit moments (EngineOptions::moments) Adam's moments are swapped as their codes
// (offload/nvme_blockwise_moments.hpp): 6 bytes per parameter each way instead of 12, and the
// sub-groups are cut on multiples of 4096 elements so that each part of the codes is whole units.
// The pass is BlockwiseMoments', so the weights are bitwise those of 8-bit moments in memory.
//
// With split master weights (EngineOptions::master) the masters' high parts are the compute copy
// in memory and only their residuals are swapped (offload/nvme_residuals.hpp): 1 or 2 bytes per
// parameter each way instead of 4, with 8-bit moments 3 or 4 bytes in all instead of 6. The pass
// is split_fused_step's, so the weights are bitwise those of split masters in memory.

#include "zero/comm/agreed.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/engine/kept.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/offload_options.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/report.hpp"
#include "zero/nvme/bounce_buffers.hpp"
#include "zero/nvme/nvme_slice.hpp"
#include "zero/nvme/nvme_tier.hpp"
#include "zero/offload/detail/tier_options.hpp"
#include "zero/offload/nvme_blockwise_moments.hpp"
#include "zero/offload/nvme_residuals.hpp"
#include "zero/offload/subgroup_plan.hpp"
#include "zero/optim/fused_step.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/optim/split_master.hpp"
#include "zero/optim/stream_step.hpp" // fused_step over HostStreamSpace
#include "zero/shard/layer_gather.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/sharded_tensor.hpp"

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace zero {

template <Optimizer Opt, KeptState K, ExecutionSpace Exec>
class NvmeOptimizerStore {
  static_assert(K::sharded, "zero: optimizer states on NVMe are sharded (stage 1-3)");
  static_assert(std::same_as<typename K::space, nvme>);
  using Tensor = ShardedTensor<float, typename K::policy>;
  static constexpr std::size_t states = Opt::state_tensors;
  static constexpr std::size_t tensors = 1 + states; // the master weights, then the moments
  // Where 8-bit moments can be swapped: Adam's, updated by the host's threads.
  static constexpr bool can_quantize =
      std::same_as<typename Opt::update_type, AdamUpdate> && !StreamSpace<Exec>;
  // Where split masters can be swapped: element-wise updates by the host's threads.
  static constexpr bool can_split =
      !TrustRatioUpdate<typename Opt::update_type> && !StreamSpace<Exec>;

 public:
  template <class Comm>
  NvmeOptimizerStore(Comm& shard, const ModelLayout& model, const EngineOptions& options, Exec exec)
      : model_(model), exec_(exec), options_(supported(options).nvme.optimizer),
        eight_bit_(options.moments == MomentStorage::blockwise_8bit),
        split_(options.master != MasterStorage::fp32),
        // Opening the directory and locking buffers in RAM can fail on one rank only: agreed, so
        // that the others do not go on to wait in the tensors' collectives.
        tier_(agreed(shard, "opening the optimizer states' swap directory",
                     [&] {
                       return NvmeTier(detail::tier_options(options.nvme, options_.nvme_path,
                                                            "optimizer", "optimizer states",
                                                            "nvme.optimizer.nvme_path"),
                                       model.world_rank);
                     })),
        plan_(*model.sharded, model.rank, options_.sub_group_size, unit()),
        slot_elements_(std::max(plan_.largest_elements(), unit())),
        bounce_(agreed(shard, "allocating the optimizer states' bounce buffers",
                       [&] {
                         return tier_.make_bounce_buffers(options_.buffer_count,
                                                          tensors * slot_elements_ * sizeof(float));
                       })),
        tensors_(make_tensors(shard, tier_, split_ ? 1 : 0, eight_bit_ ? 1 : tensors)) {
    if (split_)
      residuals_.emplace(agreed(shard, "creating the split masters' residual file", [&] {
        return NvmeResiduals(tier_, *model.sharded, model.rank, model.layers(), options.master,
                             options.compute_dtype);
      }));
    if constexpr (can_quantize)
      if (eight_bit_)
        moments_.emplace(agreed(shard, "creating the 8-bit moments' swap files", [&] {
          return NvmeBlockwiseMoments(tier_, model, *model.sharded, model.rank,
                                      options.eight_bit_min_elements, Opt::state_names);
        }));
    // Everything starts at zero, as in memory: the moments for good, the master weights until
    // set_layer.
    agreed(shard, "writing the optimizer states' initial values", [&] {
      std::memset(bounce_[0].data(), 0, bounce_[0].size());
      for (Tensor& t : tensors_)
        for (std::size_t l = 0; l < model.layers(); ++l)
          for_each_chunk(l, [&](Range part) { t.write(l, part, slot_tensor(0, 0)).wait(); });
      if constexpr (can_quantize)
        if (moments_) moments_->write_zeros(slot_bytes(0, 1));
      if (residuals_) residuals_->write_zeros(slot_bytes(0, 0));
    });
  }

  NvmeOptimizerStore(const NvmeOptimizerStore&) = delete;
  NvmeOptimizerStore& operator=(const NvmeOptimizerStore&) = delete;

  // Layer l's weights (its parameters in order): this rank's part becomes its master weights.
  void set_layer(std::size_t l, View<const float> values) {
    for_each_chunk(l, [&](Range part) {
      write_masters(l, part, [&](View<float> into) {
        model_.pack_my_block(l, values.data(), into.data(), part);
      });
    });
  }

  // Split masters: where the compute copy of this rank's block of layer l is (the parameter
  // store's, in memory), read and written by the cold paths. Does nothing otherwise.
  void bind_compute_copy(std::function<SplitComputeBlock<>(std::size_t)> compute_copy) {
    if (residuals_) residuals_->bind_compute_copy(std::move(compute_copy));
  }

  // Layer l's master weights, all of them, in order. Collective.
  template <class Comm>
  std::vector<float> layer(Comm& shard, std::size_t l) {
    std::vector<float> block(model_.my_block_size(l));
    for_each_chunk(l, [&](Range part) {
      read_masters(l, part, [&](View<const float> masters) {
        std::copy_n(masters.data(), part.size(), block.data() + part.begin);
      });
    });
    std::vector<float> image(model_.sharded->layer(l).flat_numel);
    gather_layer_image(shard, *model_.sharded, l, View<const float>(block), View<float>(image))
        .wait();
    std::vector<float> values(model_.sharded->layer(l).numel);
    model_.images.unpack(l, image.data(), values.data());
    return values;
  }

  // --- checkpoints (as OptimizerStore), through one bounce slot ---------------------------------
  const ShardLayout& kept_layout() const noexcept { return *model_.sharded; }
  int kept_rank() const noexcept { return model_.rank; }
  // With 8-bit moments each chunk's codes are read into slot 0's region of the moment and given
  // out as codes and scales where f takes them (f(t, l, part, QuantizedMomentView): a checkpoint's
  // save), or dequantized (in slot 0's master region, which the master weights have left by
  // then); values written are requantized into the codes (requantize: a dequantized moment's codes
  // and scales come back as they were). Split masters are read as the masters they reconstruct,
  // and written split into the compute copy and the residuals.
  template <class F>
  void read_states(F&& f) {
    constexpr bool takes_codes =
        std::invocable<F&, std::size_t, std::size_t, Range, const QuantizedMomentView&>;
    for (std::size_t l = 0; l < model_.layers(); ++l)
      for_each_chunk(l, [&](Range part) {
        for (std::size_t t = 0; t < tensors; ++t) {
          if (t == 0) {
            read_masters(l, part, [&](View<const float> masters) { f(t, l, part, masters); });
            continue;
          }
          swap_in(t, l, part, slot_bytes(0, t)).wait();
          if constexpr (can_quantize)
            if (moments_) {
              if constexpr (takes_codes)
                if (moments_->eight_bit(l)) {
                  f(t, l, part, moments_->codes_and_scales(t - 1, l, part, slot_bytes(0, t)));
                  continue;
                }
              const View<float> values = slot_tensor(0, 0).subview(0, part.size());
              moments_->to_fp32(t - 1, l, part, slot_bytes(0, t), values);
              f(t, l, part, View<const float>(values));
              continue;
            }
          f(t, l, part, View<const float>(slot_tensor(0, t).subview(0, part.size())));
        }
      });
  }
  template <class F>
  void write_states(F&& f) {
    for (std::size_t l = 0; l < model_.layers(); ++l)
      for_each_chunk(l, [&](Range part) {
        for (std::size_t t = 0; t < tensors; ++t) {
          if (t == 0) {
            write_masters(l, part, [&](View<float> masters) { f(t, l, part, masters); });
            continue;
          }
          if constexpr (can_quantize)
            if (moments_) { // values in the master region, which the masters have left, codes in
                            // t's
              const View<float> values = slot_tensor(0, 0).subview(0, part.size());
              f(t, l, part, values);
              moments_->from_fp32(t - 1, l, part, View<const float>(values), slot_bytes(0, t));
              swap_out(t, l, part, slot_bytes(0, t)).wait();
              continue;
            }
          f(t, l, part, slot_tensor(0, t).subview(0, part.size()));
          swap_out(t, l, part, slot_bytes(0, t)).wait();
        }
      });
  }

  // One update of this rank's shard, sub-group by sub-group (see the top of this file).
  template <ElementwiseUpdate U, class Grads, class Out, class Done>
  void step(const U& update, float grad_multiplier, Grads&& grads, Out&& out, Done&& done) {
    const std::size_t groups = plan_.size();
    const std::size_t slots = bounce_.count();
    const bool read_ahead = options_.pipeline_read && slots >= 2;
    std::vector<Transfers> transfers(slots);
    std::size_t next_done = 0;
    auto finish_layers_through = [&](std::size_t last) {
      for (; next_done <= last; ++next_done)
        done(next_done);
    };
    if (groups > 0) read(0, transfers[0]);
    for (std::size_t k = 0; k < groups; ++k) {
      Transfers& mine = transfers[k % slots];
      if (read_ahead && k + 1 < groups) read(k + 1, transfers[(k + 1) % slots]);
      wait_all(mine.reads);
      mine.reads.clear();
      for (const SubGroupPiece& piece : plan_[k].pieces) {
        if constexpr (can_split)
          if (residuals_) {
            step_split(update, k % slots, piece,
                       grads(piece.layer).subview(piece.part.begin, piece.part.size()),
                       grad_multiplier,
                       out(piece.layer).subview(piece.part.begin, piece.part.size()));
            if (plan_.completes(k, piece.layer)) finish_layers_through(piece.layer);
            continue;
          }
        if constexpr (can_quantize)
          if (moments_) {
            moments_->step(update, piece.layer, piece.part,
                           {piece_bytes(k % slots, 1, piece), piece_bytes(k % slots, 2, piece)},
                           piece_view(k % slots, 0, piece),
                           grads(piece.layer).subview(piece.part.begin, piece.part.size()),
                           grad_multiplier,
                           out(piece.layer).subview(piece.part.begin, piece.part.size()));
            if (plan_.completes(k, piece.layer)) finish_layers_through(piece.layer);
            continue;
          }
        std::array<View<float>, states> moments;
        for (std::size_t s = 0; s < states; ++s)
          moments[s] = piece_view(k % slots, 1 + s, piece);
        fused_step(exec_, update, piece_view(k % slots, 0, piece), moments,
                   grads(piece.layer).subview(piece.part.begin, piece.part.size()), grad_multiplier,
                   out(piece.layer).subview(piece.part.begin, piece.part.size()));
        // Over a stream space the update is queued: the host writes the piece to NVMe and shares
        // the layer's copy next, so it waits for it here.
        if constexpr (StreamSpace<Exec>) exec_.fence();
        if (plan_.completes(k, piece.layer)) finish_layers_through(piece.layer);
      }
      write(k, mine);
      if (!options_.pipeline_write) {
        wait_all(mine.writes);
        mine.writes.clear();
      }
      if (!read_ahead && k + 1 < groups) read(k + 1, transfers[(k + 1) % slots]);
    }
    if (model_.layers() > 0) finish_layers_through(model_.layers() - 1);
    for (Transfers& t : transfers)
      wait_all(t.writes);
  }

  StateBytes master_bytes() const noexcept {
    if (residuals_) return {0, residuals_->file_bytes()};
    return {0, tensor(0).bytes_stored()};
  }
  // With 8-bit moments: the codes (and the fp32 layers' values) on NVMe, the scales in memory.
  StateBytes state_bytes() const noexcept {
    if constexpr (can_quantize)
      if (moments_) return {moments_->scale_bytes(), moments_->file_bytes()};
    std::size_t bytes = 0;
    for (std::size_t t = 1; t < tensors; ++t)
      bytes += tensor(t).bytes_stored();
    return {0, bytes};
  }
  IoStats nvme_traffic() const { return tier_.stats(); }
  std::size_t buffer_bytes() const noexcept { return bounce_.count() * bounce_.bytes(); }

 private:
  // 8-bit moments are Adam's, updated by the host's threads (as in memory): others refuse them;
  // split masters are built for element-wise updates by the host's threads.
  static const EngineOptions& supported(const EngineOptions& options) {
    if (options.master != MasterStorage::fp32 && !can_split)
      fail_on_every_rank(ErrorKind::unsupported,
                         std::string("engine: split master weights (EngineOptions::master = ") +
                             to_string(options.master) +
                             ") on the NVMe tier are built for element-wise optimizers (Adam, "
                             "AdamW, SGD) updated by the host's threads; this engine's NVMe "
                             "optimizer store runs " +
                             std::string(Opt::name) +
                             (StreamSpace<Exec> ? " on a stream space" : ""));
    if (options.moments == MomentStorage::blockwise_8bit && !can_quantize)
      fail_on_every_rank(ErrorKind::unsupported,
                         std::string("engine: 8-bit moments (EngineOptions::moments) are built for "
                                     "Adam and AdamW updated by the host's threads; this engine's "
                                     "NVMe optimizer store runs ") +
                             std::string(Opt::name) +
                             (StreamSpace<Exec> ? " on a stream space" : ""));
    return options;
  }
  // Sub-groups are cut on whole units of the states swapped: 1024 fp32 values, or 4096 codes or
  // 8-bit residuals (2048 16-bit ones), of which 4096 is a multiple.
  std::size_t unit() const noexcept {
    return eight_bit_ || split_ ? NvmeBlockwiseMoments::unit_elements
                                : NvmeSlice<float>::unit_elements;
  }

  struct Transfers {
    std::vector<Work> reads, writes;
  };

  // Tensors [first, end): the master weights (0) unless NvmeResiduals keeps them split, and the
  // fp32 moments unless NvmeBlockwiseMoments keeps them.
  template <class Comm>
  std::vector<Tensor> make_tensors(Comm& shard, NvmeTier& tier, std::size_t first,
                                   std::size_t end) const {
    auto name = [](std::size_t t) {
      return t == 0 ? std::string("optimizer.master")
                    : "optimizer." + std::string(Opt::state_names[t - 1]);
    };
    std::vector<Tensor> made;
    made.reserve(end - std::min(first, end));
    for (std::size_t t = first; t < end; ++t)
      made.emplace_back(shard, model_.sharded, typename K::policy{.space = {&tier, name(t)}});
    return made;
  }
  // Tensor t (0: the master weights, then the moments) of those swapped as fp32 values.
  Tensor& tensor(std::size_t t) { return tensors_.at(t - (split_ ? 1 : 0)); }
  const Tensor& tensor(std::size_t t) const { return tensors_.at(t - (split_ ? 1 : 0)); }

  // One piece's update over split masters: the compute copy `copy` holds the masters' high parts
  // and receives the new ones; the residuals are in slot `slot`'s master region.
  template <ElementwiseUpdate U, class G, class Out>
  void step_split(const U& update, std::size_t slot, const SubGroupPiece& piece, View<G> grad,
                  float grad_multiplier, View<Out> copy) {
    if constexpr (SplitComputeType<Out>) {
      residuals_->with_masters(
          copy, piece_bytes(slot, 0, piece), [&]<class R>(SplitMasterView<Out, R> master) {
            if constexpr (can_quantize)
              if (moments_)
                return moments_->step(update, piece.layer, piece.part,
                                      {piece_bytes(slot, 1, piece), piece_bytes(slot, 2, piece)},
                                      master, grad, grad_multiplier);
            std::array<View<float>, states> moments;
            for (std::size_t s = 0; s < states; ++s)
              moments[s] = piece_view(slot, 1 + s, piece);
            split_fused_step(update, master, moments, grad, grad_multiplier);
          });
    } else {
      fail(ErrorKind::unsupported, "engine: split master weights need a float16 or bfloat16 "
                                   "compute copy to write");
    }
  }

  // Tensor t's region of bounce slot `slot`: the whole sub-group, at aligned offsets.
  View<float> slot_tensor(std::size_t slot, std::size_t t) {
    auto* base = reinterpret_cast<float*>(bounce_[slot].data());
    return {base + t * slot_elements_, slot_elements_};
  }
  View<float> piece_view(std::size_t slot, std::size_t t, const SubGroupPiece& piece) {
    return slot_tensor(slot, t).subview(piece.at, piece.part.size());
  }
  // Tensor t's region of a slot as bytes, and a piece's part of it (its 4 bytes an element).
  std::span<std::byte> slot_bytes(std::size_t slot, std::size_t t) {
    const View<float> region = slot_tensor(slot, t);
    return std::as_writable_bytes(std::span<float>(region.data(), region.size()));
  }
  std::span<std::byte> piece_bytes(std::size_t slot, std::size_t t, const SubGroupPiece& piece) {
    return slot_bytes(slot, t).subspan(
        piece.at * sizeof(float), NvmeSlice<float>::transfer_elements(piece.part) * sizeof(float));
  }

  // f(part) for layer l's block on this rank, in slot-sized aligned parts.
  template <class F>
  void for_each_chunk(std::size_t l, F&& f) {
    const std::size_t block = model_.my_block_size(l);
    const std::size_t chunk = slot_elements_;
    for (std::size_t begin = 0; begin < block; begin += chunk)
      f(Range{begin, std::min(block, begin + chunk)});
  }

  // Positions `part` of layer l's state t (0: the master weights, then the moments) between the
  // tier and `bytes` (a slot's region of t, or a piece's part of it), as the state is swapped:
  // fp32 values, 8-bit moments' codes, or split masters' residuals.
  Work swap_in(std::size_t t, std::size_t l, Range part, std::span<std::byte> bytes) {
    if (residuals_ && t == 0) return residuals_->read(l, part, bytes);
    if constexpr (can_quantize)
      if (moments_ && t > 0) return moments_->read(t - 1, l, part, bytes);
    return tensor(t).read(l, part, floats(bytes, part));
  }
  Work swap_out(std::size_t t, std::size_t l, Range part, std::span<std::byte> bytes) {
    if (residuals_ && t == 0) return residuals_->write(l, part, bytes);
    if constexpr (can_quantize)
      if (moments_ && t > 0) return moments_->write(t - 1, l, part, bytes);
    return tensor(t).write(l, part, View<const float>(floats(bytes, part)));
  }
  // fp32 values of `part` in `bytes`, whole units.
  static View<float> floats(std::span<std::byte> bytes, Range part) {
    return {reinterpret_cast<float*>(bytes.data()), NvmeSlice<float>::transfer_elements(part)};
  }

  // use(masters) with positions `part` of layer l's master weights, read through slot 0 (split
  // ones reconstructed from the compute copy and the residuals).
  template <class Use>
  void read_masters(std::size_t l, Range part, Use&& use) {
    swap_in(0, l, part, slot_bytes(0, 0)).wait();
    if (!residuals_) return use(View<const float>(slot_tensor(0, 0).first(part.size())));
    std::vector<float> masters(part.size()); // the slot holds the residuals
    residuals_->reconstruct(l, part, slot_bytes(0, 0), View<float>(masters));
    use(View<const float>(masters));
  }
  // fill(into) writes positions `part` of layer l's master weights, which go out through slot 0
  // (split ones into the compute copy and the residuals).
  template <class Fill>
  void write_masters(std::size_t l, Range part, Fill&& fill) {
    if (residuals_) {
      std::vector<float> masters(part.size()); // the slot takes the residuals
      fill(View<float>(masters));
      residuals_->split(l, part, View<const float>(masters), slot_bytes(0, 0));
    } else {
      fill(slot_tensor(0, 0).first(part.size()));
    }
    swap_out(0, l, part, slot_bytes(0, 0)).wait();
  }

  // Sub-group k into its slot, once the slot's previous sub-group is written back.
  void read(std::size_t k, Transfers& slot) {
    wait_all(slot.writes);
    slot.writes.clear();
    for (std::size_t t = 0; t < tensors; ++t)
      for (const SubGroupPiece& piece : plan_[k].pieces)
        slot.reads.push_back(
            swap_in(t, piece.layer, piece.part, piece_bytes(k % bounce_.count(), t, piece)));
  }
  void write(std::size_t k, Transfers& slot) {
    for (std::size_t t = 0; t < tensors; ++t)
      for (const SubGroupPiece& piece : plan_[k].pieces)
        slot.writes.push_back(
            swap_out(t, piece.layer, piece.part, piece_bytes(k % bounce_.count(), t, piece)));
  }

  const ModelLayout& model_;
  Exec exec_;
  OptimizerOffload options_;
  bool eight_bit_;
  bool split_;
  NvmeTier tier_;
  SubGroupPlan plan_;
  std::size_t slot_elements_;
  BounceBuffers bounce_;
  // The master weights (none when split), then the fp32 moments (none when 8-bit).
  std::vector<Tensor> tensors_;
  std::optional<NvmeResiduals> residuals_; // split masters' residuals
  // 8-bit moments' files, named only where they can exist.
  template <bool Can, class = void>
  struct moments_member {
    struct type {};
  };
  template <class Unused>
  struct moments_member<true, Unused> {
    using type = std::optional<NvmeBlockwiseMoments>;
  };
  [[no_unique_address]] typename moments_member<can_quantize>::type moments_;
};

} // namespace zero
