#pragma once
// train_gpt's command line, read by CLI11 (which writes --help). A DeepSpeed config (--config)
// sets the engine's options and the activation checkpointing; flags given explicitly win over it.

#include "settings.hpp"

#include <zero/config/json.hpp>
#include <zero/core/dtype.hpp>
#include <zero/core/error.hpp>

#include <command_line/parse.hpp>

#include <limits>
#include <string>

namespace train_gpt {

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

namespace detail {

// What CLI11 reads, as text: parse converts and checks each value after it (and after the config,
// which the flags override), with the functions above.
struct Text {
  std::string layers, heads, embd, seq, batch, steps, stage, dtype, optimizer, lr, weight_decay,
      checkpoints, seed, print_every, tp, moment_bits, master_residual_bits, device, products;
};

// What --device cuda's loop (device_training.hpp) does not do yet, refused by name.
inline void require_device_run(const Flags& f) {
  const auto refuse_unless = [](bool ok, const std::string& what) {
    zero::require(ok, "--device cuda: " + what, zero::ErrorKind::unsupported);
  };
  refuse_unless(f.model.tensor_parallel == 1,
                "the model runs unsplit on the GPU; --tp is the host model's");
  refuse_unless(f.kept_inputs_nvme.empty(),
                "the kept block inputs stay in device memory; --kept-inputs-nvme is the host "
                "loop's");
  refuse_unless(f.save_checkpoint.empty() && f.load_checkpoint.empty(),
                "--save-checkpoint and --load-checkpoint are the host loop's");
  refuse_unless(!(f.ds && f.ds->scheduler),
                "the config's learning-rate schedule is the host loop's");
}

// The command line, bound to `text` and `f` (the flags and the texts it keeps). parse reads it;
// help_text prints it.
inline void describe(CLI::App& app, Text& text, Flags& f, bool& deterministic,
                     bool& contiguous_memory) {
  app.description("A GPT-2 style transformer trained with the engine and activation "
                  "checkpointing; vocabulary: bytes.\n"
                  "usage: mpirun -np N train_gpt [options]\n"
                  "A DeepSpeed config (--config) sets the engine's options and the activation "
                  "checkpointing;\nflags given explicitly win over it.");
  app.get_formatter()->column_width(34);
  // Unknown arguments are collected and reported by parse in the example's own words. A flag
  // given twice: the last one counts. No flag takes `=true` or `=false`.
  app.allow_extras();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_help_flag("-h,--help", "this text")->disable_flag_override();
  app.add_option("--layers", text.layers, "transformer blocks (default 4)")->type_name("N");
  app.add_option("--heads", text.heads, "attention heads (default 4)")->type_name("N");
  app.add_option("--embd", text.embd, "embedding width (default 64)")->type_name("N");
  app.add_option("--seq", text.seq, "sequence length (default 64)")->type_name("N");
  app.add_option("--batch", text.batch,
                 "global batch: sequences per step over all ranks (default 16)")
      ->type_name("N");
  app.add_option("--steps", text.steps, "optimizer steps (default 50)")->type_name("N");
  app.add_option("--stage", text.stage, "ZeRO stage (default 3)")->type_name("0..3");
  app.add_option("--tp", text.tp,
                 "tensor parallelism: T consecutive ranks share each layer, ZeRO\n"
                 "over the rest (default 1; heads must divide by T)")
      ->type_name("T");
  app.add_option("--dtype", text.dtype,
                 "compute type; fp16 scales the loss dynamically (default fp32)")
      ->type_name("fp32|fp16|bf16");
  app.add_option("--optimizer", text.optimizer, "(default adam)")->type_name("adam|adamw");
  app.add_option("--lr", text.lr, "learning rate (default 1e-3)")->type_name("X");
  app.add_option("--weight-decay", text.weight_decay, "(default 0)")->type_name("X");
  app.add_option("--moment-bits", text.moment_bits,
                 "the moments in fp32 or in 8-bit blocks of 2048 (default 32;\n"
                 "also optimizer.params.moment_bits in --config)")
      ->type_name("8|32");
  app.add_option("--master-residual-bits", text.master_residual_bits,
                 "keep each fp16/bf16 master as its compute weight plus a\n"
                 "residual of 8 or 16 bits instead of fp32 (default: fp32;\n"
                 "also optimizer.params.master_residual_bits in --config)")
      ->type_name("8|16");
  app.add_option("--checkpoint-activations", text.checkpoints,
                 "keep K block inputs and recompute the rest in backward\n"
                 "(0: off, the default; the config's number_checkpoints)")
      ->type_name("K");
  app.add_flag("--contiguous-memory", contiguous_memory,
               "kept activations in one arena sized by the first step")
      ->disable_flag_override();
  app.add_flag("--partition-activations", f.partition_activations,
               "each rank of a tensor-parallel group keeps 1/T of every kept\n"
               "block input, all-gathered before backward recomputes from it\n"
               "(ZeRO-R's Pa; needs --tp > 1 and checkpointing)")
      ->disable_flag_override();
  app.add_option("--kept-inputs-nvme", f.kept_inputs_nvme,
                 "the kept block inputs on the NVMe tier, in DIR, between forward\n"
                 "and backward")
      ->type_name("DIR");
  app.add_flag("--kept-inputs-cpu", f.kept_inputs_cpu,
               "with --device cuda: the kept block inputs in pinned host memory\n"
               "between forward and backward (ZeRO-R's CPU checkpointing)")
      ->disable_flag_override();
  app.add_option("--data", f.data,
                 "the token stream: FILE's bytes (default: the repository's docs)")
      ->type_name("FILE");
  app.add_option("--init-npy", f.init_npy,
                 "initial weights, one .npy per parameter, named as nanoGPT names\n"
                 "them (transformer.h.0.attn.c_attn.weight.npy, ...)")
      ->type_name("DIR");
  app.add_option("--save-npy", f.save_npy, "write the final weights the same way")
      ->type_name("DIR");
  app.add_option("--save-checkpoint", f.save_checkpoint,
                 "save a checkpoint into DIR (tag stepN) at the end")
      ->type_name("DIR");
  app.add_option("--load-checkpoint", f.load_checkpoint,
                 "resume from DIR's latest checkpoint (any ranks and stage, the\n"
                 "same --tp), and train up to --steps in all")
      ->type_name("DIR");
  app.add_option("--device", text.device,
                 "where the model and its states live (default host; cuda: the GPU)")
      ->type_name("host|cuda");
  app.add_option("--products", text.products,
                 "with --device cuda, the matrix products: bf16 operands summed in\n"
                 "fp32 (tensor cores; the default with --dtype bf16) or fp32\n"
                 "without TF32 (the default otherwise; the host model's)")
      ->type_name("fp32|bf16");
  app.add_option("--config", f.config, "DeepSpeed ds_config.json")->type_name("FILE");
  app.add_flag("--deterministic", deterministic, "bitwise reproducible across stages")
      ->disable_flag_override();
  app.add_option("--json", f.json, "loss per step, tokens per second, activation memory")
      ->type_name("FILE");
  app.add_option("--seed", text.seed, "initial weights without --init-npy (default 1)")
      ->type_name("N");
  app.add_option("--print-every", text.print_every, "loss lines (default: about 10 per run)")
      ->type_name("N");
}

} // namespace detail

// Throws zero::Error(invalid_argument) naming the flag when the command line is bad. --help:
// steps is negative.
inline Flags parse(int argc, char** argv) {
  Flags f;
  detail::Text text;
  bool deterministic = false, contiguous_memory = false;
  CLI::App app{"", "train_gpt"};
  detail::describe(app, text, f, deterministic, contiguous_memory);
  // "--steps needs a value (see --help)", "--deterministic takes no value (see --help)".
  const bool help = command_line::parse<zero::Error>(
      app, argc, argv, {.after_message = " (see --help)"}, zero::ErrorKind::invalid_argument);
  // The config first: flags override what it says. It is read even for --help, as it always was.
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
      f.moment_bits = o.moment_bits;
      f.master_residual_bits = o.master_residual_bits;
    }
    f.stage = f.ds->zero_optimization.stage;
    f.dtype = f.ds->fp16.enabled   ? zero::DType::float16
              : f.ds->bf16.enabled ? zero::DType::bfloat16
                                   : zero::DType::float32;
    f.contiguous_memory = f.ds->activation_checkpointing.contiguous_memory_optimization;
    // With the flag or without it (it binds to the same field).
    f.partition_activations =
        f.partition_activations || f.ds->activation_checkpointing.partition_activations;
  }
  if (help) {
    f.steps = -1;
    return f;
  }
  for (const std::string& extra : app.remaining())
    zero::fail(zero::ErrorKind::invalid_argument, "unknown option '" + extra + "' (see --help)");
  // Each value given, converted; the messages name the flag.
  const auto given = [&](const char* flag) { return app.count(flag) > 0; };
  if (given("--layers")) f.model.layers = positive("--layers", text.layers);
  if (given("--heads")) f.model.heads = positive("--heads", text.heads);
  if (given("--embd")) f.model.embd = positive("--embd", text.embd);
  if (given("--seq")) f.model.seq = positive("--seq", text.seq);
  if (given("--batch")) f.batch = positive("--batch", text.batch);
  if (given("--steps")) f.steps = static_cast<int>(positive("--steps", text.steps, true));
  if (given("--stage")) {
    f.stage = static_cast<int>(positive("--stage", text.stage, true));
    zero::require(f.stage <= 3, "--stage: expected 0..3, got " + text.stage);
  }
  if (given("--dtype")) {
    zero::require(text.dtype == "fp32" || text.dtype == "fp16" || text.dtype == "bf16",
                  "--dtype: expected fp32, fp16 or bf16, got " + text.dtype);
    f.dtype = zero::parse_dtype(text.dtype);
  }
  if (given("--optimizer")) {
    zero::require(text.optimizer == "adam" || text.optimizer == "adamw",
                  "--optimizer: expected adam or adamw, got " + text.optimizer);
    f.optimizer = text.optimizer;
  }
  if (given("--lr")) f.lr = number("--lr", text.lr);
  if (given("--weight-decay")) f.weight_decay = number("--weight-decay", text.weight_decay);
  if (given("--moment-bits")) {
    zero::require(text.moment_bits == "8" || text.moment_bits == "32",
                  "--moment-bits: expected 8 or 32, got '" + text.moment_bits + "'");
    f.moment_bits = text.moment_bits == "8" ? 8 : 32;
  }
  if (given("--master-residual-bits")) {
    const std::string& bits = text.master_residual_bits;
    zero::require(bits == "8" || bits == "16" || bits == "0",
                  "--master-residual-bits: expected 8, 16 or 0 (an fp32 master), got '" + bits +
                      "'");
    f.master_residual_bits = std::stoi(bits);
  }
  if (given("--checkpoint-activations"))
    f.checkpoints = positive("--checkpoint-activations", text.checkpoints, true);
  if (contiguous_memory) f.contiguous_memory = true;
  if (deterministic) f.deterministic = true;
  if (given("--seed")) f.seed = static_cast<unsigned>(positive("--seed", text.seed, true));
  if (given("--print-every"))
    f.print_every = static_cast<int>(positive("--print-every", text.print_every));
  if (given("--tp")) f.model.tensor_parallel = positive("--tp", text.tp);
  if (given("--device")) {
    zero::require(text.device == "host" || text.device == "cuda",
                  "--device: expected host or cuda, got '" + text.device + "'");
    f.device = text.device;
  }
  zero::require(f.model.embd % f.model.heads == 0, "--embd " + std::to_string(f.model.embd) +
                                                       " does not split into " +
                                                       std::to_string(f.model.heads) + " heads");
  // Whole heads per rank; the widths (embd, 4 embd) then divide too.
  zero::require(f.model.heads % f.model.tensor_parallel == 0,
                "--heads " + std::to_string(f.model.heads) + " does not split over --tp " +
                    std::to_string(f.model.tensor_parallel) +
                    " ranks (each rank computes whole heads)");
  // Partitioned activations cut the kept inputs over the tensor-parallel group: without one, the
  // config's keys are refused by the library, naming them, and the flag here.
  if (f.ds && f.model.tensor_parallel == 1)
    (void)zero::ActivationCheckpointing::from_config(f.ds->activation_checkpointing,
                                                     f.model.layers);
  if (f.device == "cuda") detail::require_device_run(f);
  if (given("--products")) {
    zero::require(text.products == "fp32" || text.products == "bf16",
                  "--products: expected fp32 or bf16, got '" + text.products + "'");
    zero::require(f.device == "cuda" || text.products == "fp32",
                  "--products bf16: the host model's products are fp32; bf16 products are the "
                  "device model's (give --device cuda)",
                  zero::ErrorKind::unsupported);
    f.products =
        text.products == "bf16" ? gpt::ProductPrecision::bf16 : gpt::ProductPrecision::fp32;
  } else if (f.device == "cuda" && f.dtype == zero::DType::bfloat16) {
    f.products = gpt::ProductPrecision::bf16; // operands rounded as PyTorch's bf16 autocast does
  }
  if (f.kept_inputs_cpu) {
    zero::require(f.device == "cuda",
                  "--kept-inputs-cpu moves the kept block inputs out of a GPU's memory, and the "
                  "host loop's are in host memory already: give --device cuda",
                  zero::ErrorKind::unsupported);
    zero::require(checkpointing(f).number_checkpoints > 0,
                  "--kept-inputs-cpu moves the kept block inputs, and activation checkpointing "
                  "is off: give --checkpoint-activations K");
  }
  if (f.partition_activations) {
    zero::require(f.model.tensor_parallel > 1,
                  "--partition-activations cuts the kept block inputs over the tensor-parallel "
                  "group, and there is none: give --tp > 1",
                  zero::ErrorKind::unsupported);
    zero::require(checkpointing(f).number_checkpoints > 0,
                  "--partition-activations cuts the kept block inputs, and activation "
                  "checkpointing is off: give --checkpoint-activations K");
  }
  return f;
}

// --help, as CLI11 writes it.
inline std::string help_text() {
  Flags f;
  detail::Text text;
  bool deterministic = false, contiguous_memory = false;
  CLI::App app{"", "train_gpt"};
  detail::describe(app, text, f, deterministic, contiguous_memory);
  return app.help();
}

} // namespace train_gpt
