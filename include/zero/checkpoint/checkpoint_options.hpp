#pragma once
// What the engine's save_checkpoint takes beyond its own state, and what load_checkpoint reports:
// apart from the checkpoint format (run_state.hpp), so that the engine's class declares its
// checkpoint calls without the format's code (zero/engine/engine_class.hpp).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace zero {

class LrScheduler;

// What save_checkpoint stores beyond the engine's own state.
struct CheckpointOptions {
  // Opaque bytes the caller gets back from load_checkpoint (data position, RNG state, ...).
  std::vector<std::byte> user_state = {};
  // Its position is saved, and restored by load_checkpoint when one is passed there too.
  const LrScheduler* lr_scheduler = nullptr;
  // Copy this rank's states to host memory and write them from a background thread; the save
  // completes (and errors surface, on every rank) at the next save, load or
  // wait_for_checkpoint().
  bool async = false;
};

// What load_checkpoint found.
struct LoadedCheckpoint {
  std::filesystem::path path; // the checkpoint's directory
  std::string tag;
  std::int64_t optimizer_step = 0;   // applied steps when it was saved
  std::int64_t scaler_iteration = 0; // steps (applied or skipped) when it was saved
  int saved_world_size = 1;
  int saved_stage = 0;
  std::string saved_partitioner;
  int saved_tensor_parallel_size = 1; // the tensor-parallel size (loads only at the same)
  std::vector<std::byte> user_state;
  // What the load cost this rank: bytes read from state files (whole chunks, so at least what it
  // keeps), the seconds reading them (and agreeing that every rank could), and the seconds
  // rebuilding the compute copy from the master weights.
  std::size_t bytes_read = 0;
  double read_seconds = 0, rebuild_seconds = 0;
};

} // namespace zero
