#pragma once
// EngineOptions: the run-time settings of a zero::Engine, with DeepSpeed's defaults. They can be
// written in code or taken from a DeepSpeed config (from_config).

#include "zero/config/config.hpp"
#include "zero/core/block_quantization.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/engine/offload_options.hpp"

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace zero {

// How the optimizer store keeps Adam's and AdamW's two moments (engine/blockwise_moments.hpp).
enum class MomentStorage {
  fp32,
  // One byte a value: blocks of 2048 values, each with its absolute maximum as an fp32 scale and
  // every value the code of the nearest of 256 values of a dynamic map (bitsandbytes' block-wise
  // 8-bit Adam). 2 + 2 * 4 / 2048 bytes per parameter for both moments instead of 8.
  blockwise_8bit,
};

constexpr const char* to_string(MomentStorage storage) noexcept {
  return storage == MomentStorage::fp32 ? "fp32" : "blockwise_8bit";
}

// How the optimizer store keeps the master weights of a float16 or bfloat16 run
// (optim/split_master.hpp).
enum class MasterStorage {
  fp32, // 4 bytes a parameter
  // The compute weight (kept by the parameter store anyway) plus a signed residual of 8 or 16 bits
  // in units of a 2^8-th or 2^16-th of the weight's ulp: 1 or 2 bytes a parameter.
  split_8bit,
  split_16bit,
};

constexpr const char* to_string(MasterStorage storage) noexcept {
  switch (storage) {
  case MasterStorage::split_8bit:
    return "split_8bit";
  case MasterStorage::split_16bit:
    return "split_16bit";
  default:
    return "fp32";
  }
}
// Bytes a parameter of the master weights, beside the compute copy.
constexpr double master_bytes_per_parameter(MasterStorage storage) noexcept {
  return storage == MasterStorage::split_8bit    ? 1.0
         : storage == MasterStorage::split_16bit ? 2.0
                                                 : 4.0;
}

struct EngineOptions {
  // The element type of the weights and gradients that forward and backward use. float32, or
  // float16 / bfloat16 with fp32 master weights.
  DType compute_dtype = DType::float32;
  // The element type gradients are reduced in: the compute type (as DeepSpeed), or float32.
  std::optional<DType> reduce_dtype;
  // Elements per reduction bucket (DeepSpeed's reduce_bucket_size).
  std::size_t reduce_bucket_elements = 500'000'000;
  // Stages 1-3: each bucket is averaged by a reduce-scatter that leaves every rank its part; false
  // all-reduces the bucket and keeps this rank's part (DeepSpeed's reduce_scatter: false), which
  // moves about twice the bytes for the same result. Stage 0 all-reduces either way.
  bool reduce_scatter = true;
  // A bucket's reduction runs while backward goes on (true), or is waited for as soon as it is
  // launched, so that no communication overlaps backward (DeepSpeed's overlap_comm: false; the
  // report's hidden fraction is then 0). Buckets stay bounded either way.
  bool overlap_comm = true;
  // Stages 1/2: the all-gather after the step moves at most this many elements per collective; a
  // larger layer is gathered in contiguous pieces of its image (DeepSpeed's allgather_bucket_size).
  std::size_t allgather_bucket_elements = 500'000'000;
  int gradient_accumulation_steps = 1;
  // Uneven shares of a batch: false (the default) gives each rank's gradient the same weight, right
  // when every rank has as many samples (PyTorch's DDP does the same). true: the gradients handed
  // over are sums over the rank's samples, each step's counts come through Engine::add_samples,
  // and step() divides by the samples of all ranks, so that every sample weighs the same wherever
  // it was (a global batch that does not divide by the ranks, a ragged last batch).
  bool weigh_by_samples = false;
  // Clip gradients to this global L2 norm; 0 turns clipping off (DeepSpeed's gradient_clipping).
  double gradient_clipping = 0.0;
  // Bitwise reproducible results whatever the stage and bucket size; with gradient accumulation,
  // stages 0 and 1 then reduce every micro-step instead of once per step.
  bool deterministic = false;
  // Stage 3: layers of fewer elements stay gathered (stage3_param_persistence_threshold), how
  // many elements to gather ahead (stage3_prefetch_bucket_size) and at most this many gathered
  // at once, prefetches included (stage3_max_live_parameters).
  std::size_t persistence_threshold = 0;
  std::size_t prefetch_elements = 50'000'000;
  std::size_t max_live_elements = 1'000'000'000;
  // Stage 3: a layer released by the caller stays gathered when the recorded order acquires it
  // again before this many elements of other acquisitions (stage3_max_reuse_distance); 0 keeps it
  // only when it is acquired next. Kept layers count against max_live_elements.
  std::size_t max_reuse_distance = 0;
  // Stage 3: gather weights as int8 with one scale per `quantization_block` values (ZeRO++'s qwZ,
  // DeepSpeed's zero_quantized_weights): forward and backward then compute with the dequantized
  // weights, within max|x| / 254 of the exact ones per block; the update stays in full precision.
  bool quantized_weights = false;
  std::size_t quantization_block = 256;
  // Stage 3: keep a secondary copy of the weights cut among groups of this many consecutive ranks
  // of the shard group (ZeRO++'s hpZ, DeepSpeed's zero_hpz_partition_size; 1: none), taken from
  // each layer's first gather of a step; later gathers of the step (backward's) stay in the
  // group, on one node when the group is a node's ranks.
  int hpz_partition_size = 1;
  // Stages 1-3: reduce-scatter gradients with every contribution, and every node's partial sum,
  // quantized to blocks of `quantization_block` values of this many bits where they cross between
  // nodes (ZeRO++'s qgZ, DeepSpeed's zero_quantized_gradients; 4 bits as in the paper, or 8).
  // Where no network is crossed (one node) gradients are reduced exactly, as DeepSpeed does.
  bool quantized_gradients = false;
  int gradient_quantization_bits = 4;
  // A run whose gradients overflow this many steps in a row stops with an error (0: never); see
  // precision/skipped_steps.hpp. Not a DeepSpeed setting: DeepSpeed skips such steps forever.
  std::int64_t max_consecutive_skipped_steps = 100;
  // The NVMe tier, for placements that put states there (stage/placement.hpp).
  NvmeOptions nvme;
  // Where a DeepSpeed config asked for optimizer states and parameters to go (none: no request);
  // the engine refuses to start when its placement keeps them elsewhere.
  config::OffloadDevice offload_optimizer = config::OffloadDevice::none;
  config::OffloadDevice offload_param = config::OffloadDevice::none;
  // ZeRO-Offload's delayed parameter update (DPU, docs/zero-offload.md): after this many updates,
  // each step's update runs on the host while the next step's forward and backward run on the
  // weights of the step before; -1: never (the default). Needs the optimizer states offloaded
  // from a device. Not a DeepSpeed setting (DeepSpeed dropped DPU).
  std::int64_t delayed_parameter_update_after = -1;
  // ZeRO-Offload's speculative update (docs/zero-offload.md): each layer's CPU update starts once
  // its gradient has reached the host, during backward, before the step knows the global norm and
  // the overflow check; a step that turns out skipped or clipped undoes it exactly and updates
  // again. The result is the step's without it, bit for bit. A config's
  // offload_optimizer.super_offload (DeepSpeed's SuperOffload, whose speculation this is). Needs
  // the optimizer states offloaded to host memory and an element-wise optimizer; not with the
  // delayed update or weigh_by_samples (whose factor is known only at the step).
  bool speculative_update = false;
  // ZeRO-Offload's CPU/GPU split (a config's offload_optimizer.ratio, ZeRO-Offload++'s Twin-Flow):
  // the share of each layer's block that the CPU updates; the rest of the master weights and
  // moments stays in device memory and is updated there, at the same time. In (0, 1]; 1 (the
  // default) updates everything on the CPU. Below 1 it needs the optimizer states offloaded to
  // host memory, fp32 master weights and moments, and an element-wise optimizer.
  double offload_ratio = 1.0;
  // Adam's and AdamW's moments in fp32 or in 8 bits (the optimizer's "moment_bits" in a config;
  // not a DeepSpeed setting). With 8 bits the layout puts every rank's block of a layer on a
  // multiple of 2048 elements, so that every stage quantizes the same blocks; layers of fewer
  // than eight_bit_min_elements elements keep fp32 moments (bitsandbytes' min_8bit_size).
  MomentStorage moments = MomentStorage::fp32;
  std::size_t eight_bit_min_elements = 4096;
  // The master weights in fp32, or split into the float16 or bfloat16 compute weight and an 8- or
  // 16-bit residual (the optimizer's "master_residual_bits" in a config; not a DeepSpeed setting).
  // Element-wise optimizers (Adam, AdamW, SGD) with their states in host memory.
  MasterStorage master = MasterStorage::fp32;

  DType reduction_dtype() const noexcept { return reduce_dtype.value_or(compute_dtype); }
  // The element type of the reduced gradient the optimizer step reads (the gradient store's
  // choice): float32 when micro-steps are added up or the reduction is in float32, else the
  // compute type.
  DType reduced_gradient_dtype() const noexcept {
    const bool wide = gradient_accumulation_steps > 1 || reduction_dtype() == DType::float32;
    return wide ? DType::float32 : compute_dtype;
  }
  std::optional<BlockQuantization> weight_quantization() const {
    if (!quantized_weights) return std::nullopt;
    return BlockQuantization{quantization_block};
  }
  std::optional<BlockQuantization> gradient_quantization() const {
    if (!quantized_gradients) return std::nullopt;
    return BlockQuantization{quantization_block, gradient_quantization_bits};
  }

  // The settings every rank must share, by name: they decide which collectives the engine makes
  // (and the weights), so ranks given different ones would hang or diverge.
  std::array<std::pair<const char*, std::uint64_t>, 28> shared_settings() const {
    return {{{"compute_dtype", std::uint64_t(compute_dtype)},
             {"reduce_dtype", std::uint64_t(reduction_dtype())},
             {"reduce_bucket_elements", reduce_bucket_elements},
             {"reduce_scatter", std::uint64_t(reduce_scatter)},
             {"overlap_comm", std::uint64_t(overlap_comm)},
             {"allgather_bucket_elements", allgather_bucket_elements},
             {"gradient_accumulation_steps", std::uint64_t(gradient_accumulation_steps)},
             {"weigh_by_samples", std::uint64_t(weigh_by_samples)},
             {"gradient_clipping", std::bit_cast<std::uint64_t>(gradient_clipping)},
             {"deterministic", std::uint64_t(deterministic)},
             {"persistence_threshold", persistence_threshold},
             {"prefetch_elements", prefetch_elements},
             {"max_live_elements", max_live_elements},
             {"max_reuse_distance", max_reuse_distance},
             {"quantized_weights", std::uint64_t(quantized_weights)},
             {"quantization_block", quantization_block},
             {"hpz_partition_size", std::uint64_t(hpz_partition_size)},
             {"quantized_gradients", std::uint64_t(quantized_gradients)},
             {"gradient_quantization_bits", std::uint64_t(gradient_quantization_bits)},
             {"max_consecutive_skipped_steps", std::uint64_t(max_consecutive_skipped_steps)},
             {"delayed_parameter_update_after", std::uint64_t(delayed_parameter_update_after)},
             {"speculative_update", std::uint64_t(speculative_update)},
             {"offload_ratio", std::bit_cast<std::uint64_t>(offload_ratio)},
             {"offload_optimizer", std::uint64_t(offload_optimizer)},
             {"offload_param", std::uint64_t(offload_param)},
             {"moments", std::uint64_t(moments)},
             {"eight_bit_min_elements", eight_bit_min_elements},
             {"master", std::uint64_t(master)}}};
  }

  void validate() const {
    require(compute_dtype == DType::float32 || compute_dtype == DType::float16 ||
                compute_dtype == DType::bfloat16,
            std::string("engine: compute_dtype must be float32, float16 or bfloat16, not ") +
                to_string(compute_dtype));
    require(reduction_dtype() == compute_dtype || reduction_dtype() == DType::float32,
            "engine: reduce_dtype must be the compute type or float32");
    require(gradient_accumulation_steps >= 1,
            "engine: gradient_accumulation_steps must be at least 1");
    require(gradient_clipping >= 0, "engine: gradient_clipping must be non-negative");
    require(delayed_parameter_update_after >= -1,
            "engine: delayed_parameter_update_after must be -1 (off) or a number of updates");
    require(!speculative_update || delayed_parameter_update_after < 0,
            "engine: speculative_update starts each step's update before its step, "
            "delayed_parameter_update_after runs it after: choose one",
            ErrorKind::unsupported);
    require(!speculative_update || !weigh_by_samples,
            "engine: speculative_update needs the gradient multiplier before the step; with "
            "weigh_by_samples it is known only there (the ranks' samples are summed by the step)",
            ErrorKind::unsupported);
    require(
        offload_ratio > 0 && offload_ratio <= 1,
        "engine: offload_ratio (offload_optimizer.ratio) is the share of the optimizer's update "
        "run on the CPU: a number in (0, 1], not " +
            std::to_string(offload_ratio) +
            " (with none of it on the CPU, keep the optimizer states in device memory: the "
            "device placement)");
    require(offload_ratio == 1 || delayed_parameter_update_after < 0,
            "engine: offload_ratio below 1 updates part of each layer on the device at the step, "
            "delayed_parameter_update_after updates the rest a step later: choose one",
            ErrorKind::unsupported);
    require(reduce_bucket_elements >= 1, "engine: reduce_bucket_elements must be at least 1");
    require(allgather_bucket_elements >= 1, "engine: allgather_bucket_elements must be at least 1");
    require(reduce_scatter || !quantized_gradients,
            "engine: quantized_gradients (zero_quantized_gradients, ZeRO++'s qgZ) quantizes the "
            "gradients' reduce-scatter; it cannot be combined with reduce_scatter = false");
    require(max_consecutive_skipped_steps >= 0,
            "engine: max_consecutive_skipped_steps must be 0 (no limit) or positive");
    require(quantization_block >= 1, "engine: quantization_block must be at least 1 value");
    require(hpz_partition_size >= 1, "engine: hpz_partition_size must be at least 1 rank");
    require(gradient_quantization_bits == 4 || gradient_quantization_bits == 8,
            "engine: gradient_quantization_bits must be 4 or 8, not " +
                std::to_string(gradient_quantization_bits));
    require(master == MasterStorage::fp32 || compute_dtype != DType::float32,
            std::string("engine: split master weights (EngineOptions::master = ") +
                to_string(master) +
                ") keep the master as the float16 or bfloat16 compute weight plus a residual; "
                "with compute_dtype float32 the compute weight is the master already",
            ErrorKind::unsupported);
    nvme.validate();
  }

  // The engine's share of a DeepSpeed config: precision, buckets, accumulation, clipping, stage 3
  // knobs, the NVMe tier. (Stage, placement, optimizer and loss scaler are types the caller picks
  // from the same config.)
  static EngineOptions from_config(const config::Config& c) {
    EngineOptions o;
    o.compute_dtype = c.fp16.enabled   ? DType::float16
                      : c.bf16.enabled ? DType::bfloat16
                                       : DType::float32;
    const auto& z = c.zero_optimization;
    o.reduce_bucket_elements = static_cast<std::size_t>(z.reduce_bucket_size);
    o.reduce_scatter = z.reduce_scatter;
    // Unset, zero overlaps at every stage: DeepSpeed's default (off below stage 3) is about GPU
    // stream memory, and overlapping changes no result.
    o.overlap_comm = z.overlap_comm.value_or(true);
    o.allgather_bucket_elements = static_cast<std::size_t>(z.allgather_bucket_size);
    if (z.stage3_max_reuse_distance)
      o.max_reuse_distance = static_cast<std::size_t>(*z.stage3_max_reuse_distance);
    if (c.gradient_accumulation_steps)
      o.gradient_accumulation_steps = static_cast<int>(*c.gradient_accumulation_steps);
    o.gradient_clipping = c.gradient_clipping;
    o.persistence_threshold =
        static_cast<std::size_t>(c.zero_optimization.stage3_param_persistence_threshold);
    o.prefetch_elements = static_cast<std::size_t>(c.zero_optimization.stage3_prefetch_bucket_size);
    o.max_live_elements = static_cast<std::size_t>(c.zero_optimization.stage3_max_live_parameters);
    o.quantized_weights = c.zero_optimization.zero_quantized_weights;
    o.hpz_partition_size = static_cast<int>(c.zero_optimization.zero_hpz_partition_size);
    o.quantized_gradients = c.zero_optimization.zero_quantized_gradients;
    o.offload_optimizer = c.zero_optimization.offload_optimizer.device;
    o.offload_param = c.zero_optimization.offload_param.device;
    o.speculative_update = c.zero_optimization.offload_optimizer.super_offload;
    o.offload_ratio = c.zero_optimization.offload_optimizer.ratio;
    o.nvme = NvmeOptions::from_config(c);
    if (c.optimizer && c.optimizer->moment_bits == 8) o.moments = MomentStorage::blockwise_8bit;
    if (c.optimizer && c.optimizer->master_residual_bits != 0)
      o.master = c.optimizer->master_residual_bits == 8 ? MasterStorage::split_8bit
                                                        : MasterStorage::split_16bit;
    return o;
  }
};

} // namespace zero
