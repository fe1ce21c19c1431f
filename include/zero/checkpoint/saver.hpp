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
// they were.

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
  // (replicas of another rank's shard); `saving_ranks` ranks (0, 1, ...) save theirs.
  template <class Comm, class Store>
  void begin(Comm& world, const std::filesystem::path& dir, Manifest manifest,
             const CheckpointOptions& options, Store* store, int saving_ranks) {
    require(!pending_, "checkpoint: a save is already in flight");
    dir_.reset();
    std::shared_ptr<const DirectoryHandle> partial;
    or_abandon(world, manifest.tag, [&] {
      agreed(world, "preparing the checkpoint " + (dir / manifest.tag).string(), [&] {
        if (world.rank() != 0) return;
        dir_.emplace(open_for_saving(dir, true));
        prepare(*dir_, manifest.tag);
        partial = std::make_shared<const DirectoryHandle>(open_partial(*dir_, manifest.tag));
        if (!options.user_state.empty())
          manifest.user_state = write_small_file(*partial, user_state_file, options.user_state);
      });
      // The other ranks open what rank 0 prepared (the same checks: a rank of another user, or a
      // directory that differs between nodes, is an error on every rank).
      agreed(world, "opening the checkpoint " + (dir / manifest.tag).string(), [&] {
        if (world.rank() != 0)
          partial = std::make_shared<const DirectoryHandle>(
              open_partial(open_for_saving(dir, false), manifest.tag));
      });
    });
    if (!store)
      pending_.emplace();
    else if (options.async)
      pending_.emplace(StateSave::in_background(partial, *store, snapshot_));
    else
      pending_.emplace(StateSave::now(partial, *store));
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

  // Collective; nothing to do without a save in flight.
  template <class Comm>
  void finish(Comm& world) {
    if (!pending_) return;
    StateSave save = std::move(*pending_);
    pending_.reset();
    const Manifest manifest = std::move(manifest_);
    const std::string checkpoint = (path_ / manifest.tag).string();
    or_abandon(world, manifest.tag, [&] {
      agreed(world, "writing the state files of the checkpoint " + checkpoint, [&] {
        save.join();
        crash_point("states-written", world.rank());
      });
      agreed(world, "publishing the checkpoint " + checkpoint, [&] {
        if (world.rank() == 0) commit(*dir_, manifest.tag, manifest, saving_ranks_);
      });
    });
  }

 private:
  // Runs `step` (agreed collectives); where it throws, rank 0 removes what the save wrote before
  // rethrowing. Every writer has stopped by then: each rank joined its own before agreeing.
  template <class Comm, class Step>
  void or_abandon(Comm& world, const std::string& tag, Step&& step) {
    try {
      step();
    } catch (...) {
      if (world.rank() == 0 && dir_) abandon(*dir_, tag);
      throw;
    }
  }

  std::optional<StateSave> pending_;
  std::optional<DirectoryHandle> dir_; // rank 0: DIR, opened once for the whole save
  std::filesystem::path path_;         // DIR as the caller named it
  Manifest manifest_;
  int saving_ranks_ = 1;
  std::shared_ptr<StateSave::Snapshot> snapshot_; // reused by background saves
};

} // namespace zero::checkpoint
