// Stage 3's gather over a stream space (ParameterGather<T, Comm, HostStreamSpace>), the CPU twin of
// a GPU whose forward reads gathered layers on its compute stream. At 1, 2 and 3 ranks:
// - every layer, gathered in order, reversed and with prefetching, is read by work queued on the
//   stream after acquire() and holds its parameters in order (flat-contiguous images, and
//   per-parameter ones, whose unpacking is queued), inline and through MpiCommunicator or a
//   StagedCommunicator pointed at the stream;
// - a buffer given back by release() is gathered into again only after the work that read it ran:
//   the stream runs a queued read of layer A only once something waits for it, and layer B reuses
//   A's buffer. Without the wait the gather overwrites A before the read, which then sees B's
//   values, every run.

#include "training_scenario.hpp"

#include <zero/comm/staged_communicator.hpp>
#include <zero/core/host_stream.hpp>
#include <zero/core/host_stream_space.hpp>
#include <zero/engine/model_layout.hpp>
#include <zero/gather/parameter_gather.hpp>
#include <zero/shard/flat_contiguous.hpp>
#include <zero/shard/per_parameter.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

using namespace zero::testing;

// Layer l's parameters in order: element i.
float parameter_value(std::size_t l, std::size_t i) {
  return static_cast<float>(l * 1000 + i) * 0.25f + 1.0f;
}

// This rank's blocks of every layer, packed from the values above.
struct Blocks {
  explicit Blocks(const zero::ModelLayout& model) : blocks(model.layers()) {
    for (std::size_t l = 0; l < model.layers(); ++l) {
      std::vector<float> values(model.sharded->layer(l).numel);
      for (std::size_t i = 0; i < values.size(); ++i)
        values[i] = parameter_value(l, i);
      blocks[l].resize(model.my_block_size(l));
      model.pack_my_block(l, values.data(), blocks[l].data());
    }
  }
  zero::View<const float> block(std::size_t l) const { return zero::View<const float>(blocks[l]); }
  void prefetch(std::size_t) const noexcept {}
  void release(std::size_t) const noexcept {}
  std::vector<std::vector<float>> blocks;
};

zero::MpiCommunicator mpi() {
  return zero::MpiCommunicator(world().boost_communicator());
}
using Staged = zero::StagedCommunicator<zero::HostStreamSpace, zero::MpiCommunicator>;

// Acquires every layer in `order`, reads each with a copy queued on `space` (or at once, inline),
// and checks what was read.
template <class Comm, class Exec>
void expect_layers_read_in_order(Comm& comm, Exec exec, const zero::ModelLayout& model,
                                 const std::vector<std::size_t>& order, std::size_t prefetch,
                                 const std::string& what) {
  using Gather = zero::ParameterGather<float, Comm, Exec>;
  Blocks blocks(model);
  Gather gather(comm, *model.sharded, model.images,
                typename Gather::Limits{.prefetch_elements = prefetch,
                                        .max_live_elements = std::size_t{1} << 30},
                std::nullopt, nullptr, exec);
  std::vector<std::vector<float>> read(model.layers());
  for (int step = 0; step < 2; ++step) { // the second step prefetches in the recorded order
    for (std::size_t l : order) {
      const zero::View<const float> layer = gather.acquire(blocks, l);
      read[l].assign(layer.size(), -1.0f);
      if constexpr (zero::StreamSpace<Exec>)
        copy(exec, layer, zero::View<float>(read[l]));
      else
        std::copy_n(layer.data(), layer.size(), read[l].begin());
      gather.release(l);
    }
    gather.end_step();
    if constexpr (zero::StreamSpace<Exec>) exec.fence();
    for (std::size_t l = 0; l < model.layers(); ++l)
      for (std::size_t i = 0; i < read[l].size(); ++i)
        ASSERT_EQ(read[l][i], parameter_value(l, i))
            << what << ", step " << step << ": layer " << l << " element " << i;
  }
}

TEST(StreamGather, QueuedReadsSeeEveryLayerInOrder) {
  const int rank = world().rank();
  const std::vector<zero::ParameterSpec> params = model();
  const zero::ModelLayout flat(zero::make_layout(world(), zero::FlatContiguous{}, params), rank,
                               rank);
  const zero::ModelLayout per_parameter(
      zero::make_layout(world(), zero::PerParameter{.alignment = 2}, params), rank, rank);
  std::vector<std::size_t> forward(flat.layers()), backward;
  for (std::size_t l = 0; l < forward.size(); ++l)
    forward[l] = l;
  backward.assign(forward.rbegin(), forward.rend());
  zero::HostStream stream("forward");
  const zero::HostStreamSpace queued(stream);
  zero::HostStream transfer("transfer");
  for (const zero::ModelLayout* layout : {&flat, &per_parameter}) {
    if (world().size() > 1) { // the unpacking is exercised (one rank's image is in order)
      ASSERT_TRUE(layout == &flat || !layout->images.in_order(2));
    }
    for (const auto& order : {forward, backward})
      for (std::size_t prefetch : {std::size_t{0}, std::size_t{1} << 20}) {
        const std::string what = std::string(layout == &flat ? "flat" : "per-parameter") +
                                 (order == forward ? ", forward" : ", backward") +
                                 (prefetch ? ", prefetching" : "");
        zero::MpiCommunicator host = mpi();
        expect_layers_read_in_order(host, zero::HostThreads{}, *layout, order, prefetch,
                                    what + ", inline");
        expect_layers_read_in_order(host, queued, *layout, order, prefetch, what + ", queued");
        Staged staged(mpi(), zero::HostStreamSpace(transfer), zero::HostStreamSpace(transfer));
        expect_layers_read_in_order(staged, queued, *layout, order, prefetch, what + ", staged");
        EXPECT_EQ(&staged.caller().stream(), &transfer) << "the gather left its caller stream set";
      }
  }
}

// Layer 0 is acquired, read by a copy queued on a stream that runs it only once something waits for
// it (deferring), and released; layer 2 then takes its buffer (no prefetching: one buffer in the
// pool), which must wait for the read.
template <class Comm>
void expect_gather_after_queued_read(Comm& comm, zero::HostStream& stream) {
  const int rank = world().rank();
  const zero::ModelLayout layout(zero::make_layout(world(), zero::FlatContiguous{}, model()), rank,
                                 rank);
  using Gather = zero::ParameterGather<float, Comm, zero::HostStreamSpace>;
  const zero::HostStreamSpace space(stream);
  Blocks blocks(layout);
  Gather gather(comm, *layout.sharded, layout.images,
                typename Gather::Limits{.max_live_elements = std::size_t{1} << 30}, std::nullopt,
                nullptr, space);
  stream.defer_until_waited();
  const std::size_t a = 0, b = 2;
  const zero::View<const float> layer_a = gather.acquire(blocks, a);
  std::vector<float> read(layer_a.size(), -1.0f);
  copy(space, layer_a, zero::View<float>(read));
  gather.release(a);
  const std::size_t one_buffer = gather.pool_bytes();
  gather.acquire(blocks, b);
  EXPECT_EQ(gather.pool_bytes(), one_buffer) << "layer " << b << " did not reuse the buffer";
  stream.end_deferral();
  stream.synchronize();
  gather.release(b);
  for (std::size_t i = 0; i < read.size(); ++i)
    ASSERT_EQ(read[i], parameter_value(a, i))
        << "layer " << a << " element " << i << ": its buffer was gathered into before its read";
}

TEST(StreamGather, ABufferIsGatheredIntoOnlyAfterItsQueuedReaders) {
  zero::HostStream stream("forward");
  zero::MpiCommunicator host = mpi();
  expect_gather_after_queued_read(host, stream);
  zero::HostStream transfer("transfer");
  Staged staged(mpi(), zero::HostStreamSpace(transfer), zero::HostStreamSpace(transfer));
  expect_gather_after_queued_read(staged, stream);
}

} // namespace
