// train_torch: a GPT written with torch::nn modules (gpt.hpp), trained on the bytes of a file by
// zero's engine through zero::torch at any ZeRO stage on N MPI ranks, or by plain libtorch:
//
//   mpirun -np 2 train_torch --stage 3 --steps 20
//   train_torch --trainer plain --steps 20          # the same model and data, libtorch alone
//   mpirun -np 2 train_torch --trainer ddp          # libtorch with c10d's Gloo all-reduce
//
// Prints each step's loss (the global batch's mean) and a summary; --json writes them.

#include "../common/run_on_world.hpp"
#include "../common/share_cores.hpp"
#include "../common/write_file.hpp"
#include "training.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace {

train_torch::History run(zero::MpiCommunicator& world, const train_torch::Flags& f,
                         const train_gpt::Tokens& data) {
  using namespace train_torch;
  if (f.trainer == "plain") return train_plain(world, f, data);
  if (f.trainer == "ddp") return train_ddp(world, f, data);
  switch (f.stage) {
  case 0:
    return train_zero<0>(world, f, data);
  case 1:
    return train_zero<1>(world, f, data);
  case 2:
    return train_zero<2>(world, f, data);
  default:
    return train_zero<3>(world, f, data);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int train_on(zero::MpiCommunicator& world, int argc, char** argv) {
  const int rank = world.rank();
  const train_torch::Parsed parsed = train_torch::parse(argc, argv, rank == 0);
  if (parsed.exit_code) return *parsed.exit_code;
  const train_torch::Flags& f = parsed.flags;
  zero::require(f.batch % world.size() == 0, "--batch " + std::to_string(f.batch) +
                                                 " is not divisible by the " +
                                                 std::to_string(world.size()) + " ranks");
  const int threads = examples::share_cores(world);
  torch::set_num_threads(threads);
  const train_gpt::Tokens data = train_gpt::Tokens::from_file(f.data, std::size_t(f.model.seq));
  const train_torch::History h = run(world, f, data);
  // Steps after the first two (which allocate) are the steady state.
  const std::vector<double> steady(h.step_seconds.begin() +
                                       std::min<std::ptrdiff_t>(2, std::ssize(h.step_seconds) - 1),
                                   h.step_seconds.end());
  if (rank == 0) {
    for (std::size_t s = 0; s < h.loss.size(); ++s)
      std::printf("step %zu loss %.9g\n", s, h.loss[s]);
    const std::string who =
        f.trainer == "zero" ? "zero stage " + std::to_string(f.stage) : f.trainer;
    std::printf("train_torch: %s, %d ranks x %d threads, %d steps: final loss %.9g, median step "
                "%.2f ms, model states %.2f MB and buffers %.2f MB per rank\n",
                who.c_str(), world.size(), threads, f.steps, h.final_loss, 1e3 * median(steady),
                double(h.model_state_bytes) / 1e6, double(h.buffer_bytes) / 1e6);
    if (!f.json.empty()) {
      nlohmann::json j;
      j["trainer"] = f.trainer;
      j["stage"] = f.stage;
      j["ranks"] = world.size();
      j["threads"] = threads;
      j["loss"] = h.loss;
      j["final_loss"] = h.final_loss;
      j["step_seconds"] = h.step_seconds;
      j["median_step_seconds"] = median(steady);
      j["model_state_bytes"] = h.model_state_bytes;
      j["buffer_bytes"] = h.buffer_bytes;
      const std::string text = j.dump(1) + "\n";
      examples::write_file_atomically(f.json, {std::span<const char>(text)});
    }
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  return examples::run_on_world("train_torch", argc, argv, train_on);
}
