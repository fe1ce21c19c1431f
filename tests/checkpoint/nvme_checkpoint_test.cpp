// Checkpoints of states on the NVMe tier: read and written through the stores' bounce buffers in
// pieces, they hold the same bytes as the same run's states in memory, and load into either
// placement at another world size; with 8-bit moments too (swapped as codes, saved as their
// values), and with split masters (the residuals swapped, saved as the masters they reconstruct).

#include "checkpoint_scenario.hpp"

#include <zero/engine/engine.hpp>
#include <zero/offload/nvme_stores.hpp>

#include <gtest/gtest.h>

namespace {

using namespace zero::testing::checkpoints;
namespace fs = std::filesystem;

using NvmeEverything =
    zero::Placement<zero::optimizer_states_in<zero::nvme>, zero::parameters_in<zero::nvme>>;
using NvmeOptimizer = zero::Placement<zero::optimizer_states_in<zero::nvme>>;
using Stage3 = zero::Stage<3>;
using OnNvme = Engine<Stage3, zero::Adam, zero::StaticLossScaler, NvmeEverything>;
using OptimizerOnNvme = Engine<Stage3, zero::Adam, zero::StaticLossScaler, NvmeOptimizer>;
using InMemory = Engine<Stage3, zero::Adam, zero::StaticLossScaler>;

zero::EngineOptions on_nvme(const fs::path& swap) {
  zero::EngineOptions o;
  o.compute_dtype = zero::DType::float32;
  o.deterministic = true;
  o.reduce_bucket_elements = 300;
  o.nvme.optimizer.nvme_path = o.nvme.parameters.nvme_path = swap;
  o.nvme.optimizer.sub_group_size = 1024; // layers cut into several pieces
  o.nvme.parameters.max_in_cpu = 0;
  o.nvme.parameters.buffer_size = 1 << 16;
  return o;
}

// Layers 2 and 4 of the scenario's model (1360 and 2064 elements) keep 8-bit moments.
zero::EngineOptions with_eight_bit_moments(zero::EngineOptions o) {
  o.moments = zero::MomentStorage::blockwise_8bit;
  o.eight_bit_min_elements = 1000;
  return o;
}

// Split masters need the compute copy in memory: the parameters stay there.
zero::EngineOptions with_split_masters(zero::EngineOptions o) {
  o.master = zero::MasterStorage::split_8bit;
  return with_eight_bit_moments(o);
}

template <class Nvme = OnNvme>
void expect_same_bytes_as_memory_and_loads_either_way(
    zero::EngineOptions (*states)(zero::EngineOptions), zero::DType dtype = zero::DType::float32) {
  const auto moments = [&](zero::EngineOptions o) { return states ? states(o) : o; };
  auto& world = zero::testing::world();
  SharedDir dir(world);
  const int rank = world.rank(), ranks = world.size();
  if (rank == 0)
    for (const char* swap : {"swap", "swapa", "swapb"})
      fs::create_directories(dir.path / swap);
  world.barrier();
  {
    auto nvme =
        make<Nvme>(world, dtype, zero::StaticLossScaler(), moments(on_nvme(dir.path / "swap")));
    initialise(nvme);
    train(nvme, 0, 3, rank, ranks);
    nvme.save_checkpoint(dir.path / "nvme", "s");
    EXPECT_THROW(nvme.save_checkpoint(dir.path / "nvme", "t", {.async = true}), zero::Error);
  }
  {
    auto memory = make<InMemory>(world, dtype, zero::StaticLossScaler(), moments({}));
    initialise(memory);
    train(memory, 0, 3, rank, ranks);
    memory.save_checkpoint(dir.path / "memory", "s");
  }
  expect_bitwise(contents(dir.path / "nvme" / "s"), contents(dir.path / "memory" / "s"),
                 "NVMe against memory");
  // Each loaded into the other placement, by a group of another size: the same weights after a
  // further step.
  zero::MpiCommunicator group = world.split(world.rank() == 0 ? 0 : 1, world.rank());
  const std::string side = world.rank() == 0 ? "a" : "b";
  std::vector<std::vector<float>> from_memory, from_nvme;
  {
    auto nvme = make<Nvme>(group, dtype, zero::StaticLossScaler(),
                           moments(on_nvme(dir.path / ("swap" + side))));
    (void)nvme.load_checkpoint(dir.path / "memory");
    nvme.save_checkpoint(dir.path / ("again-" + side), "s");
    train(nvme, 3, 4, group.rank(), group.size());
    from_memory = weights(nvme);
  }
  {
    auto memory = make<InMemory>(group, dtype, zero::StaticLossScaler(), moments({}));
    (void)memory.load_checkpoint(dir.path / "nvme");
    train(memory, 3, 4, group.rank(), group.size());
    from_nvme = weights(memory);
  }
  group.barrier();
  expect_bitwise(contents(dir.path / "memory" / "s"), contents(dir.path / ("again-" + side) / "s"),
                 "loaded onto NVMe and saved again");
  expect_bitwise(from_memory, from_nvme, "a step after loading into either placement");
}

TEST(NvmeCheckpoint, SameBytesAsMemoryAndLoadsEitherWay) {
  expect_same_bytes_as_memory_and_loads_either_way(nullptr);
}

TEST(NvmeCheckpoint, EightBitMomentsToo) {
  expect_same_bytes_as_memory_and_loads_either_way(with_eight_bit_moments);
}

TEST(NvmeCheckpoint, SplitMastersToo) {
  expect_same_bytes_as_memory_and_loads_either_way<OptimizerOnNvme>(with_split_masters,
                                                                    zero::DType::bfloat16);
}

} // namespace
