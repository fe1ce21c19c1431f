#pragma once
// train_mlp's command line, read by CLI11 (which writes --help). A DeepSpeed config (--config)
// sets defaults; flags given explicitly win over it.

#include "settings.hpp"

#include <zero/config/auto_values.hpp>
#include <zero/config/batch.hpp>
#include <zero/config/json.hpp>
#include <zero/core/dtype.hpp>
#include <zero/core/error.hpp>

#include <command_line/parse.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace train {

inline std::vector<std::size_t> parse_widths(std::string_view text) {
  std::vector<std::size_t> widths;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string part(text.substr(pos, comma - pos));
    try {
      std::size_t used = 0;
      const long v = std::stol(part, &used);
      if (used != part.size() || v <= 0) throw 0;
      widths.push_back(static_cast<std::size_t>(v));
    } catch (...) {
      zero::fail(zero::ErrorKind::invalid_argument,
                 "--layers: '" + part + "' is not a positive width");
    }
    pos = comma + 1;
  }
  zero::require(widths.size() >= 2, "--layers needs at least an input and an output width");
  return widths;
}

using FlagPairs = std::vector<std::pair<std::string, std::string>>;

// Sets what each flag of `pairs` says (--config excepted: parse reads it).
inline void apply_flags(Flags& f, const FlagPairs& pairs) {
  constexpr double int_max = std::numeric_limits<int>::max();
  constexpr double unsigned_max = std::numeric_limits<unsigned>::max();
  constexpr double size_max =
      0x1p53; // sizes beyond 2^53 mean nothing here; a double holds all below
  // Named references, not a structured binding: clang before 16 cannot capture one in a lambda.
  for (const auto& pair : pairs) {
    const std::string& flag = pair.first;
    const std::string& value = pair.second;
    auto number = [&] {
      try {
        std::size_t used = 0;
        const double v = std::stod(value, &used);
        if (used == value.size()) return v;
      } catch (...) {
      }
      zero::fail(zero::ErrorKind::invalid_argument, flag + ": '" + value + "' is not a number");
    };
    // A whole number that the field it sets holds (casting a larger double is undefined).
    auto whole = [&](double minimum, double maximum) {
      const double v = number();
      zero::require(v >= minimum && v <= maximum && v == std::floor(v),
                    flag + ": expected a whole number from " +
                        std::to_string(std::llround(minimum)) + " to " +
                        std::to_string(std::llround(maximum)) + ", got " + value);
      return v;
    };
    if (flag == "--help" || flag == "-h") {
      f.steps = -1;
    } else if (flag == "--config") {
    } else if (flag == "--stage") {
      f.stage = int(whole(0, int_max));
      zero::require(f.stage <= 3, "--stage: expected 0..3, got " + value);
    } else if (flag == "--steps")
      f.steps = int(whole(0, int_max));
    else if (flag == "--batch")
      f.batch = std::size_t(whole(1, size_max));
    else if (flag == "--layers")
      f.shape.widths = parse_widths(value);
    else if (flag == "--activation") {
      zero::require(value == "tanh" || value == "gelu",
                    "--activation: expected tanh or gelu, got " + value);
      f.shape.activation = value == "tanh" ? mlp::Activation::tanh : mlp::Activation::gelu;
    } else if (flag == "--loss") {
      zero::require(value == "mse" || value == "ce", "--loss: expected mse or ce, got " + value);
      f.shape.loss = value == "mse" ? mlp::Loss::mse : mlp::Loss::cross_entropy;
    } else if (flag == "--dtype") {
      zero::require(value == "fp32" || value == "fp16" || value == "bf16",
                    "--dtype: expected fp32, fp16 or bf16, got " + value);
      f.dtype = zero::parse_dtype(value);
    } else if (flag == "--grad-accum")
      f.grad_accum = int(whole(1, int_max));
    else if (flag == "--clip")
      f.clip = number();
    else if (flag == "--deterministic")
      f.deterministic = true;
    else if (flag == "--optimizer") {
      zero::require(value == "adam" || value == "adamw" || value == "sgd" || value == "lamb",
                    "--optimizer: expected adam, adamw, sgd or lamb, got " + value);
      f.optimizer = value;
    } else if (flag == "--lr")
      f.lr = number();
    else if (flag == "--weight-decay")
      f.weight_decay = number();
    else if (flag == "--momentum")
      f.momentum = number();
    else if (flag == "--moment-bits") {
      f.moment_bits = int(whole(8, 32));
      zero::require(f.moment_bits == 8 || f.moment_bits == 32,
                    "--moment-bits: expected 8 or 32, got " + value);
    } else if (flag == "--master-residual-bits") {
      f.master_residual_bits = int(whole(0, 16));
      zero::require(f.master_residual_bits == 0 || f.master_residual_bits == 8 ||
                        f.master_residual_bits == 16,
                    "--master-residual-bits: expected 8, 16 or 0 (an fp32 master), got " + value);
    } else if (flag == "--bucket")
      f.bucket = std::size_t(whole(1, size_max));
    else if (flag == "--data-npy")
      f.data_npy = value;
    else if (flag == "--data-rows")
      f.data_rows = std::size_t(whole(1, size_max));
    else if (flag == "--init-npy")
      f.init_npy = value;
    else if (flag == "--save-npy")
      f.save_npy = value;
    else if (flag == "--json")
      f.json = value;
    else if (flag == "--save-checkpoint")
      f.save_checkpoint = value;
    else if (flag == "--save-every")
      f.save_every = int(whole(1, int_max));
    else if (flag == "--load-checkpoint")
      f.load_checkpoint = value;
    else if (flag == "--async-checkpoint")
      f.async_checkpoint = true;
    else if (flag == "--seed")
      f.seed = unsigned(whole(0, unsigned_max));
    else if (flag == "--print-every")
      f.print_every = int(whole(1, int_max));
    else if (flag == "--nvme") {
      f.optimizer_on_nvme = true;
      f.nvme_path = value;
    } else if (flag == "--nvme-params")
      f.parameters_on_nvme = true;
    else if (flag == "--offload-optimizer")
      f.optimizer_on_cpu = true;
    else if (flag == "--offload-param")
      f.parameters_on_cpu = true;
    else if (flag == "--delayed-update-after")
      f.delayed_update_after = int(whole(0, int_max));
    else if (flag == "--speculative-update")
      f.speculative_update = true;
    else if (flag == "--offload-ratio") {
      f.offload_ratio = number();
      zero::require(f.offload_ratio > 0 && f.offload_ratio <= 1,
                    "--offload-ratio: the share of the update run on the CPU, in (0, 1], got " +
                        value);
    } else if (flag == "--sub-group-size")
      f.sub_group_size = std::size_t(whole(1, size_max));
    else if (flag == "--remove-stale-swap")
      f.remove_stale_swap = true;
    else if (flag == "--no-reference-pass")
      f.reference_pass = false;
    else if (flag == "--quantized-weights")
      f.quantized_weights = true;
    else if (flag == "--quantized-gradients")
      f.quantized_gradients = true;
    else if (flag == "--gradient-bits")
      f.gradient_bits = int(whole(4, 8));
    else if (flag == "--quantization-block")
      f.quantization_block = std::size_t(whole(1, size_max));
    else if (flag == "--hpz")
      f.hpz = int(whole(1, int_max));
    else if (flag == "--device") {
      zero::require(value == "host" || value == "cuda",
                    "--device: expected host or cuda, got " + value);
      f.device = value;
    } else if (flag == "--communicator") {
      zero::require(value == "auto" || value == "nccl" || value == "staged",
                    "--communicator: expected auto, nccl or staged, got " + value);
      f.communicator = value;
    } else
      zero::fail(zero::ErrorKind::invalid_argument, "unknown option '" + flag + "' (see --help)");
  }
}

// The program's own values, where a config leaves them to it with "auto" (as Hugging Face's Trainer
// fills them): the flags given, over train_mlp's defaults.
inline zero::config::TrainerValues trainer_values(const Flags& program, int world_size) {
  zero::config::TrainerValues v;
  const std::size_t share = std::size_t(program.grad_accum) * std::size_t(world_size);
  if (program.batch % share == 0) v.micro_batch_per_rank = std::int64_t(program.batch / share);
  v.gradient_accumulation_steps = program.grad_accum;
  v.lr = program.lr;
  v.betas = std::array<double, 2>{0.9, 0.999}; // zero::Adam's defaults, which train_mlp keeps
  v.eps = 1e-8;
  v.weight_decay = program.weight_decay;
  v.max_grad_norm = program.clip;
  v.dtype = program.dtype == zero::DType::float16    ? "fp16"
            : program.dtype == zero::DType::bfloat16 ? "bf16"
                                                     : "fp32";
  v.total_steps = program.steps;
  v.hidden_size =
      std::int64_t(*std::max_element(program.shape.widths.begin(), program.shape.widths.end()));
  return v;
}

// `world_size` derives the batch sizes a --config leaves out (DeepSpeed's batch triple).
namespace detail {

// The command line: what each flag means, for --help. parse takes the values CLI11 collected, in
// the order given, and applies them with apply_flags, so that a value given twice is checked
// both times and the last one counts.
inline void describe(CLI::App& app) {
  app.description("A multilayer perceptron trained with the engine.\n"
                  "usage: mpirun -np N train_mlp [options]\n"
                  "A DeepSpeed config (--config) sets defaults; flags given explicitly win over "
                  "it.");
  app.get_formatter()->column_width(34);
  // Unknown arguments are collected and reported by parse in the example's own words. No flag
  // takes `=true` or `=false`.
  app.allow_extras();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_help_flag("-h,--help", "this text")->disable_flag_override();
  // `what` a const std::string: CLI11 takes it for a description, not a variable to set.
  const auto option = [&](const char* name, const char* value, const std::string& what) {
    app.add_option(name, what)->type_name(value);
  };
  const auto flag = [&](const char* name, const std::string& what) {
    app.add_flag(name, what)->disable_flag_override();
  };
  option("--stage", "0..3", "ZeRO stage (default 3)");
  option("--steps", "N", "optimizer steps (default 200)");
  option("--batch", "N", "global batch: rows per step over all ranks and micro-steps (default 64)");
  option("--layers", "24,40,33,8", "widths from input to output (default 32,512,512,512,8)");
  option("--activation", "tanh|gelu", "between layers (default tanh)");
  option("--loss", "mse|ce", "mean squared error or cross-entropy (default mse)");
  option("--dtype", "fp32|fp16|bf16",
         "compute type; fp16/bf16 keep fp32 master weights (default fp32)");
  option("--grad-accum", "N", "micro-steps per step (default 1)");
  option("--clip", "X", "clip gradients to global L2 norm X (default off)");
  flag("--deterministic", "bitwise reproducible across stages and bucket sizes");
  option("--optimizer", "adam|adamw|sgd|lamb", "(default adam)");
  option("--lr", "X", "learning rate (default 1e-3)");
  option("--weight-decay", "X", "(default 0)");
  option("--momentum", "X", "sgd's (default 0.9)");
  option("--moment-bits", "8|32",
         "adam's and adamw's moments in fp32 or in 8-bit blocks of 2048\n"
         "(default 32; also optimizer.params.moment_bits in --config)");
  option("--master-residual-bits", "8|16",
         "keep each fp16/bf16 master as its compute weight plus a residual\n"
         "of 8 or 16 bits instead of fp32 (default: fp32; also\n"
         "optimizer.params.master_residual_bits in --config)");
  option("--bucket", "N", "reduction bucket, elements (default 65536; DeepSpeed's is 5e8)");
  option("--config", "FILE",
         "DeepSpeed ds_config.json (flags given explicitly win); its\n"
         "offload_optimizer/offload_param \"nvme\" put states on NVMe");
  option("--nvme", "DIR",
         "fp32 master weights and optimizer states on the NVMe tier, in DIR\n"
         "(without --config: a pipelined step, pipeline_read/write on)");
  flag("--nvme-params", "with --nvme and --stage 3: the parameter shards there too (with\n"
                        "--device cuda, each layer's block read to the host, copied to the\n"
                        "GPU and gathered there when used)");
  flag("--offload-optimizer", "with --device cuda: ZeRO-Offload, the fp32 master weights and\n"
                              "optimizer states in host memory, updated by the CPU (also\n"
                              "offload_optimizer.device \"cpu\" in --config; --nvme DIR puts them\n"
                              "on NVMe through the host)");
  flag("--offload-param", "with --offload-optimizer and --stage 3: ZeRO-Infinity's\n"
                          "offload_param, the parameter shards in pinned host memory, each\n"
                          "layer's copied to the GPU and gathered there when used (also\n"
                          "offload_param.device \"cpu\" in --config; docs/zero-infinity-gpu.md)");
  flag("--speculative-update",
       "with --offload-optimizer: each layer's CPU update starts once its\n"
       "gradient has reached the host, during backward, and is undone when\n"
       "the step is skipped or clipped (also offload_optimizer.super_offload\n"
       "in --config; docs/zero-offload.md)");
  option("--offload-ratio", "R",
         "with --offload-optimizer: the CPU updates this share of each\n"
         "layer's block, the GPU the rest, in device memory, at the same\n"
         "time (default 1; offload_optimizer.ratio in --config; prints a\n"
         "suggested ratio from both sides' measured times)");
  option("--delayed-update-after", "N",
         "with --offload-optimizer: after N updates, each step's CPU\n"
         "update overlaps the next step, which uses the weights before it\n"
         "(ZeRO-Offload's delayed parameter update, docs/zero-offload.md)");
  flag("--quantized-weights", "stage 3 gathers weights as int8 blocks (ZeRO++'s qwZ; also\n"
                              "zero_quantized_weights in --config)");
  flag("--quantized-gradients", "stages 1-3: gradients cross between nodes as 4-bit blocks\n"
                                "(ZeRO++'s qgZ; also zero_quantized_gradients in --config)");
  option("--gradient-bits", "N", "bits per quantized gradient value: 4 (default) or 8");
  option("--quantization-block", "N", "values per quantized block's scale (default 256)");
  option("--hpz", "N",
         "stage 3: backward gathers within groups of N consecutive ranks,\n"
         "e.g. a node's (ZeRO++'s hpZ; zero_hpz_partition_size)");
  option("--sub-group-size", "N", "elements per sub-group of the NVMe optimizer step");
  flag("--remove-stale-swap", "delete swap files a crashed run left in DIR instead of refusing");
  flag("--no-reference-pass", "do not time the fused optimizer pass alone on fresh buffers (they\n"
                              "hold the rank's share again, 20 bytes per fp32 element); always\n"
                              "skipped with optimizer states on NVMe");
  option("--data-rows", "N",
         "rows of the synthetic teacher task (default max(4096, 4 x batch));\n"
         "labelling them runs the teacher, a forward pass per row");
  option("--data-npy", "DIR", "train on DIR/x.npy (rows x inputs) and DIR/y.npy (rows x outputs)");
  option("--init-npy", "DIR", "initial weights DIR/layer{i}.weight.npy, layer{i}.bias.npy");
  option("--save-npy", "DIR", "write the final weights the same way (only then are they gathered)");
  option("--json", "FILE", "loss per step, memory by kind, communication, step times");
  option("--save-checkpoint", "DIR",
         "save a checkpoint into DIR (tag stepK) at the end, and every\n"
         "--save-every K steps");
  option("--save-every", "K", "with --save-checkpoint: a checkpoint every K steps");
  flag("--async-checkpoint", "with --save-checkpoint: write it in the background");
  option("--load-checkpoint", "DIR",
         "resume from DIR's latest checkpoint (or DIR, one checkpoint), saved\n"
         "at any rank count or stage; --steps stays the run's total");
  option("--seed", "N", "synthetic data and initial weights (default 1)");
  option("--print-every", "N", "loss lines (default: about 10 per run)");
  option("--device", "host|cuda",
         "where the model states and the model's forward and backward run\n"
         "(default host); cuda needs --dtype bf16 or fp16 (docs/gpu-engine.md)");
  option("--communicator", "auto|nccl|staged",
         "with --device cuda: NCCL (a GPU per rank), or device\n"
         "buffers staged through pinned host memory over MPI (ranks that\n"
         "share a GPU); auto picks NCCL when every rank has a GPU of its own");
}

// The flags given, in their order, with their values ("1" for a flag without one).
inline FlagPairs read_command_line(int argc, char** argv) {
  CLI::App app{"", "train_mlp"};
  describe(app);
  // "--steps needs a value (see --help)", "--deterministic takes no value (see --help)". --help is
  // one of the pairs: apply_flags answers it, after checking the rest.
  (void)command_line::parse<zero::Error>(app, argc, argv, {.after_message = " (see --help)"},
                                         zero::ErrorKind::invalid_argument);
  for (const std::string& extra : app.remaining())
    zero::fail(zero::ErrorKind::invalid_argument, "unknown option '" + extra + "' (see --help)");
  // parse_order has each option once per value it took; the k-th time is its k-th result.
  FlagPairs pairs;
  std::map<const CLI::Option*, std::size_t> taken;
  for (const CLI::Option* option : app.parse_order()) {
    const std::size_t k = taken[option]++;
    const bool flag = option->get_expected_max() == 0;
    pairs.push_back({option->get_name(), flag ? "1" : option->results().at(k)});
  }
  return pairs;
}

} // namespace detail

// --help, as CLI11 writes it.
inline std::string help_text() {
  CLI::App app{"", "train_mlp"};
  detail::describe(app);
  return app.help();
}

// `world_size` derives the batch sizes a --config leaves out (DeepSpeed's batch triple). Throws
// zero::Error naming the flag (or the config's key) when the command line is bad; --help: steps
// is negative.
inline Flags parse(int argc, char** argv, int world_size = 1) {
  Flags f;
  const FlagPairs pairs = detail::read_command_line(argc, argv);
  // The config first, so that explicit flags override it.
  for (const auto& [flag, value] : pairs)
    if (flag == "--config") f.config = value;
  if (!f.config.empty()) {
    Flags program;
    apply_flags(program, pairs);
    zero::config::ParseOptions options;
    options.auto_values = trainer_values(program, world_size).auto_values(world_size);
    f.ds = zero::config::from_json_file(f.config, options);
    const auto& c = *f.ds;
    f.stage = c.zero_optimization.stage;
    f.quantized_weights = c.zero_optimization.zero_quantized_weights;
    f.quantized_gradients = c.zero_optimization.zero_quantized_gradients;
    f.hpz = static_cast<int>(c.zero_optimization.zero_hpz_partition_size);
    f.dtype = c.fp16.enabled   ? zero::DType::float16
              : c.bf16.enabled ? zero::DType::bfloat16
                               : zero::DType::float32;
    f.clip = c.gradient_clipping;
    f.bucket = static_cast<std::size_t>(c.zero_optimization.reduce_bucket_size);
    // DeepSpeed's batch triple: train_batch_size = micro batch x accumulation x ranks, the sizes
    // not given derived from those that are, and refused (showing the arithmetic) if they
    // disagree. --batch or --grad-accum replace the config's sizes altogether.
    const bool batch_flags = std::any_of(pairs.begin(), pairs.end(), [](const auto& pair) {
      return pair.first == "--batch" || pair.first == "--grad-accum";
    });
    if (batch_flags) {
      // The flags decide (checked against the ranks in main).
    } else if (c.train_batch_size || c.train_micro_batch_size_per_gpu) {
      const zero::config::BatchSizes sizes =
          zero::config::resolve_batch_sizes(c, world_size, f.config);
      f.batch = static_cast<std::size_t>(sizes.train_batch_size);
      f.grad_accum = static_cast<int>(std::min<std::int64_t>(sizes.gradient_accumulation_steps,
                                                             std::numeric_limits<int>::max()));
    } else if (c.gradient_accumulation_steps) {
      f.grad_accum = static_cast<int>(*c.gradient_accumulation_steps);
    }
    if (c.optimizer) {
      const auto& o = *c.optimizer;
      // DeepSpeed's "Adam" decouples weight decay (adam_w_mode) unless told not to.
      f.optimizer = o.type == zero::config::OptimizerType::sgd    ? "sgd"
                    : o.type == zero::config::OptimizerType::lamb ? "lamb"
                    : o.decoupled_weight_decay()                  ? "adamw"
                                                                  : "adam";
      f.lr = o.lr;
      f.weight_decay = o.weight_decay;
      f.momentum = o.momentum;
      f.moment_bits = o.moment_bits;
      f.master_residual_bits = o.master_residual_bits;
    }
    using zero::config::OffloadDevice;
    const auto& z = c.zero_optimization;
    f.optimizer_on_nvme = z.offload_optimizer.device == OffloadDevice::nvme;
    f.optimizer_on_cpu = z.offload_optimizer.device == OffloadDevice::cpu;
    f.speculative_update = z.offload_optimizer.super_offload;
    f.offload_ratio = z.offload_optimizer.ratio;
    f.parameters_on_nvme = z.offload_param.device == OffloadDevice::nvme;
    f.parameters_on_cpu = z.offload_param.device == OffloadDevice::cpu;
  }
  apply_flags(f, pairs);
  // Errors name what set the value: the flag when it was given, else the config's key.
  auto flagged = [&](const char* flag) {
    return std::any_of(pairs.begin(), pairs.end(),
                       [&](const auto& pair) { return pair.first == flag; });
  };
  auto named = [&](const char* flag, const char* key) -> std::string {
    return flagged(flag) || !f.ds ? std::string(flag) : f.config + ": " + key;
  };
  const std::string stage =
      " (" + named("--stage", "zero_optimization.stage") + " is " + std::to_string(f.stage) + ")";
  const std::string parameters_on_nvme =
      "parameters on NVMe (" +
      named("--nvme-params", "zero_optimization.offload_param.device \"nvme\"") + ")";
  zero::require(!f.parameters_on_nvme || f.stage == 3,
                parameters_on_nvme + " need ZeRO stage 3" + stage);
  zero::require(!f.parameters_on_nvme || f.optimizer_on_nvme,
                parameters_on_nvme + " need the optimizer states on NVMe too (" +
                    named("--nvme", "zero_optimization.offload_optimizer.device \"nvme\"") + ")");
  zero::require(!f.optimizer_on_nvme || f.stage >= 1,
                "optimizer states on NVMe (" +
                    named("--nvme", "zero_optimization.offload_optimizer.device \"nvme\"") +
                    ") need ZeRO stage 1, 2 or 3 (stage 0 shards nothing)" + stage);
  // The reference pass would hold in memory the very states the tier keeps on disk.
  if (f.optimizer_on_nvme) f.reference_pass = false;
  zero::require(!f.save_checkpoint.empty() || (f.save_every == 0 && !f.async_checkpoint),
                "--save-every and --async-checkpoint need --save-checkpoint DIR");
  zero::require(f.hpz == 1 || f.stage == 3,
                "--hpz (ZeRO++'s secondary weight partition) needs --stage 3");
  zero::require(!f.quantized_weights || f.stage == 3,
                "quantized weights (qwZ) quantize stage 3's weight gathers: they need --stage 3");
  zero::require(!f.quantized_gradients || f.stage >= 1,
                "quantized gradients (qgZ) quantize the gradients' reduce-scatter: they need "
                "--stage 1, 2 or 3");
  zero::require(f.gradient_bits == 4 || f.gradient_bits == 8, "--gradient-bits must be 4 or 8");
  zero::require(!f.quantization_block || f.quantized_weights || f.quantized_gradients,
                "--quantization-block needs --quantized-weights or --quantized-gradients");
  if (f.device == "cuda") {
    // What the GPU engine refuses (docs/gpu-engine.md), refused here by the name that set it.
    zero::require(f.dtype != zero::DType::float32,
                  "--device cuda computes in bf16 or fp16 (train_mlp's device engines are "
                  "compiled for those): give --dtype bf16 or --dtype fp16",
                  zero::ErrorKind::unsupported);
    // ZeRO-Offload (docs/zero-offload.md): the optimizer states in host memory or on NVMe.
    const std::string on_cpu =
        named("--offload-optimizer", "zero_optimization.offload_optimizer.device \"cpu\"");
    const std::string on_nvme =
        named("--nvme", "zero_optimization.offload_optimizer.device \"nvme\"");
    zero::require(!(f.optimizer_on_cpu && f.optimizer_on_nvme),
                  on_cpu + " and " + on_nvme +
                      ": the optimizer states go to one place, host memory or NVMe");
    zero::require(!f.optimizer_on_cpu || f.stage >= 1,
                  "offloading the optimizer (" + on_cpu +
                      ") needs ZeRO stage 1, 2 or 3, as DeepSpeed's" + stage);
    zero::require(f.optimizer != "lamb" || f.optimizer_on_cpu,
                  f.optimizer_on_nvme
                      ? "--device cuda: LAMB's step on the NVMe tier is not built (" + on_nvme +
                            "); offload to host memory (--offload-optimizer) or use adam, adamw "
                            "or sgd"
                      : std::string("--device cuda: LAMB's step runs on the host; offload the "
                                    "optimizer (--offload-optimizer) or use adam, adamw or sgd"),
                  zero::ErrorKind::unsupported);
    zero::require(!f.parameters_on_nvme || !f.parameters_on_cpu,
                  parameters_on_nvme + " and " +
                      named("--offload-param", "zero_optimization.offload_param.device \"cpu\"") +
                      ": the parameter shards go to one place, host memory or NVMe");
    // ZeRO-Infinity's offload_param (docs/zero-infinity-gpu.md): stage 3's shards in host memory.
    const std::string param_on_cpu =
        named("--offload-param", "zero_optimization.offload_param.device \"cpu\"");
    zero::require(!f.parameters_on_cpu || f.stage == 3,
                  "offloading the parameters (" + param_on_cpu +
                      ") needs ZeRO stage 3, as DeepSpeed's" + stage);
    zero::require(!f.parameters_on_cpu || f.optimizer_on_cpu || f.optimizer_on_nvme,
                  "offloading the parameters (" + param_on_cpu +
                      ") needs the optimizer states offloaded too (" + on_cpu + " or " + on_nvme +
                      "): the CPU's step writes the new parameter shards in host memory");
    zero::require(
        !f.parameters_on_cpu || f.offload_ratio == 1,
        "offloading the parameters (" + param_on_cpu + ") runs the whole update on the CPU: " +
            named("--offload-ratio", "zero_optimization.offload_optimizer.ratio") + " must be 1");
    zero::require(!f.async_checkpoint,
                  "--device cuda: --async-checkpoint is untested over a device; save without it",
                  zero::ErrorKind::unsupported);
    f.reference_pass = false; // the host's fused pass is no yardstick for the GPU's step
  }
  zero::require(f.communicator == "auto" || f.device == "cuda",
                "--communicator " + f.communicator + " needs --device cuda");
  // A config's "cpu" is where a host run keeps the states anyway; the flag asks for the GPU's.
  zero::require(!f.speculative_update || (f.device == "cuda" && f.optimizer_on_cpu),
                "--speculative-update needs --device cuda and --offload-optimizer (the update it "
                "starts early is the CPU's)");
  zero::require(
      f.offload_ratio == 1 || (f.device == "cuda" && f.optimizer_on_cpu),
      std::string(flagged("--offload-ratio") ? "--offload-ratio" : "offload_optimizer.ratio") +
          " below 1 needs --device cuda and --offload-optimizer (it splits the CPU's "
          "update with the GPU)");
  zero::require(f.delayed_update_after < 0 || (f.device == "cuda" && f.optimizer_on_cpu),
                "--delayed-update-after needs --device cuda and --offload-optimizer (the update it "
                "delays is the CPU's)");
  zero::require(f.device == "cuda" || !flagged("--offload-param"),
                "--offload-param needs --device cuda (without it the parameters are in host "
                "memory already)");
  // A config's "cpu" is where a host run keeps the parameters anyway.
  if (f.device != "cuda") f.parameters_on_cpu = false;
  zero::require(f.device == "cuda" || !flagged("--offload-optimizer"),
                "--offload-optimizer needs --device cuda (without it the optimizer states are in "
                "host memory already)");
  zero::require(f.clip >= 0, "--clip must be non-negative");
  zero::require(f.lr >= 0, "--lr must be non-negative");
  return f;
}

} // namespace train
