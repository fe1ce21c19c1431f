#pragma once
// What a train_mlp run is asked to do (flags.hpp reads it from the command line and the config),
// apart from the parser, so that the training code does not compile CLI11.

#include "mlp.hpp"

#include <zero/config/config.hpp>
#include <zero/core/dtype.hpp>
#include <zero/engine/options.hpp>

#include <cstddef>
#include <optional>
#include <string>

namespace train {

struct Flags {
  int stage = 3;
  int steps = 200;
  std::size_t batch = 64;
  mlp::Shape shape{{32, 512, 512, 512, 8}};
  zero::DType dtype = zero::DType::float32;
  int grad_accum = 1;
  double clip = 0;
  bool deterministic = false;
  std::string optimizer = "adam";
  double lr = 1e-3;
  double weight_decay = 0;
  double momentum = 0.9;
  // Adam's and AdamW's moments in fp32 (32) or in 8-bit blocks (8): --moment-bits, or the
  // config's optimizer.params.moment_bits.
  int moment_bits = 32;
  // The master weights in fp32 (0) or split into the compute weight and an 8- or 16-bit residual:
  // --master-residual-bits, or the config's optimizer.params.master_residual_bits.
  int master_residual_bits = 0;
  // Small enough that a model this size fills several buckets, so reduction overlaps backward.
  std::size_t bucket = 65536;
  std::string config, data_npy, init_npy, save_npy, json;
  std::string save_checkpoint, load_checkpoint;
  int save_every = 0; // 0: only at the end
  bool async_checkpoint = false;
  unsigned seed = 1;
  int print_every = 0;
  std::size_t data_rows = 0;              // 0: max(4096, 4 x batch)
  std::optional<zero::config::Config> ds; // the parsed --config
  // The NVMe tier (from --config, overridden by --nvme and friends).
  bool optimizer_on_nvme = false, parameters_on_nvme = false;
  // ZeRO-Offload with --device cuda: the optimizer states in host memory, updated by the
  // CPU (--offload-optimizer, or the config's offload_optimizer.device "cpu").
  bool optimizer_on_cpu = false;
  // ZeRO-Infinity's offload_param with --device cuda: stage 3's parameter shards in pinned host
  // memory beside the offloaded optimizer states (--offload-param, or offload_param.device "cpu").
  bool parameters_on_cpu = false;
  int delayed_update_after = -1;   // --delayed-update-after N: ZeRO-Offload's DPU after N updates
  bool speculative_update = false; // --speculative-update (or offload_optimizer.super_offload)
  double offload_ratio = 1; // --offload-ratio R (or offload_optimizer.ratio): the CPU's share
  std::string nvme_path;    // --nvme: both stores' directory, over the config's nvme_path keys
  std::optional<std::size_t> sub_group_size;
  bool remove_stale_swap = false;
  bool quantized_weights = false;   // --quantized-weights (or the config's zero_quantized_weights)
  bool quantized_gradients = false; // --quantized-gradients (or zero_quantized_gradients)
  int gradient_bits = 4;
  std::optional<std::size_t> quantization_block;
  int hpz = 1; // --hpz (or the config's zero_hpz_partition_size)
  bool reference_pass =
      true; // time the fused optimizer pass alone after training (see training.hpp)
  std::string device = "host";       // --device host|cuda: where the model states and the model are
  std::string communicator = "auto"; // --device cuda: auto|nccl|staged
};

inline zero::MomentStorage moment_storage(const Flags& f) {
  return f.moment_bits == 8 ? zero::MomentStorage::blockwise_8bit : zero::MomentStorage::fp32;
}
inline zero::MasterStorage master_storage(const Flags& f) {
  return f.master_residual_bits == 8    ? zero::MasterStorage::split_8bit
         : f.master_residual_bits == 16 ? zero::MasterStorage::split_16bit
                                        : zero::MasterStorage::fp32;
}

} // namespace train
