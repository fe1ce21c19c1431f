#pragma once
// train_gpt's command line. A DeepSpeed config (--config) sets the engine's options and the
// activation checkpointing; flags given explicitly win over it.

#include "gpt.hpp"

#include <zero/config/json.hpp>
#include <zero/core/dtype.hpp>
#include <zero/core/error.hpp>
#include <zero/residual/checkpoint_plan.hpp>

#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace train_gpt {

inline const char* usage =
    "usage: mpirun -np N train_gpt [options]\n"
    "  --layers N --heads N --embd N --seq N   the model (default 4, 4, 64, 64); vocabulary: "
    "bytes\n"
    "  --batch N               global batch: sequences per step over all ranks (default 16)\n"
    "  --steps N               optimizer steps (default 50)\n"
    "  --stage 0..3            ZeRO stage (default 3)\n"
    "  --dtype fp32|fp16|bf16  compute type; fp16 scales the loss dynamically (default fp32)\n"
    "  --optimizer adam|adamw, --lr X (default 1e-3), --weight-decay X (default 0)\n"
    "  --checkpoint-activations K   keep K block inputs and recompute the rest in backward\n"
    "                          (0: off, the default; the config's number_checkpoints)\n"
    "  --contiguous-memory     kept activations in one arena sized by the first step\n"
    "  --kept-inputs-nvme DIR  the kept block inputs on the NVMe tier, in DIR, between forward\n"
    "                          and backward\n"
    "  --data FILE             the token stream: FILE's bytes (default: the repository's docs)\n"
    "  --init-npy DIR          initial weights, one .npy per parameter, named as nanoGPT names\n"
    "                          them (transformer.h.0.attn.c_attn.weight.npy, ...)\n"
    "  --save-npy DIR          write the final weights the same way\n"
    "  --config FILE           DeepSpeed ds_config.json\n"
    "  --deterministic         bitwise reproducible across stages\n"
    "  --json FILE             loss per step, tokens per second, activation memory\n"
    "  --seed N                initial weights without --init-npy (default 1)\n"
    "  --print-every N         loss lines (default: about 10 per run)\n";

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
  std::optional<zero::config::Config> ds;
  unsigned seed = 1;
  int print_every = 0;
};

// Up to the largest int: every count here is one (--steps, --stage), or meaningless beyond it.
inline std::size_t positive(const std::string& flag, const std::string& value,
                            bool zero_ok = false) {
  std::size_t used = 0;
  long long n = -1;
  try {
    n = std::stoll(value, &used);
  } catch (const std::exception&) {
  }
  zero::require(used == value.size() && (n > 0 || (zero_ok && n == 0)) &&
                    n <= std::numeric_limits<int>::max(),
                flag + ": expected a " + (zero_ok ? "non-negative" : "positive") +
                    " integer up to " + std::to_string(std::numeric_limits<int>::max()) +
                    ", got '" + value + "'");
  return static_cast<std::size_t>(n);
}

inline double number(const std::string& flag, const std::string& value) {
  std::size_t used = 0;
  double x = -1;
  try {
    x = std::stod(value, &used);
  } catch (const std::exception&) {
  }
  zero::require(used == value.size() && x >= 0,
                flag + ": expected a non-negative number, got '" + value + "'");
  return x;
}

inline Flags parse(int argc, char** argv) {
  Flags f;
  // The config first: flags override what it says.
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string_view(argv[i]) == "--config") f.config = argv[i + 1];
  if (!f.config.empty()) {
    f.ds = zero::config::from_json_file(f.config);
    if (f.ds->train_batch_size) f.batch = static_cast<std::size_t>(*f.ds->train_batch_size);
    if (f.ds->optimizer) {
      const auto& o = *f.ds->optimizer;
      zero::require(o.type != zero::config::OptimizerType::sgd,
                    f.config + ": train_gpt trains with Adam or AdamW, not SGD");
      // DeepSpeed's "Adam" decouples weight decay (adam_w_mode) unless told not to.
      f.optimizer = o.decoupled_weight_decay() ? "adamw" : "adam";
      f.lr = o.lr;
      f.weight_decay = o.weight_decay;
    }
    f.stage = f.ds->zero_optimization.stage;
    f.dtype = f.ds->fp16.enabled   ? zero::DType::float16
              : f.ds->bf16.enabled ? zero::DType::bfloat16
                                   : zero::DType::float32;
    f.contiguous_memory = f.ds->activation_checkpointing.contiguous_memory_optimization;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      f.steps = -1;
      return f;
    }
    if (flag == "--deterministic") {
      f.deterministic = true;
      continue;
    }
    if (flag == "--contiguous-memory") {
      f.contiguous_memory = true;
      continue;
    }
    zero::require(i + 1 < argc, flag + " needs a value (see --help)");
    const std::string value = argv[++i];
    if (flag == "--layers")
      f.model.layers = positive(flag, value);
    else if (flag == "--heads")
      f.model.heads = positive(flag, value);
    else if (flag == "--embd")
      f.model.embd = positive(flag, value);
    else if (flag == "--seq")
      f.model.seq = positive(flag, value);
    else if (flag == "--batch")
      f.batch = positive(flag, value);
    else if (flag == "--steps")
      f.steps = static_cast<int>(positive(flag, value, true));
    else if (flag == "--stage") {
      f.stage = static_cast<int>(positive(flag, value, true));
      zero::require(f.stage <= 3, "--stage: expected 0..3, got " + value);
    } else if (flag == "--dtype") {
      zero::require(value == "fp32" || value == "fp16" || value == "bf16",
                    "--dtype: expected fp32, fp16 or bf16, got " + value);
      f.dtype = zero::parse_dtype(value);
    } else if (flag == "--optimizer") {
      zero::require(value == "adam" || value == "adamw",
                    "--optimizer: expected adam or adamw, got " + value);
      f.optimizer = value;
    } else if (flag == "--lr")
      f.lr = number(flag, value);
    else if (flag == "--weight-decay")
      f.weight_decay = number(flag, value);
    else if (flag == "--checkpoint-activations")
      f.checkpoints = positive(flag, value, true);
    else if (flag == "--kept-inputs-nvme")
      f.kept_inputs_nvme = value;
    else if (flag == "--data")
      f.data = value;
    else if (flag == "--init-npy")
      f.init_npy = value;
    else if (flag == "--save-npy")
      f.save_npy = value;
    else if (flag == "--config") {
    } else if (flag == "--json")
      f.json = value;
    else if (flag == "--seed")
      f.seed = static_cast<unsigned>(positive(flag, value, true));
    else if (flag == "--print-every")
      f.print_every = static_cast<int>(positive(flag, value));
    else
      zero::fail(zero::ErrorKind::invalid_argument, "unknown option '" + flag + "' (see --help)");
  }
  zero::require(f.model.embd % f.model.heads == 0, "--embd " + std::to_string(f.model.embd) +
                                                       " does not split into " +
                                                       std::to_string(f.model.heads) + " heads");
  return f;
}

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
