// train_mlp: trains an MLP with zero's engine on N MPI ranks and shows ZeRO at work: the loss
// curve, each rank's model-state memory next to the paper's formula, and the communication of a
// step next to 2Ψ (stages 0-2) or 3Ψ (stage 3).
//
//   mpirun -np 4 train_mlp --stage 3 --layers 32,256,256,8 --steps 200
//
// N ranks compute what one process computes on the global batch: each step takes the next
// --batch rows, rank r uses the r-th contiguous share, and gradients are averaged over ranks.

#include "../common/run_on_world.hpp"
#include "../common/share_cores.hpp"
#include "flags.hpp"
#include "report.hpp"
#include "run.hpp"

#include <zero/engine/step_log.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>

namespace train {
// The engine for the plan and placement the flags ask for.
History run_stage(zero::MpiCommunicator& world, const Flags& f, const Dataset& data,
                  InitialWeights& init) {
  if (f.device == "cuda") {
#if ZERO_TRAIN_MLP_CUDA
    if (f.optimizer_on_cpu || f.optimizer_on_nvme) { // stages 1-3 (flags.hpp)
      if (f.stage == 1) return run_stage1_cuda_offload(world, f, data, init);
      if (f.stage == 2) return run_stage2_cuda_offload(world, f, data, init);
      return run_stage3_cuda_offload(world, f, data, init);
    }
    switch (f.stage) {
    case 0:
      return run_stage0_cuda(world, f, data, init);
    case 1:
      return run_stage1_cuda(world, f, data, init);
    case 2:
      return run_stage2_cuda(world, f, data, init);
    default:
      return run_stage3_cuda(world, f, data, init);
    }
#else
    zero::fail(zero::ErrorKind::unsupported,
               "--device cuda: this train_mlp was built without its CUDA engines (no CUDA "
               "toolkit, or a build that only checks the GPU code: ZERO_GPU_TESTS=syntax)");
#endif
  }
#if ZERO_TRAIN_MLP_NVME
  if (f.parameters_on_nvme) return run_stage3_nvme_params(world, f, data, init);
  if (f.optimizer_on_nvme) {
    if (f.stage == 1) return run_stage1_nvme(world, f, data, init);
    if (f.stage == 2) return run_stage2_nvme(world, f, data, init);
    return run_stage3_nvme(world, f, data, init);
  }
#else
  zero::require(!f.optimizer_on_nvme && !f.parameters_on_nvme,
                "this train_mlp was built without its engines on the NVMe tier (liburing was "
                "not found, or it was configured with -DZERO_TRAIN_MLP_NVME=OFF)",
                zero::ErrorKind::unsupported);
#endif
  switch (f.stage) {
  case 0:
    return run_stage0(world, f, data, init);
  case 1:
    return run_stage1(world, f, data, init);
  case 2:
    return run_stage2(world, f, data, init);
  default:
    return run_stage3(world, f, data, init);
  }
}
} // namespace train

namespace {

using examples::share_cores;

// Where the NVMe tier keeps what, for the run's first line.
std::string nvme_summary(const train::Flags& f) {
  if (!f.optimizer_on_nvme) return "";
  std::string optimizer = f.nvme_path, parameters = f.nvme_path;
  if (optimizer.empty()) { // from the config
    optimizer = f.ds->zero_optimization.offload_optimizer.nvme_path;
    parameters = f.ds->zero_optimization.offload_param.nvme_path;
  }
  if (!f.parameters_on_nvme) return ", optimizer states on NVMe in " + optimizer;
  if (parameters == optimizer) return ", optimizer states and parameters on NVMe in " + optimizer;
  return ", optimizer states on NVMe in " + optimizer + ", parameters in " + parameters;
}

// Where a --device cuda run keeps what, for the run's first line.
std::string device_summary(const train::Flags& f) {
  if (f.device != "cuda") return "";
  if (f.parameters_on_nvme)
    return ", parameter shards and optimizer states on NVMe (ZeRO-Infinity), gradients and model "
           "on the GPU";
  if (f.parameters_on_cpu)
    return std::string(", parameter shards in pinned host memory (ZeRO-Infinity's offload_param), "
                       "gradients and model on the GPU, optimizer states ") +
           (f.optimizer_on_nvme ? "on NVMe" : "in host memory");
  if (f.optimizer_on_nvme) return ", parameters, gradients and model on the GPU (ZeRO-Offload)";
  if (f.optimizer_on_cpu)
    return ", parameters, gradients and model on the GPU, optimizer states in host memory "
           "(ZeRO-Offload)";
  return ", model states and model on the GPU";
}

// How the ranks talk: "shm transport" on one node, "hierarchical transport, 2 nodes" across nodes.
std::string links(const zero::MpiCommunicator& world) {
  std::string s = std::string(world.transport()) + " transport";
  if (world.nodes() > 1) s += ", " + std::to_string(world.nodes()) + " nodes";
  return s;
}

int train_on(zero::MpiCommunicator& world, int argc, char** argv) {
  const int rank = world.rank(), ranks = world.size();
  const train::Flags f = train::parse(argc, argv, ranks);
  if (f.steps < 0) {
    if (rank == 0) std::printf("%s", train::help_text().c_str());
    return 0;
  }
  const int threads = share_cores(world);
  const std::size_t share = std::size_t(f.grad_accum) * std::size_t(ranks);
  zero::require(f.batch % share == 0, "--batch " + std::to_string(f.batch) +
                                          " does not split into " + std::to_string(f.grad_accum) +
                                          " micro-steps x " + std::to_string(ranks) + " ranks (" +
                                          std::to_string(share) + " equal parts)");
  const train::Dataset data =
      f.data_npy.empty()
          ? train::teacher_task(
                f.shape, f.data_rows ? f.data_rows : std::max<std::size_t>(4096, 4 * f.batch),
                f.seed)
          : train::load_dataset(f.data_npy, f.shape);
  train::InitialWeights init = f.init_npy.empty() ? train::InitialWeights(f.shape, f.seed)
                                                  : train::InitialWeights(f.shape, f.init_npy);
  if (rank == 0)
    std::printf(
        "train_mlp: ZeRO stage %d, %d ranks x %d thread%s (%s), layers %s, %s, %s, batch %zu (%d "
        "micro-step%s), "
        "%zu data rows, %s moments, %s master%s\n\n",
        f.stage, ranks, threads, threads > 1 ? "s" : "", links(world).c_str(),
        [&] {
          std::string s;
          for (auto w : f.shape.widths)
            s += (s.empty() ? "" : ",") + std::to_string(w);
          return s;
        }()
            .c_str(),
        zero::to_string(f.dtype), f.optimizer.c_str(), f.batch, f.grad_accum,
        f.grad_accum > 1 ? "s" : "", data.rows, zero::to_string(train::moment_storage(f)),
        zero::to_string(train::master_storage(f)), (nvme_summary(f) + device_summary(f)).c_str());

  const train::History h = train::run_stage(world, f, data, init);
  // --print-every, else the config's steps_per_print (at steps N, 2N, ... as DeepSpeed), else
  // about ten lines. The last step and skipped ones are always shown.
  const zero::StepLogOptions log =
      f.ds ? zero::StepLogOptions::from_config(*f.ds) : zero::StepLogOptions{};
  const bool config_interval = f.print_every == 0 && log.steps_per_print > 0;
  const int every =
      f.print_every > 0 ? f.print_every
      : config_interval
          ? int(std::min<std::int64_t>(log.steps_per_print, std::numeric_limits<int>::max()))
          : std::max(1, f.steps / 10);
  if (rank == 0) {
    zero::StepTotals interval; // wall_clock_breakdown: the means since the last line
    for (int s = h.first_step; s < f.steps; ++s) {
      const auto i = std::size_t(s - h.first_step);
      interval.add({s + 1, h.loss[i], h.lr[i], h.steps[i], h.forward_step[i], h.backward_step[i],
                    h.step_seconds[i]});
      const bool due = config_interval ? (s + 1) % every == 0 : s % every == 0;
      if (due || s + 1 == f.steps || !h.applied[i]) {
        train::print_step(s, h);
        if (log.wall_clock_breakdown)
          std::fputs(zero::breakdown_line(s + 1, interval).c_str(), stdout);
        interval = {};
      }
    }
  }
  const auto memory = train::gather_memory(world, h);
  if (rank == 0) {
    if (h.steps.empty())
      std::printf("nothing to train: the checkpoint has done all %d steps\n", f.steps);
    else
      train::print_summary(f, h, memory, ranks, world.quantizes_on_wire());
    if (!h.steps.empty() && !h.device_name.empty()) train::print_device_memory(f, h);
    if (!f.json.empty())
      train::write_json(f.json, f, h, memory, ranks, world.transport(), world.nodes());
    if (!f.save_npy.empty()) {
      zero::DirectoryHandle::open_named(f.save_npy, "--save-npy", 0755); // created where missing
      train::save_weights(f.save_npy, f.shape, h.final_weights);
    }
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  // The library's advice names its option; the demo's flag for it is --remove-stale-swap.
  return examples::run_on_world("train_mlp", argc, argv, train_on, [](std::string_view what) {
    return what.find("nvme.remove_stale") != std::string_view::npos ? " (here: --remove-stale-swap)"
                                                                    : "";
  });
}
