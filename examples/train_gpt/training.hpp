#pragma once
// The training loop of train_gpt, written the way a user of zero writes one. The engine holds the
// parameters in layers: 0 the embeddings (wte, wpe), 1..L the blocks, L+1 the final LayerNorm.
// The blocks run through CheckpointedLayers (activation checkpointing, ZeRO-R), whose callbacks
// acquire each block from the engine and hand its gradients over; the embeddings and the tied head
// are around that loop. It works unchanged for every stage; only the plan type differs.
// With tensor parallelism (--tp T) each group of T consecutive ranks holds one copy of the model in
// slices (gpt.hpp) and runs the same batch; ZeRO shards each slice's model states over the ranks
// holding the same slice, which split the batch between them.

#include "data.hpp"
#include "gpt.hpp"
#include "settings.hpp"
#include "weights.hpp"

#include <zero/comm/counting_communicator.hpp>
#include <zero/comm/mpi_communicator.hpp>
#include <zero/core/convert.hpp>
#include <zero/engines.hpp> // the engine: its code is zero::engines' where that is linked
#include <zero/residual/checkpointed_layers.hpp>
#include <zero/schedule/lr_scheduler.hpp>
#include <zero/tensor_parallel/groups.hpp>
#if ZERO_TRAIN_GPT_NVME
#include <zero/residual/kept_inputs_on_nvme.hpp>
#endif

#include <bit>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace train_gpt {

// The run's ranks: groups of T consecutive ranks share each layer (tensor parallelism, T = 1
// without it), and the ranks holding the same slices are the data-parallel group ZeRO works over.
struct Ranks {
  Ranks(zero::MpiCommunicator& world_ranks, int tensor_parallel)
      : world(world_ranks), groups(world_ranks, tensor_parallel),
        tensor(groups.tensor().split(0, groups.tensor_rank())),
        activations(groups.tensor().split(0, groups.tensor_rank())) {}
  zero::MpiCommunicator& world;
  zero::TensorParallelGroups<zero::MpiCommunicator> groups;
  zero::CountingCommunicator<zero::MpiCommunicator> tensor; // the model's all-reduces, counted
  // The tensor-parallel group again, for the gathers of partitioned activations: on a
  // communicator of their own, they run beside the model's all-reduces instead of queueing
  // behind them, and are counted apart.
  zero::CountingCommunicator<zero::MpiCommunicator> activations;
  zero::MpiCommunicator& data() { return groups.data(); }
};

struct History {
  int first_step = 0;               // after --load-checkpoint, the steps it had done
  std::vector<double> loss;         // mean over the global batch's tokens, from first_step on
  std::vector<double> step_seconds; // rank 0
  std::vector<bool> applied;
  std::vector<double> loss_scale;
  std::vector<double> lr;             // the learning rate each step used (a config's schedule)
  zero::CheckpointStats activations;  // the last step's (peak bytes: the largest of any step)
  std::size_t arena_bytes = 0;        // the contiguous arena, when asked for
  std::size_t nvme_bytes_written = 0; // kept inputs written to the NVMe tier
  std::size_t block_bytes = 0;        // one block's activations: its input and what it saves
  std::size_t gathers_on_demand = 0, gathers_prefetched = 0; // stage 3, steps after the first
  // Partitioned activations, per step after the first: the gathers over the tensor-parallel
  // group, and the time backward waited for them.
  double activation_gathers_per_step = 0, activation_gathered_elements_per_step = 0;
  double activation_gather_bytes_per_step = 0, activation_gather_wait_per_step = 0;
  zero::MemoryReport memory;
  // This rank's parameters (its slices under tensor parallelism) and its shard group's ranks.
  std::size_t psi = 0;
  int shard_ranks = 1;
  WholeTensors final_weights; // whole tensors, for --save-npy
  // Per step, after the first: the model's all-reduces over the tensor-parallel group, and the
  // engine's collectives over the data-parallel group.
  double tensor_calls_per_step = 0, tensor_elements_per_step = 0, tensor_bytes_per_step = 0;
  double data_elements_per_step = 0, data_bytes_per_step = 0;
  // Tensor parallelism: whether every replicated parameter ends bitwise alike on every rank of
  // its group.
  bool replicated_identical = true;
  // --device cuda: the GPU, how the ranks talk, and its memory in use (every process's) before the
  // engine, once it and the model were built, and after the first and the last step.
  std::string device_name, device_communicator;
  std::size_t device_before = 0, device_built = 0, device_first_step = 0, device_last_step = 0;
};

// K measured: the bytes of fp32 master weights and moments rank 0 keeps per parameter of its
// share, Psi / N at stages 1-3 (N: the shard group) and Psi at stage 0, as in the ZeRO paper's
// formula: 12 for Adam with fp32 moments, about 6 with 8-bit ones (padding included).
inline double optimizer_bytes_per_parameter(const Flags& f, const History& h) {
  const double share = double(h.psi) / double(f.stage == 0 ? 1 : h.shard_ranks);
  return double(h.memory.master_weights.total() + h.memory.optimizer_states.total()) / share;
}

// A layer's weights as the kernels read them: float. In fp32 the engine's own memory, otherwise
// a converted copy.
template <class T>
class FloatWeights {
 public:
  const float* of(const zero::LayerParameters& p) {
    const auto values = p.values<T>();
    if constexpr (std::is_same_v<T, float>) {
      return values.data();
    } else {
      widened_.resize(values.size());
      zero::convert_n(values.data(), widened_.data(), values.size());
      return widened_.data();
    }
  }

 private:
  std::vector<float> widened_;
};

// Hands layer l's float gradients to the engine (rounded to T in fp16/bf16).
template <class T, class Engine>
void hand_over(Engine& engine, std::size_t l, const float* gradients) {
  zero::View<T> into = engine.template gradients<T>(l);
  zero::convert_n(gradients, into.data(), into.size());
  engine.grads_ready(l);
}

// The transformer blocks as CheckpointableLayers: block l is engine layer l + 1.
// example-begin gpt-blocks
template <class T, class Engine, class Tensor>
struct Blocks {
  Engine& engine;
  Tensor& tensor;
  const gpt::Config& model;
  std::size_t batch; // sequences per micro-step on this rank
  FloatWeights<T> weights{};
  std::vector<float> gradients{}; // fp16/bf16: computed in float, then rounded

  std::size_t layers() const { return model.layers; }
  std::size_t activation_elements() const { return batch * model.seq * model.embd; }
  std::size_t saved_elements(std::size_t) const { return gpt::block_saved_floats(model, batch); }

  void forward(std::size_t l, zero::View<const float> in, zero::View<float> out,
               zero::View<float> saved) {
    const zero::LayerParameters p = engine.acquire(l + 1); // stage 3 gathers it
    gpt::block_forward(model, tensor, weights.of(p), in.data(), out.data(), saved.data(), batch);
  }

  void backward(std::size_t l, zero::View<const float> in, zero::View<const float> saved,
                zero::View<const float> grad_out, zero::View<float> grad_in) {
    const zero::LayerParameters p = engine.acquire(l + 1);
    float* g = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      g = engine.template gradients<float>(l + 1).data(); // straight into the engine's buffer
    } else {
      gradients.resize(gpt::block_parameters(model));
      g = gradients.data();
    }
    gpt::block_backward(model, tensor, weights.of(p), in.data(), saved.data(), grad_out.data(),
                        grad_in.data(), g, batch);
    if constexpr (std::is_same_v<T, float>)
      engine.grads_ready(l + 1); // its reduction overlaps with the blocks below
    else
      hand_over<T>(engine, l + 1, g);
  }
};
// example-end gpt-blocks

// Where the kept block inputs live: the NVMe tier with --kept-inputs-nvme, else memory (null).
inline std::unique_ptr<zero::KeptInputTier> kept_inputs_tier(const Flags& f, int rank) {
  if (f.kept_inputs_nvme.empty()) return nullptr;
#if ZERO_TRAIN_GPT_NVME
  return std::make_unique<zero::KeptInputsOnNvme>(
      zero::NvmeTierOptions{.path = f.kept_inputs_nvme, .owner = "activations"}, rank);
#else
  (void)rank;
  zero::fail(zero::ErrorKind::unsupported, "--kept-inputs-nvme: this train_gpt was built without "
                                           "the NVMe tier (liburing was not found)");
#endif
}

// The global mean of one value per rank.
inline double mean_over_ranks(zero::MpiCommunicator& world, double value) {
  double sum = 0;
  MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, world.native_handle());
  return sum / world.size();
}

// This rank's slice of every tensor from the engine's final weights. Collective over the
// data-parallel group.
template <class Engine>
WholeTensors final_slices(const gpt::Config& model, Engine& engine) {
  std::vector<std::vector<float>> layers;
  for (std::size_t l = 0; l < engine.layers(); ++l)
    layers.push_back(engine.get_layer(l));
  return slices_in(model, layers);
}

// Every rank's `slice` of one tensor, in tensor-rank order. Collective over the tensor group.
inline std::vector<std::vector<float>> gather_slices(Ranks& ranks,
                                                     const std::vector<float>& slice) {
  const std::size_t parts = std::size_t(ranks.groups.tensor_size()), n = slice.size();
  std::vector<float> all(n * parts);
  ranks.groups.tensor().all_gather(slice, all).wait();
  std::vector<std::vector<float>> slices;
  for (std::size_t r = 0; r < parts; ++r)
    slices.emplace_back(all.begin() + std::ptrdiff_t(r * n),
                        all.begin() + std::ptrdiff_t((r + 1) * n));
  return slices;
}

// The whole tensors from every rank's slices, joined over the tensor-parallel group.
inline WholeTensors whole_weights(Ranks& ranks, const gpt::Config& model,
                                  const WholeTensors& mine) {
  const std::vector<gpt::TensorSpec> tensors = gpt::tensor_specs(model);
  WholeTensors whole;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    whole.push_back(join_slices(model, tensors[i], gather_slices(ranks, mine[i])));
  return whole;
}

// Whether every replicated tensor of this rank's slices equals, bit for bit, that of every other
// rank of its tensor-parallel group. Collective over all ranks.
inline bool replicated_identical(Ranks& ranks, const gpt::Config& model, const WholeTensors& mine) {
  const std::vector<gpt::TensorSpec> tensors = gpt::tensor_specs(model);
  int same = 1;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].cut != gpt::Cut::whole) continue;
    for (const std::vector<float>& other : gather_slices(ranks, mine[i]))
      for (std::size_t k = 0; k < other.size(); ++k)
        if (std::bit_cast<std::uint32_t>(other[k]) != std::bit_cast<std::uint32_t>(mine[i][k]))
          same = 0;
  }
  int everywhere = 0;
  MPI_Allreduce(&same, &everywhere, 1, MPI_INT, MPI_MIN, ranks.world.native_handle());
  return everywhere == 1;
}

// Checkpoints of train_gpt carry the number of steps done as their user state, and the learning
// rate schedule's position when the config has one; under tensor parallelism each tensor rank's
// slices go to a directory of their own under the tag.
template <class Engine>
void save(Engine& engine, const Flags& f, int steps_done,
          const std::optional<zero::LrScheduler>& scheduler) {
  const std::string done = "train_gpt steps " + std::to_string(steps_done);
  zero::CheckpointOptions options;
  options.user_state.assign(reinterpret_cast<const std::byte*>(done.data()),
                            reinterpret_cast<const std::byte*>(done.data() + done.size()));
  options.lr_scheduler = scheduler ? &*scheduler : nullptr;
  engine.save_checkpoint(f.save_checkpoint, "step" + std::to_string(steps_done), options);
}

// Loads --load-checkpoint (at any rank count and stage; the tensor-parallel size must be the
// same, or the engine refuses naming both); returns the number of steps it had done.
template <class Engine>
int resume(Engine& engine, const Flags& f, std::optional<zero::LrScheduler>& scheduler, int rank) {
  const zero::LoadedCheckpoint c =
      engine.load_checkpoint(f.load_checkpoint, std::nullopt, scheduler ? &*scheduler : nullptr);
  const std::string text(reinterpret_cast<const char*>(c.user_state.data()), c.user_state.size());
  const std::string prefix = "train_gpt steps ";
  int done = -1;
  const char* const end = text.data() + text.size();
  const bool ours = text.starts_with(prefix) &&
                    std::from_chars(text.data() + prefix.size(), end, done).ptr == end && done >= 0;
  zero::require(ours, "--load-checkpoint: " + c.path.string() + " was not saved by train_gpt",
                zero::ErrorKind::mismatch);
  zero::require(done <= f.steps, "--load-checkpoint: " + c.path.string() + " has done " +
                                     std::to_string(done) + " steps, more than --steps " +
                                     std::to_string(f.steps));
  if (rank == 0)
    std::printf("resumed from %s: %d step(s) done, saved by %d data-parallel rank(s) at stage %d, "
                "tensor parallel %d\n\n",
                c.path.c_str(), done, c.saved_world_size, c.saved_stage,
                c.saved_tensor_parallel_size);
  return done;
}

template <class Engine>
History train(Ranks& ranks, const Flags& f, Engine& engine, const Tokens& data) {
  return engine.visit_compute_type([&](auto tag) {
    using T = decltype(tag);
    using Tensor = decltype(ranks.tensor);
    const gpt::Config& model = f.model;
    zero::MpiCommunicator& replicas = ranks.data();
    Tensor& tensor = ranks.tensor;
    const std::size_t micro_steps = std::size_t(engine.options().gradient_accumulation_steps);
    const std::size_t batch = f.batch / (std::size_t(replicas.size()) * micro_steps);
    const std::size_t rows = batch * model.seq, last = model.layers + 1;
    // example-begin gpt-loop
    Blocks<T, Engine, Tensor> blocks{engine, tensor, model, batch};
    const std::unique_ptr<zero::KeptInputTier> kept_inputs =
        kept_inputs_tier(f, ranks.world.rank());
    zero::ActivationPartitionOver partition(ranks.activations); // used with Pa only
    zero::ActivationCheckpointing options = checkpointing(f, &partition);
    options.kept_inputs = kept_inputs.get(); // null: in memory
    zero::CheckpointedLayers loop(blocks, options);
    // example-end gpt-loop
    std::vector<std::uint8_t> tokens(rows), targets(rows);
    std::vector<float> x(rows * model.embd), dy(x.size()), dx(x.size());
    // Layer 0's gradient: the tied head's share of wte, then the embeddings' (wte, wpe).
    std::vector<float> embedding_grad(engine.layout().layer(0).numel), final_grad(2 * model.embd);
    FloatWeights<T> embedding_weights, final_norm_weights;
    History h;
    zero::CommStats data_traffic;
    // The config's learning-rate schedule (DeepSpeed's "scheduler"), stepped as DeepSpeed's
    // engine steps it: only after an applied update.
    std::optional<zero::LrScheduler> scheduler;
    if (f.ds && f.ds->scheduler) scheduler.emplace(f.ds->scheduler->schedule, f.lr);
    if (!f.load_checkpoint.empty()) h.first_step = resume(engine, f, scheduler, ranks.world.rank());
    for (int step = h.first_step; step < f.steps; ++step) {
      if (scheduler) engine.optimizer().set_lr(scheduler->lr());
      if (step == h.first_step + 1) { // the first step is not counted
        tensor.reset_stats();
        ranks.activations.reset_stats();
      }
      const auto start = std::chrono::steady_clock::now();
      double loss = 0;
      for (std::size_t micro = 0; micro < micro_steps; ++micro) {
        const std::size_t first = (std::size_t(replicas.rank()) * micro_steps + micro) * batch;
        data.batch(step, f.batch, model.seq, first, batch, tokens.data(), targets.data());
        // example-begin gpt-micro-step
        {
          const zero::LayerParameters p = engine.acquire(0);
          const float* wte = embedding_weights.of(p);
          gpt::embed_forward(model, tensor, wte, wte + model.local_vocab() * model.embd,
                             tokens.data(), x.data(), batch);
        }
        const zero::View<const float> y = loop.forward(x);
        {
          const zero::LayerParameters final_layer = engine.acquire(last);
          const zero::LayerParameters embeddings = engine.acquire(0); // the tied head
          loss += gpt::head_forward_backward(
              model, tensor, final_norm_weights.of(final_layer), embedding_weights.of(embeddings),
              y.data(), targets.data(), dy.data(), final_grad.data(), embedding_grad.data(), batch,
              double(rows), static_cast<float>(engine.loss_scale()));
        }
        hand_over<T>(engine, last, final_grad.data());
        loop.backward(dy, dx);
        gpt::embed_backward(model, tensor, tokens.data(), dx.data(), embedding_grad.data(),
                            embedding_grad.data() + model.local_vocab() * model.embd, batch);
        hand_over<T>(engine, 0, embedding_grad.data());
        // example-end gpt-micro-step
        h.activations.peak_activation_bytes =
            std::max(h.activations.peak_activation_bytes, loop.stats().peak_activation_bytes);
        if (step > h.first_step)
          h.activation_gather_wait_per_step += loop.stats().gather_wait_seconds;
      }
      const zero::StepResult r = engine.step();
      if (scheduler)
        scheduler->step(r.applied ? zero::StepOutcome::applied
                                  : zero::StepOutcome::skipped_for_overflow);
      h.lr.push_back(engine.optimizer().lr());
      h.loss.push_back(mean_over_ranks(replicas, loss / double(micro_steps)));
      if (step > h.first_step) data_traffic += r.communication;
      h.step_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      h.applied.push_back(r.applied);
      h.loss_scale.push_back(r.loss_scale);
      if (step > h.first_step) {
        h.gathers_on_demand += r.gathers.on_demand;
        h.gathers_prefetched += r.gathers.prefetched;
      }
    }
    const std::size_t peak = h.activations.peak_activation_bytes;
    h.activations = loop.stats();
    h.activations.peak_activation_bytes = peak;
    h.arena_bytes = loop.memory().reserved_bytes();
    if (kept_inputs) h.nvme_bytes_written = kept_inputs->bytes_written();
    h.block_bytes = (blocks.activation_elements() + blocks.saved_elements(0)) * sizeof(float);
    h.memory = engine.memory();
    h.psi = engine.layout().numel();
    h.shard_ranks = engine.shard_ranks();
    if (!f.save_checkpoint.empty()) save(engine, f, f.steps, scheduler);
    if (f.steps - h.first_step > 1) {
      const double counted = double(f.steps - h.first_step - 1);
      const zero::CommStats& t = tensor.stats();
      h.tensor_calls_per_step = double(t.total_calls()) / counted;
      h.tensor_elements_per_step = double(t[zero::Collective::all_reduce].elements) / counted;
      h.tensor_bytes_per_step = double(t.total_bytes()) / counted;
      h.data_elements_per_step = double(data_traffic.volume_elements()) / counted;
      h.data_bytes_per_step = double(data_traffic.total_bytes()) / counted;
      const zero::CommStats& a = ranks.activations.stats();
      h.activation_gathers_per_step = double(a.total_calls()) / counted;
      h.activation_gathered_elements_per_step =
          double(a[zero::Collective::all_gather].elements) / counted;
      h.activation_gather_bytes_per_step = double(a.total_bytes()) / counted;
      h.activation_gather_wait_per_step /= counted;
    }
    if (model.tensor_parallel > 1 || !f.save_npy.empty()) {
      const WholeTensors mine = final_slices(model, engine); // gathered once for both
      if (model.tensor_parallel > 1)
        h.replicated_identical = replicated_identical(ranks, model, mine);
      if (!f.save_npy.empty()) h.final_weights = whole_weights(ranks, model, mine);
    }
    return h;
  });
}

} // namespace train_gpt
