#pragma once
// BlockwiseMoments<Space, Exec>: Adam's and AdamW's two moments in 8 bits, layer by layer, as the
// optimizer store keeps them under EngineOptions::moments = MomentStorage::blockwise_8bit, in the
// store's memory and updated on its execution space: host memory and the host's threads, or a
// stream space's memory (device memory over CudaStreamSpace), the update queued there. Each
// moment of a layer's block is a QuantizedMoment (optim/quantized_moments.hpp): one code a value
// and one fp32 scale per block of 2048 values, the blocks counted from the block's element 0. The
// engine's layout starts every rank's block of a layer on a multiple of 2048 elements of the layer
// (engine/detail/construction.hpp), so the blocks here are the layer's own blocks whatever the
// stage and the number of ranks: a rank that keeps the layer whole and the ranks that share it
// quantize the same values into the same bytes, and resharding moves bytes.
//
// A layer of fewer than `min_elements` elements keeps fp32 moments (bitsandbytes keeps tensors
// under 4096 elements in 32 bits): biases and norms, whose moments cost little, are spared the
// quantization error; so does a layer with a parameter marked ParameterSpec::fp32_moments (an
// embedding). The choice is made per layer, from the layout, alike on every rank.
//
// The update is one pass per block (quantized_fused_step): the two moments are dequantized into
// scratch, updated with the master weights, and quantized again with the block's new maximum.
// Checkpoints save the codes and scales as they are (checkpoint/manifest.hpp's 8-bit records) and
// load fp32 values, requantized when written (requantize: a dequantized moment's codes and scales
// come back as they were; values that are not a dequantized moment, an fp32-moment checkpoint's,
// are quantized afresh). In device memory these cold paths go through host copies
// (detail/host_staging.hpp); the codes and scales are the same bytes in either memory, since the
// device's step computes the host's (optim/cuda_quantized_step.hpp).

#include "zero/core/buffer.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"
#include "zero/engine/detail/host_staging.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/report.hpp"
#include "zero/optim/adam.hpp"
#include "zero/optim/dynamic_map.hpp"
#include "zero/optim/fused_step.hpp"
#include "zero/optim/quantized_moments.hpp"
#include "zero/optim/quantized_step.hpp"
#include "zero/optim/split_master.hpp"
#include "zero/optim/stream_quantized_step.hpp" // the step over HostStreamSpace
#include "zero/optim/stream_step.hpp"           // fused_step over HostStreamSpace
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zero {

// Whether layer l keeps 8-bit moments (the rule above): alike on every rank and in every store.
inline bool keeps_eight_bit_moments(const ModelLayout& model, std::size_t l,
                                    std::size_t min_elements) {
  return model.sharded->layer(l).numel >= min_elements &&
         std::ranges::none_of(model.sharded->layer_parameters(l), [&](std::size_t p) {
           return model.sharded->parameter(p).fp32_moments;
         });
}

template <class Space, ExecutionSpace Exec>
requires HostAccessibleSpace<Space> || StreamSpace<Exec>
class BlockwiseMoments {
 public:
  // The moments of this rank's blocks of `kept` (rank `kept_rank`'s), every layer of `model`.
  BlockwiseMoments(const ModelLayout& model, const ShardLayout& kept, int kept_rank,
                   std::size_t min_elements, Exec exec)
      : exec_(exec) {
    layers_.reserve(model.layers());
    for (std::size_t l = 0; l < model.layers(); ++l) {
      const std::size_t n = kept.block(l, kept_rank).size();
      layers_.push_back(keeps_eight_bit_moments(model, l, min_elements) ? quantized_layer(n)
                                                                        : full_layer(n));
    }
  }

  bool eight_bit(std::size_t l) const noexcept { return layers_[l].eight_bit; }

  // One update of layer l's block: master, grad and copy (empty: none) cover the block. Over a
  // stream space it is queued; the caller orders what follows (an event).
  template <class G, class Out>
  void step(const AdamUpdate& update, std::size_t l, View<float, Space> master, View<G, Space> grad,
            float grad_multiplier, View<Out, Space> copy) {
    Layer& layer = layers_[l];
    if (layer.eight_bit)
      quantized_fused_step(exec_, update, master, layer.moment(0), layer.moment(1), grad,
                           grad_multiplier, copy);
    else
      fused_step(exec_, update, master, {layer.fp32[0].view(), layer.fp32[1].view()}, grad,
                 grad_multiplier, copy);
  }

  // The same over split masters (optim/split_master.hpp) in the store's memory.
  template <class G, SplitComputeType T, SplitResidual R>
  void step(const AdamUpdate& update, std::size_t l,
            SplitMasterView<T, R, HandedOutMemory<Space>> master,
            View<G, HandedOutMemory<Space>> grad, float grad_multiplier) {
    Layer& layer = layers_[l];
    const std::array<View<float, HandedOutMemory<Space>>, 2> fp32{handed_out(layer.fp32[0].view()),
                                                                  handed_out(layer.fp32[1].view())};
    if constexpr (StreamSpace<Exec>) {
      if (layer.eight_bit)
        quantized_fused_step(exec_, update, master, layer.moment(0), layer.moment(1), grad,
                             grad_multiplier);
      else
        split_fused_step(exec_, update, master, fp32, grad, grad_multiplier);
    } else {
      if (layer.eight_bit)
        quantized_fused_step(update, master, layer.moment(0), layer.moment(1), grad,
                             grad_multiplier);
      else
        split_fused_step(update, master, fp32, grad, grad_multiplier);
    }
  }

  // f(values): moment k (0: exp_avg, 1: exp_avg_sq) of layer l's block in fp32, on the host; an
  // 8-bit layer's as its codes and scales where f takes them (f(QuantizedMomentView): a
  // checkpoint's save).
  template <class F>
  decltype(auto) read(std::size_t l, std::size_t k, F&& f) const {
    const Layer& layer = layers_[l];
    if (!layer.eight_bit) return detail::read_on_host(exec_, layer.fp32[k].view(), f);
    return detail::read_on_host(
        exec_, layer.codes[k].view(), [&](View<const std::uint8_t> codes) -> decltype(auto) {
          return detail::read_on_host(
              exec_, layer.scales[k].view(), [&](View<const float> scales) -> decltype(auto) {
                const QuantizedMomentView moment{&map(k), codes, scales};
                if constexpr (std::invocable<F&, const QuantizedMomentView&>) {
                  return f(moment);
                } else {
                  std::vector<float> values(codes.size());
                  dequantize(moment, View<float>(values));
                  return f(View<const float>(values));
                }
              });
        });
  }
  // f(into) fills moment k of layer l's block in fp32 on the host; 8-bit layers quantize it.
  template <class F>
  void write(std::size_t l, std::size_t k, F&& f) {
    Layer& layer = layers_[l];
    if (!layer.eight_bit) return detail::write_on_host(exec_, layer.fp32[k].view(), f);
    std::vector<float> values(layer.codes[k].size());
    f(View<float>(values));
    detail::write_on_host(exec_, layer.codes[k].view(), [&](View<std::uint8_t> codes) {
      detail::write_on_host(exec_, layer.scales[k].view(), [&](View<float> scales) {
        requantize(map(k), View<const float>(values), QuantizedMoment{codes, scales});
      });
    });
  }

  // f(bytes) with each buffer of layer l's moments as it is kept (fp32 values, or codes and
  // scales), in a fixed order: what a snapshot of the layer copies.
  template <class F>
  void for_each_block(std::size_t l, F&& f) {
    Layer& layer = layers_[l];
    for (std::size_t k = 0; k < 2; ++k)
      if (layer.eight_bit) {
        f(writable_bytes(layer.codes[k].view()));
        f(writable_bytes(layer.scales[k].view()));
      } else {
        f(writable_bytes(layer.fp32[k].view()));
      }
  }

  // Both moments: codes and scales of the 8-bit layers, fp32 values of the others.
  StateBytes bytes() const noexcept {
    std::size_t total = 0;
    for (const Layer& layer : layers_)
      for (std::size_t k = 0; k < 2; ++k)
        total += layer.fp32[k].size() * sizeof(float) + layer.codes[k].size() +
                 layer.scales[k].size() * sizeof(float);
    return {total, 0};
  }

 private:
  static const DynamicMap& map(std::size_t k) {
    return k == 0 ? DynamicMap::signed_map() : DynamicMap::unsigned_map();
  }

  struct Layer {
    bool eight_bit = false;
    std::array<Buffer<float, Space>, 2> fp32;
    std::array<Buffer<std::uint8_t, Space>, 2> codes;
    std::array<Buffer<float, Space>, 2> scales;

    // Plain host views of host-accessible memory (pinned too), as the host step takes them.
    BasicQuantizedMoment<HandedOutMemory<Space>> moment(std::size_t k) {
      return {handed_out(codes[k].view()), handed_out(scales[k].view())};
    }
  };

  static Layer full_layer(std::size_t n) {
    Layer layer;
    for (auto& moment : layer.fp32)
      moment = Buffer<float, Space>(n);
    return layer;
  }
  // Zero moments: every code that of 0, every scale 0.
  Layer quantized_layer(std::size_t n) const {
    Layer layer;
    layer.eight_bit = true;
    for (std::size_t k = 0; k < 2; ++k) {
      layer.codes[k] = Buffer<std::uint8_t, Space>(n);
      if (const std::uint8_t zero_code = map(k).nearest(0.0f); zero_code != 0)
        detail::write_on_host(exec_, layer.codes[k].view(), [&](View<std::uint8_t> codes) {
          std::fill(codes.begin(), codes.end(), zero_code);
        });
      layer.scales[k] = Buffer<float, Space>(quantized_blocks(n));
    }
    return layer;
  }

  Exec exec_;
  std::vector<Layer> layers_;
};

} // namespace zero
