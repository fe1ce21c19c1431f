#pragma once
// What a train_gpt run is asked to do (flags.hpp reads it from the command line and the config),
// apart from the parser, so that the training code does not compile CLI11.

#include "gpt.hpp"

#include <zero/config/config.hpp>
#include <zero/core/dtype.hpp>
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
  std::optional<std::size_t> checkpoints; // --checkpoint-activations
  bool contiguous_memory = false, deterministic = false;
  std::string data, init_npy, save_npy, config, json, kept_inputs_nvme;
  std::string save_checkpoint, load_checkpoint;
  std::optional<zero::config::Config> ds;
  unsigned seed = 1;
  int print_every = 0;
};

// The checkpointing the run asks for: the flag, else the config's section, else none.
inline zero::ActivationCheckpointing checkpointing(const Flags& f) {
  zero::ActivationCheckpointing a = f.ds ? zero::ActivationCheckpointing::from_config(
                                               f.ds->activation_checkpointing, f.model.layers)
                                         : zero::ActivationCheckpointing{};
  if (f.checkpoints) a.number_checkpoints = *f.checkpoints;
  a.contiguous_memory = f.contiguous_memory;
  return a;
}

} // namespace train_gpt
