// The compute copy in device memory, over a device stream space (CudaStreamSpace; DeviceTwinSpace
// in CI, see staged_setup.hpp), through the staged communicator, against the host store
// (HostThreads over MPI) given the same weights and updates: every layer acquired reads the same
// bits. Stage 0 (every rank updates all of it), stages 1/2 (each rank updates its block of every
// layer, then an all-gather shares them; out-of-order images are unpacked on the stream): the
// replicated store; stage 3 (each rank keeps its block, a layer is gathered when acquired and
// prefetched, small layers stay gathered and are refreshed after the step): the sharded store.
// fp32 and fp16, three layouts, gather buckets smaller and larger than a layer, two steps. The
// step's writes are asynchronous copies on the store's stream, which is not the communicator's
// caller stream: the gathers must start after them. Run under mpirun at 1-3 ranks.

#include "device_model.hpp"
#include "staged_setup.hpp"

#include <zero/core/half.hpp>
#include <zero/engine/kept.hpp>
#include <zero/engine/model_layout.hpp>
#include <zero/engine/options.hpp>
#include <zero/engine/replicated_parameters.hpp>
#include <zero/engine/sharded_parameters.hpp>
#include <zero/offload/offloaded_parameters.hpp>
#include <zero/shard.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace device_parameter_store_test {

using namespace zero::testing;
using zero::DType;

// The same on every rank: what a rank writes of its part is then what the others gather.
float weight(int step, std::size_t layer, std::size_t i) {
  return float((step * 7717 + layer * 104729 + i * 31) % 20001) * 1e-4f - 1.0f;
}

template <class U>
std::vector<std::byte> bytes_of(const U* data, std::size_t n) {
  std::vector<std::byte> out(n * sizeof(U));
  if (n > 0) std::memcpy(out.data(), data, out.size());
  return out;
}

// The host and the device store of a stage: 0, 1 (stages 1/2), 3, or 4: stage 3 with the blocks
// in pinned host memory beside the device (offload_param), gathered on the device.
template <class T, class Partitioner, int Stage>
struct Stores {
  using Updated = zero::Kept<Stage != 0, Partitioner, DeviceMemory>; // only how: sharded or not
  using Host = zero::ReplicatedParameters<T, Updated, zero::MpiCommunicator, zero::host>;
  using Device = zero::ReplicatedParameters<T, Updated, Staged, DeviceMemory, DeviceSpace>;
};
template <class T, class Partitioner>
struct Stores<T, Partitioner, 3> {
  using Host =
      zero::ShardedParameters<T, zero::Kept<true, Partitioner, zero::host>, zero::MpiCommunicator>;
  using Device =
      zero::ShardedParameters<T, zero::Kept<true, Partitioner, DeviceMemory>, Staged, DeviceSpace>;
};
template <class T, class Partitioner>
struct Stores<T, Partitioner, 4> {
  using Host = typename Stores<T, Partitioner, 3>::Host;
  using Device = zero::OffloadedParameters<T, zero::Kept<true, Partitioner, zero::pinned_host>,
                                           Staged, DeviceSpace>;
};

// `gather`: the elements per gather collective (stages 1/2), or the persistence threshold (stage
// 3: layers of fewer elements stay gathered). `held`: from each step's writes to its checks, the
// store's stream runs work only once waited for (the twin only: ComputeHold), so that gathers not
// ordered after it share the previous step's weights, every run.
template <class T, class Partitioner, int Stage>
void run_case(StagedSetup& s, std::size_t gather, bool held = false) {
  constexpr bool sharded_update = Stage != 0;
  constexpr bool gathered = Stage >= 3;
  const zero::ModelLayout layout(
      test_partitioner<Partitioner>().partition(device_test_model(20000), s.ranks), s.rank, s.rank);
  zero::EngineOptions options;
  options.compute_dtype = zero::dtype_of<T>;
  if constexpr (gathered) {
    options.persistence_threshold = gather;
    options.prefetch_elements = 30000; // one more layer gathered ahead of the one acquired
  } else {
    options.allgather_bucket_elements = gather;
  }
  typename Stores<T, Partitioner, Stage>::Host host(world(), layout, options);
  typename Stores<T, Partitioner, Stage>::Device device(s.comm, layout, options, nullptr,
                                                        s.compute());
#if ZERO_TEST_TWIN
  // The blocks' copies to the device run only once waited for: a gather not ordered after its
  // block's copy reads a buffer that does not hold the block yet, every run.
  if constexpr (Stage == 4) device.blocks().copy_space().stream().defer_until_waited();
#endif
  const std::string what = std::string(Stage == 4   ? "stage 3 offloaded "
                                       : Stage == 3 ? "stage 3 "
                                       : Stage      ? "stages 1/2 "
                                                    : "stage 0 ") +
                           zero::to_string(zero::dtype_of<T>) + " layout " +
                           std::string(layout.sharded->policy()) +
                           (gathered ? " persistence threshold " : " gather bucket ") +
                           std::to_string(gather) + (held ? " held" : "");

  const auto expect_same_layers = [&](const char* when) {
    for (std::size_t l = 0; l < layout.layers(); ++l) {
      const zero::LayerParameters on_host = host.acquire(l);
      const zero::LayerParameters on_device = device.acquire(l);
      EXPECT_STREQ(on_device.memory(), DeviceMemory::name);
      EXPECT_THROW((void)on_device.values<T>(), zero::Error)
          << "a device layer read as host memory";
      const auto values = on_device.values<T, DeviceMemory>();
      std::vector<T> got(values.size());
      copy(s.compute(), values, zero::View<T>(got));
      s.compute().fence();
      const auto want = on_host.values<T>();
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(bytes_of(got.data(), got.size()), bytes_of(want.data(), want.size()))
          << what << ", " << when << ": layer " << l;
    }
  };

  for (std::size_t l = 0; l < layout.layers(); ++l) {
    std::vector<float> values(layout.sharded->layer(l).numel);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = weight(-1, l, i);
    host.set_layer(l, zero::View<const float>(values));
    device.set_layer(l, zero::View<const float>(values));
  }
  expect_same_layers("after set_layer");

  for (int step = 0; step < 2; ++step) {
    host.begin_update();
    device.begin_update();
    std::vector<zero::Buffer<T, zero::pinned_host>> pinned; // until the stream ran the copies
    ComputeHold hold(s, held);
    for (std::size_t l = 0; l < layout.layers(); ++l) {
      // What this rank updates: all of the layer (stage 0), or its block of the layer's image
      // (stages 1/2), whose positions map to parameter elements through the images.
      const zero::View<T> host_target = host.update_target(l);
      std::vector<float> ordered(layout.sharded->layer(l).numel);
      for (std::size_t i = 0; i < ordered.size(); ++i)
        ordered[i] = weight(step, l, i);
      std::vector<T> mine(host_target.size());
      if constexpr (sharded_update)
        layout.pack_my_block(l, ordered.data(), mine.data());
      else
        for (std::size_t i = 0; i < ordered.size(); ++i)
          mine[i] = T(ordered[i]);
      std::copy(mine.begin(), mine.end(), host_target.begin());
      host.layer_updated(l);

      // Device memory, or host memory for the offloaded blocks: a copy on the stream either way.
      const auto device_target = device.update_target(l);
      ASSERT_EQ(device_target.size(), mine.size());
      pinned.emplace_back(mine.size(), zero::uninitialized);
      std::copy(mine.begin(), mine.end(), pinned.back().data());
      copy(s.compute(), zero::View<const T, zero::pinned_host>(pinned.back().view()),
           device_target);
      device.layer_updated(l);
    }
    host.end_update();
    device.end_update();
    expect_same_layers(("after step " + std::to_string(step)).c_str());
    host.end_step();
    device.end_step();
  }
  // What the cases are there for happened: stage 3 prefetched (a layer gathered ahead of its
  // acquisition), and the per-parameter and unequal layouts gave out-of-order images.
  if constexpr (gathered) {
    EXPECT_GT(device.gather_counts().prefetched, 0u) << what;
  }
  if (s.ranks > 1 && !std::is_same_v<Partitioner, zero::FlatContiguous>) {
    EXPECT_FALSE(layout.images.all_in_order()) << what;
  }
  // Offloaded, no block stays in device memory: beside the gathered layers' pool (the layer held,
  // those prefetched or kept for their next use) and the layers kept gathered, only the blocks on
  // their way, at most one per gathered layer's buffer. The host keeps the shard.
  if constexpr (Stage == 4) {
    std::size_t largest_layer = 0, largest_block = 0, kept = 0;
    for (std::size_t l = 0; l < layout.layers(); ++l) {
      largest_layer = std::max(largest_layer, layout.sharded->layer(l).flat_numel);
      largest_block = std::max(largest_block, layout.sharded->block(l, s.rank).size());
      if (layout.sharded->layer(l).numel < gather) kept += layout.sharded->layer(l).flat_numel;
    }
    const std::size_t block_bytes = device.blocks().buffer_bytes();
    const std::size_t layer_buffers =
        (device.buffer_bytes() - block_bytes) / (largest_layer * sizeof(T));
    EXPECT_GT(block_bytes, 0u) << what;
    EXPECT_LE(block_bytes / (largest_block * sizeof(T)), layer_buffers) << what;
    EXPECT_EQ(device.parameter_bytes().memory,
              layout.sharded->shard_numel(s.rank) * sizeof(T) + kept * sizeof(T))
        << what;
  }
}

template <class T, class Partitioner>
void replicated_cases(StagedSetup& s) {
  for (const std::size_t bucket : {std::size_t{500}, std::size_t{1} << 20}) {
    run_case<T, Partitioner, 0>(s, bucket);
    run_case<T, Partitioner, 1>(s, bucket);
  }
}

// Stage 3: every layer gathered when acquired, or the three small ones kept gathered.
template <class T, class Partitioner>
void sharded_cases(StagedSetup& s) {
  for (const std::size_t persistence : {std::size_t{0}, std::size_t{100}})
    run_case<T, Partitioner, 3>(s, persistence);
}

// Stage 3 with the blocks in host memory: every layer gathered on the device from blocks copied
// there, or the small ones kept gathered; the step's writes are copies into host memory queued on
// the store's stream, which the next copies to the device must follow.
template <class T, class Partitioner>
void offloaded_cases(StagedSetup& s) {
  for (const std::size_t persistence : {std::size_t{0}, std::size_t{100}})
    run_case<T, Partitioner, 4>(s, persistence);
#if ZERO_TEST_TWIN
  run_case<T, Partitioner, 4>(s, 0, /*held=*/true);
#endif
}

TEST(DeviceReplicatedParameters, FlatGivesTheHostBits) {
  StagedSetup s;
  replicated_cases<float, zero::FlatContiguous>(s);
  replicated_cases<zero::half, zero::FlatContiguous>(s);
}

TEST(DeviceReplicatedParameters, OutOfOrderImagesGiveTheHostBits) {
  StagedSetup s;
  replicated_cases<float, zero::PerParameter>(s);
  replicated_cases<zero::half, zero::WholeParameterGreedy>(s);
}

TEST(DeviceShardedParameters, FlatGivesTheHostBits) {
  StagedSetup s;
  sharded_cases<float, zero::FlatContiguous>(s);
  sharded_cases<zero::half, zero::FlatContiguous>(s);
}

TEST(DeviceShardedParameters, OutOfOrderImagesGiveTheHostBits) {
  StagedSetup s;
  sharded_cases<float, zero::PerParameter>(s);
  sharded_cases<zero::half, zero::WholeParameterGreedy>(s);
}

#if ZERO_TEST_TWIN
// The store's stream held while the step writes: the gathers of stages 1/2 must start after those
// writes, through the communicator pointed at the store's stream (not its own caller stream).
TEST(DeviceReplicatedParameters, GathersStartAfterTheStepsWrites) {
  StagedSetup s;
  run_case<float, zero::FlatContiguous, 1>(s, std::size_t{1} << 20, true);
  run_case<float, zero::PerParameter, 1>(s, 500, true);
}

// Stage 3: the layers kept gathered are refreshed after the step's writes (end_update fences the
// stream first, which also orders the gathers acquire() starts after them; those gathers' own
// ordering after the stream is DeviceGather.QueuedReadsSeeEveryLayerInOrder's).
TEST(DeviceShardedParameters, GathersStartAfterTheStepsWrites) {
  StagedSetup s;
  run_case<float, zero::FlatContiguous, 3>(s, 100, true);
  run_case<float, zero::PerParameter, 3>(s, 100, true);
}
#endif

TEST(DeviceOffloadedParameters, BlocksInHostMemoryGiveTheHostBits) {
  StagedSetup s;
  offloaded_cases<float, zero::FlatContiguous>(s);
  offloaded_cases<zero::half, zero::PerParameter>(s);
}

} // namespace device_parameter_store_test
