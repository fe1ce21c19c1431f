#pragma once
// NvmeBlockwiseMoments: Adam's two moments of this rank's blocks on the NVMe tier when the engine
// keeps them in 8 bits (EngineOptions::moments = MomentStorage::blockwise_8bit), for the optimizer
// store of ZeRO-Infinity (offload/nvme_optimizer_store.hpp). One swap file per moment; in it every
// layer's block starts at an aligned offset and is kept as BlockwiseMoments keeps it in memory:
// codes, one byte an element, for the layers it quantizes, and fp32 values for the others (small
// layers, and layers marked fp32_moments). So a step moves 1 byte per element and moment instead
// of 4. The block scales, 4 bytes per 2048 elements and moment (0.2% of the codes), stay in memory
// beside the files: a 10-billion-parameter shard keeps 39 MB of them.
//
// A part of a block moves in one transfer when it starts on a multiple of unit_elements (4096
// codes fill one 4096-byte unit; fp32 values need a multiple of 1024, which 4096 is), so the store
// cuts its sub-groups on multiples of 4096 elements, which keeps every 2048-element block whole.
// In the store's bounce slots each moment's part lies where its fp32 values would (4 bytes an
// element of room), the codes at the start.

#include "zero/core/error.hpp"
#include "zero/core/view.hpp"
#include "zero/core/work.hpp"
#include "zero/engine/blockwise_moments.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/nvme/nvme_tier.hpp"
#include "zero/nvme/swap_file.hpp"
#include "zero/optim/adam.hpp"
#include "zero/optim/dynamic_map.hpp"
#include "zero/optim/fused_step.hpp"
#include "zero/optim/quantized_moments.hpp"
#include "zero/optim/quantized_step.hpp"
#include "zero/optim/split_master.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zero {

class NvmeBlockwiseMoments {
 public:
  static constexpr std::size_t unit_bytes = SwapFile::alignment;
  static constexpr std::size_t unit_elements = unit_bytes; // codes: one byte each

  // The moments of rank `rank`'s blocks of `layout`, every layer of `model`, named after `names`
  // (the optimizer's state names). Every moment starts at zero.
  NvmeBlockwiseMoments(NvmeTier& tier, const ModelLayout& model, const ShardLayout& layout,
                       int rank, std::size_t min_elements, std::array<std::string_view, 2> names) {
    std::size_t at = 0;
    layers_.reserve(model.layers());
    for (std::size_t l = 0; l < model.layers(); ++l) {
      Layer layer;
      layer.eight_bit = keeps_eight_bit_moments(model, l, min_elements);
      layer.elements = layout.block(l, rank).size();
      layer.offset = at;
      if (layer.eight_bit)
        for (auto& scales : layer.scales)
          scales.assign(quantized_blocks(layer.elements), 0.0f);
      at += round_up(layer.elements * layer.element_bytes());
      layers_.push_back(std::move(layer));
    }
    // A rank with nothing still gets one unit: the tier refuses empty files.
    for (std::size_t k = 0; k < 2; ++k)
      files_[k] = tier.create_file("optimizer." + std::string(names[k]) + ".8bit",
                                   std::max(at, unit_bytes));
  }

  bool eight_bit(std::size_t l) const { return layers_.at(l).eight_bit; }

  // Bytes a buffer needs to move `part` of layer l (whole units).
  std::size_t transfer_bytes(std::size_t l, Range part) const {
    return round_up(part.size() * layers_.at(l).element_bytes());
  }

  // Positions `part` of moment k (0: exp_avg, 1: exp_avg_sq) of layer l's block into `into`, or
  // from `from`: codes or fp32 values, as the layer keeps them.
  Work read(std::size_t k, std::size_t l, Range part, std::span<std::byte> into) {
    return files_[k].read(offset(l, part), into.first(transfer_bytes(l, part)));
  }
  Work write(std::size_t k, std::size_t l, Range part, std::span<const std::byte> from) {
    return files_[k].write(offset(l, part), from.first(transfer_bytes(l, part)));
  }

  // Writes zero moments over every block, `buffer` (at least one unit, aligned) at a time.
  void write_zeros(std::span<std::byte> buffer) {
    const std::size_t chunk = buffer.size() / unit_bytes * unit_bytes;
    require(chunk > 0, "NvmeBlockwiseMoments: the buffer for the initial moments is under a unit");
    for (std::size_t k = 0; k < 2; ++k)
      for (std::size_t l = 0; l < layers_.size(); ++l) {
        const Layer& layer = layers_[l];
        // The code of 0 is not the byte 0 in the signed map.
        const std::byte zero = layer.eight_bit ? std::byte{map(k).nearest(0.0f)} : std::byte{0};
        std::fill(buffer.begin(), buffer.end(), zero);
        const std::size_t elements = chunk / layer.element_bytes();
        for (std::size_t begin = 0; begin < layer.elements; begin += elements) {
          const Range part{begin, std::min(layer.elements, begin + elements)};
          write(k, l, part, buffer).wait();
        }
      }
  }

  // One Adam update of `part` of layer l's block: the moments' bytes in `exp_avg` and `exp_avg_sq`
  // (read from the files, written back by the caller), master, grad and copy covering the part.
  template <class G, class Out>
  void step(const AdamUpdate& update, std::size_t l, Range part,
            std::array<std::span<std::byte>, 2> moments, View<float> master, View<G> grad,
            float grad_multiplier, View<Out> copy) {
    if (layers_.at(l).eight_bit)
      quantized_fused_step(update, master, quantized(0, l, part, moments[0]),
                           quantized(1, l, part, moments[1]), grad, grad_multiplier, copy);
    else
      fused_step(update, master, {fp32(part, moments[0]), fp32(part, moments[1])}, grad,
                 grad_multiplier, copy);
  }

  // The same over split masters (optim/split_master.hpp).
  template <class G, SplitComputeType T, SplitResidual R>
  void step(const AdamUpdate& update, std::size_t l, Range part,
            std::array<std::span<std::byte>, 2> moments, SplitMasterView<T, R> master, View<G> grad,
            float grad_multiplier) {
    if (layers_.at(l).eight_bit)
      quantized_fused_step(update, master, quantized(0, l, part, moments[0]),
                           quantized(1, l, part, moments[1]), grad, grad_multiplier);
    else
      split_fused_step(update, master, {fp32(part, moments[0]), fp32(part, moments[1])}, grad,
                       grad_multiplier);
  }

  // Moment k of `part` of layer l's block as fp32 values, from its bytes (a checkpoint's read).
  void to_fp32(std::size_t k, std::size_t l, Range part, std::span<std::byte> bytes,
               View<float> values) {
    if (!layers_.at(l).eight_bit) {
      std::copy_n(fp32(part, bytes).data(), part.size(), values.data());
      return;
    }
    dequantize(map(k), quantized(k, l, part, bytes), values);
  }
  // Moment k of `part` of an 8-bit layer l's block as its codes (in `bytes`) and scales, as a
  // checkpoint saves them.
  QuantizedMomentView codes_and_scales(std::size_t k, std::size_t l, Range part,
                                       std::span<std::byte> bytes) {
    const QuantizedMoment moment = quantized(k, l, part, bytes);
    return {&map(k), View<const std::uint8_t>(moment.codes.data(), moment.codes.size()),
            View<const float>(moment.scales.data(), moment.scales.size())};
  }
  // Fp32 values of moment k of `part` of layer l's block into its bytes (a checkpoint's write):
  // the codes and scales of a dequantized moment come back as they were (requantize).
  void from_fp32(std::size_t k, std::size_t l, Range part, View<const float> values,
                 std::span<std::byte> bytes) {
    if (!layers_.at(l).eight_bit) {
      std::copy_n(values.data(), part.size(), fp32(part, bytes).data());
      return;
    }
    requantize(map(k), values, quantized(k, l, part, bytes));
  }

  std::size_t file_bytes() const noexcept { return files_[0].size() + files_[1].size(); }
  std::size_t scale_bytes() const noexcept {
    std::size_t total = 0;
    for (const Layer& layer : layers_)
      for (const auto& scales : layer.scales)
        total += scales.size() * sizeof(float);
    return total;
  }

 private:
  struct Layer {
    bool eight_bit = false;
    std::size_t elements = 0; // this rank's block
    std::size_t offset = 0;   // in each file
    std::array<std::vector<float>, 2> scales;
    std::size_t element_bytes() const noexcept { return eight_bit ? 1 : sizeof(float); }
  };

  static const DynamicMap& map(std::size_t k) {
    return k == 0 ? DynamicMap::signed_map() : DynamicMap::unsigned_map();
  }
  static std::size_t round_up(std::size_t bytes) noexcept {
    return (bytes + unit_bytes - 1) / unit_bytes * unit_bytes;
  }
  std::size_t offset(std::size_t l, Range part) const {
    const Layer& layer = layers_.at(l);
    require(part.end <= layer.elements && (part.begin * layer.element_bytes()) % unit_bytes == 0,
            "NvmeBlockwiseMoments: positions [" + std::to_string(part.begin) + ", " +
                std::to_string(part.end) + ") of layer " + std::to_string(l) +
                " do not start on a unit or lie outside the block of " +
                std::to_string(layer.elements));
    return layer.offset + part.begin * layer.element_bytes();
  }
  QuantizedMoment quantized(std::size_t k, std::size_t l, Range part, std::span<std::byte> bytes) {
    require(part.begin % quantized_moment_block == 0,
            "NvmeBlockwiseMoments: a part must start on a block of " +
                std::to_string(quantized_moment_block));
    std::vector<float>& scales = layers_.at(l).scales[k];
    const std::size_t first = part.begin / quantized_moment_block;
    return {View<std::uint8_t>(reinterpret_cast<std::uint8_t*>(bytes.data()), part.size()),
            View<float>(scales.data() + first, quantized_blocks(part.size()))};
  }
  static View<float> fp32(Range part, std::span<std::byte> bytes) {
    return {reinterpret_cast<float*>(bytes.data()), part.size()};
  }

  std::vector<Layer> layers_;
  std::array<SwapFile, 2> files_;
};

} // namespace zero
