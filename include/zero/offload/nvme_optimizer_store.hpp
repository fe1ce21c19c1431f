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
#include "zero/offload/subgroup_plan.hpp"
#include "zero/optim/fused_step.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/optim/stream_step.hpp" // fused_step over HostStreamSpace
#include "zero/shard/layer_gather.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/sharded_tensor.hpp"

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstring>
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

 public:
  template <class Comm>
  NvmeOptimizerStore(Comm& shard, const ModelLayout& model, const EngineOptions& options, Exec exec)
      : model_(model), exec_(exec), options_(supported(options).nvme.optimizer),
        eight_bit_(options.moments == MomentStorage::blockwise_8bit),
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
        tensors_(make_tensors(shard, tier_, eight_bit_ ? 1 : tensors)) {
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
    });
  }

  NvmeOptimizerStore(const NvmeOptimizerStore&) = delete;
  NvmeOptimizerStore& operator=(const NvmeOptimizerStore&) = delete;

  // Layer l's weights (its parameters in order): this rank's part becomes its master weights.
  void set_layer(std::size_t l, View<const float> values) {
    for_each_chunk(l, [&](Range part) {
      const View<float> buffer = slot_tensor(0, 0);
      model_.pack_my_block(l, values.data(), buffer.data(), part);
      master().write(l, part, buffer).wait();
    });
  }

  // Layer l's master weights, all of them, in order. Collective.
  template <class Comm>
  std::vector<float> layer(Comm& shard, std::size_t l) {
    std::vector<float> block(model_.my_block_size(l));
    for_each_chunk(l, [&](Range part) {
      const View<float> buffer = slot_tensor(0, 0);
      master().read(l, part, buffer).wait();
      std::copy_n(buffer.data(), part.size(), block.data() + part.begin);
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
  // and scales come back as they were).
  template <class F>
  void read_states(F&& f) {
    constexpr bool takes_codes =
        std::invocable<F&, std::size_t, std::size_t, Range, const QuantizedMomentView&>;
    for (std::size_t l = 0; l < model_.layers(); ++l)
      for_each_chunk(l, [&](Range part) {
        for (std::size_t t = 0; t < tensors; ++t) {
          if constexpr (can_quantize)
            if (moments_ && t > 0) {
              moments_->read(t - 1, l, part, slot_bytes(0, t)).wait();
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
          tensors_[t].read(l, part, slot_tensor(0, t)).wait();
          f(t, l, part, View<const float>(slot_tensor(0, t).subview(0, part.size())));
        }
      });
  }
  template <class F>
  void write_states(F&& f) {
    for (std::size_t l = 0; l < model_.layers(); ++l)
      for_each_chunk(l, [&](Range part) {
        for (std::size_t t = 0; t < tensors; ++t) {
          if constexpr (can_quantize)
            if (moments_ && t > 0) {
              const View<float> values = slot_tensor(0, 0).subview(0, part.size());
              f(t, l, part, values);
              moments_->from_fp32(t - 1, l, part, View<const float>(values), slot_bytes(0, t));
              moments_->write(t - 1, l, part, slot_bytes(0, t)).wait();
              continue;
            }
          f(t, l, part, slot_tensor(0, t).subview(0, part.size()));
          tensors_[t].write(l, part, slot_tensor(0, t)).wait();
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

  StateBytes master_bytes() const noexcept { return {0, tensors_[0].bytes_stored()}; }
  // With 8-bit moments: the codes (and the fp32 layers' values) on NVMe, the scales in memory.
  StateBytes state_bytes() const noexcept {
    if constexpr (can_quantize)
      if (moments_) return {moments_->scale_bytes(), moments_->file_bytes()};
    std::size_t bytes = 0;
    for (std::size_t t = 1; t < tensors_.size(); ++t)
      bytes += tensors_[t].bytes_stored();
    return {0, bytes};
  }
  IoStats nvme_traffic() const { return tier_.stats(); }
  std::size_t buffer_bytes() const noexcept { return bounce_.count() * bounce_.bytes(); }

 private:
  // 8-bit moments are Adam's, updated by the host's threads (as in memory): others refuse them.
  // Split masters are not built on the tier.
  static const EngineOptions& supported(const EngineOptions& options) {
    if (options.master != MasterStorage::fp32)
      fail_on_every_rank(ErrorKind::unsupported,
                         std::string("engine: split master weights (EngineOptions::master = ") +
                             to_string(options.master) +
                             ") are not built for optimizer states on the NVMe tier yet");
    if (options.moments == MomentStorage::blockwise_8bit && !can_quantize)
      fail_on_every_rank(ErrorKind::unsupported,
                         std::string("engine: 8-bit moments (EngineOptions::moments) are built for "
                                     "Adam and AdamW updated by the host's threads; this engine's "
                                     "NVMe optimizer store runs ") +
                             std::string(Opt::name) +
                             (StreamSpace<Exec> ? " on a stream space" : ""));
    return options;
  }
  // Sub-groups are cut on whole units of the states swapped: 1024 fp32 values, or 4096 codes.
  std::size_t unit() const noexcept {
    return eight_bit_ ? NvmeBlockwiseMoments::unit_elements : NvmeSlice<float>::unit_elements;
  }

  struct Transfers {
    std::vector<Work> reads, writes;
  };

  // The master weights, and the fp32 moments unless NvmeBlockwiseMoments keeps them.
  template <class Comm>
  std::vector<Tensor> make_tensors(Comm& shard, NvmeTier& tier, std::size_t count) const {
    auto name = [](std::size_t t) {
      return t == 0 ? std::string("optimizer.master")
                    : "optimizer." + std::string(Opt::state_names[t - 1]);
    };
    std::vector<Tensor> made;
    made.reserve(count);
    for (std::size_t t = 0; t < count; ++t)
      made.emplace_back(shard, model_.sharded, typename K::policy{.space = {&tier, name(t)}});
    return made;
  }
  Tensor& master() noexcept { return tensors_[0]; }

  // Tensor t's region of bounce slot `slot`: the whole sub-group, at aligned offsets.
  View<float> slot_tensor(std::size_t slot, std::size_t t) {
    auto* base = reinterpret_cast<float*>(bounce_[slot].data());
    return {base + t * slot_elements_, slot_elements_};
  }
  View<float> piece_view(std::size_t slot, std::size_t t, const SubGroupPiece& piece) {
    return slot_tensor(slot, t).subview(piece.at, piece.part.size());
  }
  View<float> piece_transfer(std::size_t slot, std::size_t t, const SubGroupPiece& piece) {
    return slot_tensor(slot, t).subview(piece.at, NvmeSlice<float>::transfer_elements(piece.part));
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

  // Sub-group k into its slot, once the slot's previous sub-group is written back.
  void read(std::size_t k, Transfers& slot) {
    wait_all(slot.writes);
    slot.writes.clear();
    for (std::size_t t = 0; t < tensors; ++t)
      for (const SubGroupPiece& piece : plan_[k].pieces) {
        if constexpr (can_quantize)
          if (moments_ && t > 0) {
            slot.reads.push_back(moments_->read(t - 1, piece.layer, piece.part,
                                                piece_bytes(k % bounce_.count(), t, piece)));
            continue;
          }
        slot.reads.push_back(tensors_[t].read(piece.layer, piece.part,
                                              piece_transfer(k % bounce_.count(), t, piece)));
      }
  }
  void write(std::size_t k, Transfers& slot) {
    for (std::size_t t = 0; t < tensors; ++t)
      for (const SubGroupPiece& piece : plan_[k].pieces) {
        if constexpr (can_quantize)
          if (moments_ && t > 0) {
            slot.writes.push_back(moments_->write(t - 1, piece.layer, piece.part,
                                                  piece_bytes(k % bounce_.count(), t, piece)));
            continue;
          }
        slot.writes.push_back(
            tensors_[t].write(piece.layer, piece.part,
                              View<const float>(piece_transfer(k % bounce_.count(), t, piece))));
      }
  }

  const ModelLayout& model_;
  Exec exec_;
  OptimizerOffload options_;
  bool eight_bit_;
  NvmeTier tier_;
  SubGroupPlan plan_;
  std::size_t slot_elements_;
  BounceBuffers bounce_;
  std::vector<Tensor> tensors_; // the master weights, then the fp32 moments (none when 8-bit)
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
