#pragma once
// The engine's checkpoints (docs/checkpoints.md): what a save of the run describes, which ranks
// write states, and how a load puts a checkpoint saved at any world size, stage or partitioner
// into this engine's stores. engine.hpp calls these between steps, with the stores of its compute
// type; the files themselves are checkpoint/'s.

#include "zero/checkpoint/directory.hpp"
#include "zero/checkpoint/reshard.hpp"
#include "zero/checkpoint/run_state.hpp"
#include "zero/comm/agreed.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/nvme.hpp"
#include "zero/core/view.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/report.hpp"
#include "zero/schedule/lr_scheduler.hpp"
#include "zero/shard/shard_layout.hpp"

#include <concepts>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

namespace zero::detail {

// Which ranks write states: one copy of each shard (the first shard group), or rank 0 when the
// plan does not shard them.
template <class Plan>
int saving_ranks(int shard_ranks) noexcept {
  return Plan::optimizer_states ? shard_ranks : 1;
}

// The manifest of a save of the run as it stands: the model, the plan, the optimizer's and the
// loss scaler's state, and the schedule's when `options` has one.
template <class Plan, class States, class Opt, class Scaler>
checkpoint::Manifest describe_run(const std::string& tag, const CheckpointOptions& options,
                                  int world_size, int shard_ranks, int tensor_parallel_size,
                                  int tensor_parallel_rank, DType compute_dtype,
                                  const ShardLayout& layout, States& states, const Opt& optimizer,
                                  const Scaler& scaler) {
  checkpoint::check_tag(tag);
  checkpoint::Manifest m;
  m.tag = tag;
  m.world_size = world_size;
  m.stage = Plan::stage;
  m.shard_ranks = shard_ranks;
  m.tensor_parallel_size = tensor_parallel_size;
  m.tensor_parallel_rank = tensor_parallel_rank;
  m.compute_dtype = to_string(compute_dtype);
  m.parameters = checkpoint::saved_parameters(layout.parameters());
  m.partitioner = std::string(states.optimizer_states().kept_layout().policy());
  checkpoint::describe_optimizer(m, optimizer);
  m.scaler = scaler.state();
  if (options.lr_scheduler) {
    m.lr_scheduler_type = schedule_name(options.lr_scheduler->schedule());
    m.lr_scheduler_last_batch_iteration = options.lr_scheduler->last_batch_iteration();
  }
  return m;
}

// Starts a save of the run as DIR/TAG (Engine::save_checkpoint): the ranks that write states hand
// their store to the saver, which rank 0 completes with the manifest. States on the NVMe tier are
// saved synchronously only (a background save would copy them into host memory), and a delayed
// update still running on the host is applied first: its states are the step's.
template <class Plan, class Placement, class Saver, class Groups, class States, class Opt,
          class Scaler>
void begin_save(Saver& saver, Groups& groups, const std::filesystem::path& dir,
                const std::string& tag, const CheckpointOptions& options,
                const EngineOptions& engine_options, const ShardLayout& layout, States& states,
                const Opt& optimizer, const Scaler& scaler) {
  if constexpr (std::same_as<typename Placement::optimizer_states, nvme>)
    require(!options.async,
            "save_checkpoint: an asynchronous save would copy the optimizer states from NVMe into "
            "host memory; save them synchronously",
            ErrorKind::unsupported);
  states.apply_delayed_update();
  const int writers = saving_ranks<Plan>(groups.shard().size());
  auto* store = groups.world().rank() < writers ? &states.optimizer_states() : nullptr;
  auto* const tensor = groups.control_tensor();
  const auto manifest = describe_run<Plan>(
      tag, options, groups.world().size(), groups.shard().size(), tensor ? tensor->size() : 1,
      tensor ? tensor->rank() : 0, engine_options.compute_dtype, layout, states, optimizer, scaler);
  saver.begin(groups.control_world(), tensor, dir, manifest, options, store, writers);
}

// Engine::reserve_checkpoint_snapshot: the host memory a background save copies this rank's states
// into, where it writes states and saves run in the background (not from the NVMe tier). Only
// sizes are read: a delayed update still running on the host does not matter here.
template <class Plan, class Placement, class Saver, class Groups, class States>
void reserve_snapshot(Saver& saver, Groups& groups, States& states) {
  if constexpr (!std::same_as<typename Placement::optimizer_states, nvme>)
    if (groups.world().rank() < saving_ranks<Plan>(groups.shard().size()))
      saver.reserve_snapshot(states.optimizer_states());
}

// Under tensor parallelism (`tensor`: this rank's tensor-parallel group, null otherwise), the
// directory of this tensor rank's checkpoint in `path`, which must have been saved at the same
// tensor-parallel size (the data-parallel size, stage and partitioner may differ).
template <class Tensor>
std::filesystem::path tensor_rank_checkpoint(const std::filesystem::path& path,
                                             const Tensor* tensor) {
  const int saved = checkpoint::saved_tensor_parallel_size(path);
  const int size = tensor ? tensor->size() : 1;
  if (saved != size)
    fail(ErrorKind::mismatch,
         "load_checkpoint: " + path.string() + " was saved " +
             (saved > 1 ? "with tensor parallelism of " + std::to_string(saved) + " ranks"
                        : std::string("without tensor parallelism (size 1)")) +
             ", but this engine's tensor-parallel size is " + std::to_string(size) +
             "; a checkpoint loads at the tensor-parallel size it was saved at (the data-parallel "
             "size, stage and partitioner may differ)");
  if (size == 1) return path;
  return path / checkpoint::tensor_rank_directory(tensor->rank(), size);
}

// Loads DIR/TAG (or what DIR/latest names, or DIR itself) into `states`, `optimizer`, `scaler`
// and `lr_scheduler` (when given): each rank reads only what it keeps now, then the stores share
// the loaded parameters. Collective over `world` (and `tensor`, this rank's tensor-parallel
// group under tensor parallelism, null otherwise); an error on any rank throws on every rank, and
// the scaler is replaced only once everything was read.
template <class World, class States, class Opt, class Scaler>
LoadedCheckpoint load_into(World& world, World* tensor, const std::filesystem::path& dir,
                           const std::optional<std::string>& tag, LrScheduler* lr_scheduler,
                           const ShardLayout& layout, States& states, Opt& optimizer,
                           Scaler& scaler) {
  Scaler loaded_scaler = scaler;
  Stopwatch clock;
  const auto agree = [&](const char* what, auto&& build) {
    if (tensor) return agreed_over_grid(world, *tensor, what, build);
    return agreed(world, what, build);
  };
  LoadedCheckpoint loaded = agree("loading the checkpoint", [&] {
    LoadedCheckpoint info;
    const std::filesystem::path resolved = checkpoint::resolve(dir, tag);
    info.path = tensor_rank_checkpoint(resolved, tensor);
    const checkpoint::Manifest m = checkpoint::read_manifest(info.path);
    require(m.tensor_parallel_size == (tensor ? tensor->size() : 1) &&
                m.tensor_parallel_rank == (tensor ? tensor->rank() : 0),
            "load_checkpoint: " + info.path.string() + " holds tensor rank " +
                std::to_string(m.tensor_parallel_rank) + " of " +
                std::to_string(m.tensor_parallel_size) + ", not this rank's",
            ErrorKind::mismatch);
    checkpoint::check_parameters(m, layout.parameters(), info.path);
    checkpoint::check_optimizer<Opt>(m, info.path);
    loaded_scaler.load_state(m.scaler);
    require(!lr_scheduler || m.lr_scheduler_last_batch_iteration,
            "load_checkpoint: " + info.path.string() + " has no learning-rate schedule state",
            ErrorKind::mismatch);
    checkpoint::describe_loaded(info, m);
    checkpoint::StateReader reader(info.path, m); // every file there, of the listed size
    const auto& store = states.optimizer_states();
    try {
      states.load_states([&](std::size_t t, std::size_t l, Range part, View<float> into) {
        reader.fill(t, store.kept_layout(), store.kept_rank(), l, part, into.data());
      });
    } catch (const Error& e) {
      fail(e.kind(), without_prefix(e.what()) + " (this engine's states are now partly "
                                                "overwritten: load a good checkpoint before "
                                                "training on)");
    }
    info.bytes_read = reader.bytes_read();
    optimizer.set_step_count(m.optimizer_step);
    optimizer.set_lr(m.lr);
    if (lr_scheduler) lr_scheduler->set_last_batch_iteration(*m.lr_scheduler_last_batch_iteration);
    info.path = resolved; // the checkpoint, not this tensor rank's part of it
    return info;
  });
  scaler = std::move(loaded_scaler);
  loaded.read_seconds = clock.lap();
  states.share_loaded_parameters();
  loaded.rebuild_seconds = clock.lap();
  return loaded;
}

} // namespace zero::detail
