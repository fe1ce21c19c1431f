// BucketedReducer over a device stream space (CudaStreamSpace; DeviceTwinSpace in CI, see
// staged_setup.hpp): gradients in device memory, packed into device buckets by the run-table
// kernels on the caller's stream, reduced through the staged communicator (pointed at
// that stream while the reducer launches), delivered into a device target; against the host
// reducer (HostThreads over MPI) on the same gradients, bit for bit; at one rank also through NCCL.
// Both strategies, float and half buckets, written and accumulated targets, three layouts (in
// order, per-parameter chunks, unequal whole parameters), buckets of 7 elements to larger than the
// model. The gradients are written by asynchronous copies on the stream just before add(): the
// packing is ordered after them by the stream alone. Run under mpirun at 1-3 ranks sharing one GPU
// (tools/zero-gpu-check), and at 1-3 ranks over the twin in CI.

#include "device_model.hpp"
#include "staged_setup.hpp"
#include "test_outcome.hpp"

#include <zero/core/buffer.hpp>
#include <zero/core/half.hpp>
#include <zero/reduce/bucketed_reducer.hpp>
#include <zero/shard.hpp>
#include <zero/shard/layer_images.hpp>

#if !ZERO_TEST_TWIN
#include <zero/comm/nccl_communicator.hpp>
#endif

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace zero::testing;
using zero::DType;

std::vector<float> layer_grads(int rank, std::size_t layer, std::size_t numel) {
  std::vector<float> v(numel);
  for (std::size_t i = 0; i < numel; ++i)
    v[i] = float((rank * 7919 + layer * 104729 + i * 31) % 20001) * 1e-4f - 1.0f;
  return v;
}

struct Case {
  std::size_t bucket_elements;
  DType bucket;
  bool accumulate;
  int partitioner;
};

zero::ShardLayout make_layout(const Case& c, int ranks) {
  const auto model = device_test_model(large_layer_for(c.bucket_elements, 40000));
  if (c.partitioner == 1) return zero::PerParameter{.alignment = 2}.partition(model, ranks);
  if (c.partitioner == 2) return zero::WholeParameterGreedy{}.partition(model, ranks);
  return zero::FlatContiguous{.alignment = 4}.partition(model, ranks);
}

// `comm`: the device communicator (the staged one, or NCCL at one rank).
template <class Strategy, class DeviceComm>
void run_case(StagedSetup& s, DeviceComm& comm, const Case& c) {
  const zero::ShardLayout layout = make_layout(c, s.ranks);
  const zero::LayerImages images(layout);
  constexpr bool scatter = Strategy::collective == zero::Collective::reduce_scatter;
  std::size_t size = scatter ? layout.shard_numel(s.rank) : 0;
  if (!scatter)
    for (std::size_t l = 0; l < layout.layer_count(); ++l)
      size += layout.layer(l).flat_numel;
  const bool half_out = c.bucket == DType::float16 && !c.accumulate;
  const std::size_t out_bytes = size * (half_out ? 2 : 4);
  const zero::Delivery mode = c.accumulate ? zero::Delivery::accumulate : zero::Delivery::assign;
  const std::vector<float> initial(size, c.accumulate ? 0.5f : 0.0f);
  const typename zero::BucketedReducer<zero::MpiCommunicator, Strategy>::Options options{
      .bucket_elements = c.bucket_elements, .bucket_dtype = c.bucket};

  // The host reducer's bits.
  std::vector<std::byte> expected(out_bytes);
  std::memcpy(expected.data(), initial.data(), half_out ? 0 : out_bytes);
  {
    zero::MpiCommunicator mpi(world().boost_communicator());
    zero::BucketedReducer<zero::MpiCommunicator, Strategy> host(mpi, layout, images, options);
    host.begin({expected.data(), half_out ? DType::float16 : DType::float32, size, mode});
    for (std::size_t l = layout.layer_count(); l-- > 0;) {
      const auto grads = layer_grads(s.rank, l, layout.layer(l).numel);
      host.add(l, zero::View<const float>(grads));
    }
    host.finish();
  }

  // The device reducer, on the caller's stream.
  const DeviceSpace stream = s.caller();
  std::vector<std::byte> initial_bytes(out_bytes);
  std::memcpy(initial_bytes.data(), initial.data(), half_out ? 0 : out_bytes);
  zero::Buffer<std::byte, DeviceMemory> target = s.upload(initial_bytes);
  std::vector<zero::Buffer<float, DeviceMemory>> grads(layout.layer_count());
  std::vector<zero::Buffer<float, zero::pinned_host>> pinned(layout.layer_count());
  zero::BucketedReducer<DeviceComm, Strategy, DeviceSpace> device(
      comm, layout, images, {.bucket_elements = c.bucket_elements, .bucket_dtype = c.bucket},
      stream);
  device.begin({target.data(), half_out ? DType::float16 : DType::float32, size, mode});
  for (std::size_t l = layout.layer_count(); l-- > 0;) {
    const std::size_t numel = layout.layer(l).numel;
    grads[l] = zero::Buffer<float, DeviceMemory>(numel, zero::uninitialized);
    pinned[l] = zero::Buffer<float, zero::pinned_host>(numel, zero::uninitialized);
    s.write_async(layer_grads(s.rank, l, numel), grads[l], pinned[l]);
    device.add(l, zero::View<const float, DeviceMemory>(grads[l].view()));
  }
  device.finish();
  const std::vector<std::byte> got = s.read(target);
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), out_bytes), 0)
      << (scatter ? "reduce_scatter" : "all_reduce") << " bucket " << c.bucket_elements << " "
      << zero::to_string(c.bucket) << (c.accumulate ? " accumulate" : "") << " layout "
      << layout.policy();
}

const Case cases[] = {{7, DType::float32, false, 0},   {1000, DType::float32, true, 0},
                      {333, DType::float16, false, 0}, {100, DType::float32, false, 1},
                      {333, DType::float16, true, 1},  {1 << 20, DType::float32, false, 1},
                      {7, DType::float32, false, 2},   {1000, DType::float32, true, 2},
                      {333, DType::float16, false, 2}};

TEST(DeviceReducer, ReduceScatterGivesTheHostBits) {
  StagedSetup s;
  for (const Case& c : cases)
    run_case<zero::ReduceScatterGradients>(s, s.comm, c);
}

TEST(DeviceReducer, AllReduceGivesTheHostBits) {
  StagedSetup s;
  for (const Case& c : cases)
    run_case<zero::AllReduceGradients>(s, s.comm, c);
}

#if !ZERO_TEST_TWIN
// NCCL (one rank per GPU, so one rank here), pointed at the reducer's stream while it launches.
TEST(DeviceReducer, OverNcclGivesTheHostBits) {
  StagedSetup s;
  if (s.ranks != 1)
    GTEST_SKIP() << zero::testing::not_applicable
                 << "NCCL takes one rank per GPU; this run shares one GPU";
  zero::NcclCommunicator nccl(world());
  for (const Case& c : cases) {
    run_case<zero::ReduceScatterGradients>(s, nccl, c);
    run_case<zero::AllReduceGradients>(s, nccl, c);
  }
  EXPECT_EQ(nccl.caller_stream(), nullptr); // pointed at the stream only while launching
}
#endif

} // namespace
