#pragma once
// train_torch's command line (CLI11): the model, the run, and which trainer: zero's engine at a
// stage, plain libtorch on one process, or libtorch's own data parallelism (c10d's Gloo
// all-reduce of the gradients after backward, as DistributedDataParallel does for a model that
// fits one bucket).

#include "gpt.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace train_torch {

struct Flags {
  std::string trainer = "zero"; // zero, plain or ddp
  int stage = 3;
  std::string optimizer = "adam"; // adam or sgd (plain SGD: no momentum, no weight decay)
  int steps = 20;
  std::int64_t batch = 12; // sequences per step, all ranks together
  GptConfig model;
  double lr = 3e-3;
  std::uint64_t seed = 1;
  bool deterministic = true;
  std::string data = ZERO_TRAIN_TORCH_DEFAULT_DATA;
  std::string save_state_dict, json, store;
};

struct Parsed {
  Flags flags;
  std::optional<int> exit_code; // set: print nothing more, exit with it (--help, a bad flag)
};

// Parses argv; `report` prints --help and errors (rank 0 only, so that N ranks print it once).
inline Parsed parse(int argc, char** argv, bool report) {
  Parsed p;
  Flags& f = p.flags;
  CLI::App app("train_torch: a GPT written with torch::nn modules, trained with zero's engine "
               "(zero::torch) at any ZeRO stage on N MPI ranks, or with plain libtorch",
               "train_torch");
  app.add_option("--trainer", f.trainer,
                 "zero, plain (libtorch, one rank) or ddp (libtorch and "
                 "c10d's Gloo all-reduce)")
      ->check(CLI::IsMember({"zero", "plain", "ddp"}))
      ->capture_default_str();
  app.add_option("--stage", f.stage, "ZeRO stage (--trainer zero)")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app.add_option("--optimizer", f.optimizer,
                 "adam, or sgd (plain SGD, whose steps follow the gradient's scale)")
      ->check(CLI::IsMember({"adam", "sgd"}))
      ->capture_default_str();
  app.add_option("--steps", f.steps, "optimizer steps")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--batch", f.batch, "sequences per step, all ranks together (divisible by them)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--seq", f.model.seq, "tokens per sequence")
      ->check(CLI::Range(2, 1 << 16))
      ->capture_default_str();
  app.add_option("--layers", f.model.layers, "transformer blocks")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--embd", f.model.embd, "embedding width")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--heads", f.model.heads, "attention heads (divide --embd)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--lr", f.lr, "the learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", f.seed, "initial weights' seed")->capture_default_str();
  app.add_flag("!--no-deterministic", f.deterministic,
               "let the engine reduce in any order (faster; stages then differ in the last bits)");
  app.add_option("--data", f.data, "file whose bytes are the tokens")->capture_default_str();
  app.add_option("--save-state-dict", f.save_state_dict,
                 "write the final weights as a safetensors state_dict (rank 0)");
  app.add_option("--json", f.json, "write the losses and step times as JSON (rank 0)");
  app.add_option("--store", f.store,
                 "--trainer ddp: the c10d FileStore's file, shared by the "
                 "ranks (default: one under /tmp named after the job)");
  try {
    app.parse(argc, argv);
    if (f.model.embd % f.model.heads != 0)
      throw CLI::ValidationError("--heads", std::to_string(f.model.heads) +
                                                " heads do not divide --embd " +
                                                std::to_string(f.model.embd));
  } catch (const CLI::ParseError& e) {
    if (report) {
      if (e.get_exit_code() == 0)
        app.exit(e); // --help
      else
        std::fprintf(stderr, "train_torch: %s (see --help)\n", e.what());
    }
    p.exit_code = e.get_exit_code() == 0 ? 0 : 2;
  }
  return p;
}

} // namespace train_torch
