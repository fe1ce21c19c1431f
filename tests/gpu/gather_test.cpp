// Stage 3's gather over a device stream space (CudaStreamSpace; DeviceTwinSpace in CI, see
// staged_setup.hpp): each rank's blocks in device memory, gathered into device
// buffers through the staged communicator (and NCCL at one rank), out-of-order images unpacked by
// the run-table kernel on the caller's stream, layers kept gathered refreshed. After each acquire a
// copy of the layer is queued on the stream (a reader ordered by the stream alone) and the layer
// released at once, so that its buffer is gathered into again while that copy may still be
// pending: every copy must see its own layer's parameters in order. Forward then backward, with
// and without prefetching, flat and per-parameter layouts. Run under mpirun at 1-3 ranks sharing
// one GPU (tools/zero-gpu-check), and at 1-3 ranks over the twin in CI.

#include "staged_setup.hpp"
#include "test_outcome.hpp"

#include <zero/core/buffer.hpp>
#include <zero/gather/parameter_gather.hpp>
#include <zero/shard.hpp>
#include <zero/shard/layer_images.hpp>

#if !ZERO_TEST_TWIN
#include <zero/comm/nccl_communicator.hpp>
#endif

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using namespace zero::testing;

std::vector<zero::ParameterSpec> model() {
  std::vector<zero::ParameterSpec> params;
  const std::size_t sizes[][2] = {{3, 1}, {1031, 17}, {40000, 3}, {64, 8}, {5000, 0}};
  for (int layer = 0; layer < 5; ++layer) {
    params.push_back({"w" + std::to_string(layer), sizes[layer][0], zero::DType::float32, layer});
    params.push_back({"b" + std::to_string(layer), sizes[layer][1], zero::DType::float32, layer});
  }
  return params;
}

float value(std::size_t layer, std::size_t i) {
  return float(layer * 100000 + i);
}

// This rank's block of every layer, in device memory.
struct DeviceBlocks {
  std::vector<zero::Buffer<float, DeviceMemory>> blocks;
  zero::View<const float, DeviceMemory> block(std::size_t l) const { return blocks[l].view(); }
  void prefetch(std::size_t) const noexcept {}
  void release(std::size_t) const noexcept {}
};

template <class Comm>
void gather_every_layer(StagedSetup& s, Comm& comm, const zero::ShardLayout& layout,
                        std::size_t prefetch) {
  const zero::LayerImages images(layout);
  DeviceBlocks source;
  for (std::size_t l = 0; l < layout.layer_count(); ++l) {
    std::vector<float> ordered(layout.layer(l).numel);
    for (std::size_t i = 0; i < ordered.size(); ++i)
      ordered[i] = value(l, i);
    std::vector<float> block(layout.block(l, s.rank).size());
    images.pack(l, ordered.data(), layout.flat_range(l, s.rank), block.data());
    source.blocks.push_back(s.upload(block));
  }
  const DeviceSpace stream = s.caller();
  zero::ParameterGather<float, Comm, DeviceSpace> gather(
      comm, layout, images,
      {.persistence_threshold = 100, .prefetch_elements = prefetch, .max_live_elements = 1 << 22},
      std::nullopt, nullptr, stream);
  std::vector<std::size_t> order;
  for (std::size_t l = 0; l < layout.layer_count(); ++l)
    order.push_back(l);
  for (std::size_t l = layout.layer_count(); l-- > 0;)
    order.push_back(l);
  std::vector<zero::Buffer<float, DeviceMemory>> read(order.size());
  gather.refresh_persistent(source); // layers kept gathered are filled here (the engine: set_layer)
  for (int step = 0; step < 2; ++step) {
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t l = order[k];
      const zero::View<const float, DeviceMemory> layer = gather.acquire(source, l);
      read[k] = zero::Buffer<float, DeviceMemory>(layer.size(), zero::uninitialized);
      copy(stream, layer, read[k].view());
      gather.release(l);
    }
    stream.fence();
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::vector<float> got = s.read(read[k]);
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], value(order[k], i))
            << layout.policy() << " step " << step << " read " << k << " (layer " << order[k]
            << ") element " << i << " prefetch " << prefetch;
    }
    gather.begin_update(source);
    gather.refresh_persistent(source);
    gather.end_step();
  }
}

TEST(DeviceGather, QueuedReadsSeeEveryLayerInOrder) {
  StagedSetup s;
  for (const std::size_t prefetch : {std::size_t{0}, std::size_t{1} << 20}) {
    gather_every_layer(s, s.comm, zero::FlatContiguous{.alignment = 4}.partition(model(), s.ranks),
                       prefetch);
    gather_every_layer(s, s.comm, zero::PerParameter{.alignment = 2}.partition(model(), s.ranks),
                       prefetch);
  }
}

#if !ZERO_TEST_TWIN
TEST(DeviceGather, OverNcclToo) {
  StagedSetup s;
  if (s.ranks != 1)
    GTEST_SKIP() << zero::testing::not_applicable
                 << "NCCL takes one rank per GPU; this run shares one GPU";
  zero::NcclCommunicator nccl(world());
  gather_every_layer(s, nccl, zero::PerParameter{.alignment = 2}.partition(model(), 1),
                     std::size_t{1} << 20);
}
#endif

} // namespace
