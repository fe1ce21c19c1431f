#pragma once
// Saver: a save as all ranks make it together (directory.hpp says where each file goes):
//   begin():  rank 0 prepares DIR/.TAG.partial and writes the user state; every rank agrees that
//             it could. Then each saving rank writes its state file, now or from a background
//             thread (state_save.hpp).
//   finish(): the writers are joined and every rank agrees that each succeeded (a failure on one
//             rank throws on all); rank 0 publishes the manifest, renames, and moves DIR/latest.
// A background save stays in flight between the two. Where a step fails on any rank (a full disk,
// an I/O error), it throws on every rank, naming the rank, the file and the system's reason, and
// rank 0 removes what the save wrote (abandon()): DIR/latest and the checkpoints in DIR stay as
// they were. Under tensor parallelism each tensor rank's data-parallel group writes its own
// sub-directory of the checkpoint (directory.hpp), and every step is agreed over the whole grid.

#include "zero/checkpoint/directory.hpp"
#include "zero/checkpoint/files.hpp"
#include "zero/checkpoint/manifest.hpp"
#include "zero/checkpoint/run_state.hpp"
#include "zero/checkpoint/state_save.hpp"
#include "zero/comm/agreed.hpp"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace zero::checkpoint {

class Saver {
 public:
  Saver() = default;
  Saver(const Saver&) = delete;
  Saver& operator=(const Saver&) = delete;
  // A save still running is waited for, but not completed (that needs every rank): its owner calls
  // finish() before it goes (Engine::wait_for_checkpoint).
  ~Saver() {
    if (pending_)
      zero::detail::log_error(
          "engine destroyed with a checkpoint save in flight: it was not completed "
          "(call wait_for_checkpoint() first)");
  }

  // `store` is the optimizer store this rank saves from, or null where a rank saves no states
  // (replicas of another rank's shard); `saving_ranks` ranks (0, 1, ...) save theirs. `tensor`:
  // under tensor parallelism, this rank's tensor-parallel group, `world` its data-parallel group
  // (null otherwise): each tensor rank's group saves into its own sub-directory of the tag, rank 0
  // of both groups prepares and publishes the whole, and every step is agreed over the grid.
  template <class Comm, class Store>
  void begin(Comm& world, Comm* tensor, const std::filesystem::path& dir, Manifest manifest,
             const CheckpointOptions& options, Store* store, int saving_ranks) {
    require(!pending_, "checkpoint: a save is already in flight");
    dir_.reset();
    partial_.reset();
    const std::string sub = tensor ? tensor_rank_directory(tensor->rank(), tensor->size()) : "";
    const auto open_mine = [&](DirectoryHandle top) {
      return std::make_shared<const DirectoryHandle>(
          tensor ? top.open_private_existing(sub, "checkpoint directory", private_advice)
                 : std::move(top));
    };
    or_abandon(world, tensor, manifest.tag, [&] {
      agree(world, tensor, "preparing the checkpoint " + (dir / manifest.tag).string(), [&] {
        if (!first_of_all(world, tensor)) return;
        dir_.emplace(open_for_saving(dir, true));
        prepare(*dir_, manifest.tag);
        DirectoryHandle top = open_partial(*dir_, manifest.tag);
        if (tensor) prepare_tensor_ranks(top, tensor->size());
        partial_ = open_mine(std::move(top));
        if (!tensor && !options.user_state.empty())
          manifest.user_state = write_small_file(*partial_, user_state_file, options.user_state);
      });
      // The other ranks open what rank 0 prepared (the same checks: a rank of another user, or a
      // directory that differs between nodes, is an error on every rank).
      agree(world, tensor, "opening the checkpoint " + (dir / manifest.tag).string(), [&] {
        if (!partial_)
          partial_ = open_mine(open_partial(open_for_saving(dir, false), manifest.tag));
        // Under tensor parallelism each tensor rank's manifest names its own copy.
        if (tensor && world.rank() == 0 && !options.user_state.empty())
          manifest.user_state = write_small_file(*partial_, user_state_file, options.user_state);
      });
    });
    if (!store)
      pending_.emplace();
    else if (options.async)
      pending_.emplace(StateSave::in_background(partial_, *store, snapshot_));
    else
      pending_.emplace(StateSave::now(partial_, *store));
    path_ = dir;
    manifest_ = std::move(manifest);
    saving_ranks_ = saving_ranks;
  }

  bool in_flight() const noexcept { return pending_.has_value(); }

  // The host memory background saves copy into, allocated now rather than at the first one.
  template <class Store>
  void reserve_snapshot(Store& store) {
    StateSave::reserve(store, snapshot_);
  }

  // Collective; nothing to do without a save in flight. `tensor` as given to begin().
  template <class Comm>
  void finish(Comm& world, Comm* tensor = nullptr) {
    if (!pending_) return;
    StateSave save = std::move(*pending_);
    pending_.reset();
    const Manifest manifest = std::move(manifest_);
    const std::string checkpoint = (path_ / manifest.tag).string();
    or_abandon(world, tensor, manifest.tag, [&] {
      agree(world, tensor, "writing the state files of the checkpoint " + checkpoint, [&] {
        save.join();
        crash_point("states-written", world.rank());
      });
      if (tensor) // each data-parallel group's manifest in its sub-directory, then the whole
        agree(world, tensor, "writing the manifests of the checkpoint " + checkpoint, [&] {
          if (world.rank() == 0) write_manifest(*partial_, manifest, saving_ranks_);
        });
      agree(world, tensor, "publishing the checkpoint " + checkpoint, [&] {
        if (!first_of_all(world, tensor)) return;
        if (tensor)
          publish(*dir_, manifest.tag);
        else
          commit(*dir_, manifest.tag, manifest, saving_ranks_);
      });
    });
    partial_.reset();
  }

 private:
  // Rank 0 of the grid (of `world` without tensor parallelism): the one that prepares and
  // publishes.
  template <class Comm>
  static bool first_of_all(Comm& world, Comm* tensor) {
    return world.rank() == 0 && (!tensor || tensor->rank() == 0);
  }
  template <class Comm, class Step>
  static void agree(Comm& world, Comm* tensor, const std::string& what, Step&& step) {
    if (tensor)
      agreed_over_grid(world, *tensor, what, step);
    else
      agreed(world, what, step);
  }

  // Runs `step` (agreed collectives); where it throws, rank 0 removes what the save wrote before
  // rethrowing. Every writer has stopped by then: each rank joined its own before agreeing.
  template <class Comm, class Step>
  void or_abandon(Comm& world, Comm* tensor, const std::string& tag, Step&& step) {
    try {
      step();
    } catch (...) {
      if (first_of_all(world, tensor) && dir_) abandon(*dir_, tag);
      throw;
    }
  }

  std::optional<StateSave> pending_;
  std::optional<DirectoryHandle> dir_; // rank 0: DIR, opened once for the whole save
  // DIR/.TAG.partial, or this tensor rank's sub-directory of it: where this rank writes.
  std::shared_ptr<const DirectoryHandle> partial_;
  std::filesystem::path path_; // DIR as the caller named it
  Manifest manifest_;
  int saving_ranks_ = 1;
  std::shared_ptr<StateSave::Snapshot> snapshot_; // reused by background saves
};

} // namespace zero::checkpoint
