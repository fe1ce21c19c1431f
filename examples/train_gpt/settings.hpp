#pragma once
// What a train_gpt run is asked to do (flags.hpp reads it from the command line and the config),
// apart from the parser, so that the training code does not compile CLI11.

#include "gpt.hpp"
#include "product_precision.hpp"

#include <zero/config/config.hpp>
#include <zero/core/dtype.hpp>
#include <zero/engine/options.hpp>
#include <zero/residual/checkpoint_plan.hpp>

#include <cstddef>
#include <optional>
#include <string>

namespace train_gpt {

struct Flags {
  gpt::Config model;
  std::size_t batch = 16;
  int steps = 50; // negative: --help
  int stage = 3;
  zero::DType dtype = zero::DType::float32;
  std::string optimizer = "adam";
  double lr = 1e-3, weight_decay = 0;
  // Adam's and AdamW's moments in fp32 (32) or in 8-bit blocks (8): --moment-bits, or the
  // config's optimizer.params.moment_bits.
  int moment_bits = 32;
  // The master weights in fp32 (0) or split into the compute weight and an 8- or 16-bit residual:
  // --master-residual-bits, or the config's optimizer.params.master_residual_bits.
  int master_residual_bits = 0;
  std::optional<std::size_t> checkpoints; // --checkpoint-activations
  bool contiguous_memory = false, deterministic = false;
  bool partition_activations = false; // ZeRO-R's Pa over the tensor-parallel group
  bool kept_inputs_cpu = false;       // --device cuda: the kept block inputs in host memory
  std::string data, init_npy, save_npy, config, json, kept_inputs_nvme;
  std::string save_checkpoint, load_checkpoint;
  std::optional<zero::config::Config> ds;
  unsigned seed = 1;
  int print_every = 0;
  // Where the model and its states live: "host", or "cuda" (device_training.hpp, run_device.hpp).
  std::string device = "host";
  // The device model's matrix products (the host model's are fp32): --products, by default bf16
  // with --device cuda --dtype bf16.
  gpt::ProductPrecision products = gpt::ProductPrecision::fp32;
};

inline zero::MomentStorage moment_storage(const Flags& f) {
  return f.moment_bits == 8 ? zero::MomentStorage::blockwise_8bit : zero::MomentStorage::fp32;
}
inline zero::MasterStorage master_storage(const Flags& f) {
  return f.master_residual_bits == 8    ? zero::MasterStorage::split_8bit
         : f.master_residual_bits == 16 ? zero::MasterStorage::split_16bit
                                        : zero::MasterStorage::fp32;
}

// The checkpointing the run asks for: the flag, else the config's section, else none. With
// partitioned activations the kept inputs are cut over `partition`, the tensor-parallel group
// (parse() refused them without one).
inline zero::ActivationCheckpointing checkpointing(const Flags& f,
                                                   zero::ActivationPartition* partition = nullptr) {
  zero::ActivationCheckpointing a;
  if (f.ds) {
    zero::config::ActivationCheckpointingConfig section = f.ds->activation_checkpointing;
    section.partition_activations = section.cpu_checkpointing = false; // in f, checked by parse()
    a = zero::ActivationCheckpointing::from_config(section, f.model.layers);
  }
  if (f.checkpoints) a.number_checkpoints = *f.checkpoints;
  a.contiguous_memory = f.contiguous_memory;
  if (f.partition_activations) a.partition = partition;
  a.kept_inputs_in_host_memory = f.kept_inputs_cpu;
  return a;
}

} // namespace train_gpt
