// BucketedReducer against averages computed locally from every rank's (reproducible) gradients:
// both strategies, bucket sizes from one element to larger than the model, float and half buckets,
// written and accumulated targets, layers handed over in backward, forward and shuffled order, and
// three layouts: flat contiguous (images in order), per-parameter chunks (equal blocks, images out
// of order) and whole parameters (unequal blocks, reduced with per-rank counts).
// Results must match bit for bit: the communicators sum in rank order. Every case runs three ways:
// inline (HostThreads), queued on a host stream with a host communicator (each collective waits on
// the host for its packing), and queued with a staged communicator ordered after that stream. A
// deferring stream shows that a collective waits for its packing.

#include "comm_test.hpp"

#include <zero/comm/counting_communicator.hpp>
#include <zero/comm/staged_communicator.hpp>
#include <zero/core/host_stream.hpp>
#include <zero/core/host_stream_space.hpp>
#include <zero/reduce/bucketed_reducer.hpp>
#include <zero/shard/flat_contiguous.hpp>
#include <zero/shard/layer_images.hpp>
#include <zero/shard/per_parameter.hpp>
#include <zero/shard/whole_parameter_greedy.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <random>
#include <vector>

namespace {

using zero::DType;

// Layers of awkward sizes: empty, one element, primes, one larger than most buckets.
std::vector<zero::ParameterSpec> model() {
  std::vector<zero::ParameterSpec> params;
  const std::size_t sizes[][2] = {{3, 1}, {0, 0}, {1, 0}, {1031, 17}, {64, 8}, {4001, 3}};
  for (int layer = 0; layer < 6; ++layer) {
    params.push_back(
        {"layer" + std::to_string(layer) + ".weight", sizes[layer][0], DType::float32, layer});
    params.push_back(
        {"layer" + std::to_string(layer) + ".bias", sizes[layer][1], DType::float32, layer});
  }
  return params;
}

// Rank r's gradient element i of layer g.
float grad_value(int rank, std::size_t g, std::size_t i) {
  std::uint32_t x = static_cast<std::uint32_t>(rank * 7919 + g * 104729 + i * 31 + 1);
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return static_cast<float>(x % 20001) * 1e-4f - 1.0f;
}

template <class G>
std::vector<G> layer_grads(int rank, std::size_t g, std::size_t numel) {
  std::vector<G> v(numel);
  for (std::size_t i = 0; i < numel; ++i)
    v[i] = zero::convert<G>(grad_value(rank, g, i));
  return v;
}

// The rank-order average as the collectives compute it, in the bucket type; with `first_rank`, of
// the gradients of ranks first_rank, first_rank + 1, ...
template <class B>
float expected_average(int ranks, std::size_t g, std::size_t i, int first_rank = 0) {
  using A = zero::accumulate_t<B>;
  A acc = zero::convert<A>(zero::convert<B>(grad_value(first_rank, g, i)));
  for (int r = 1; r < ranks; ++r)
    acc = acc + zero::convert<A>(zero::convert<B>(grad_value(first_rank + r, g, i)));
  return zero::convert<float>(zero::convert<B>(acc / static_cast<A>(ranks)));
}

struct Case {
  std::size_t bucket_elements;
  DType bucket;
  int order; // 0 backward, 1 forward, 2 shuffled
  bool accumulate;
  int partitioner = 0; // 0 flat contiguous, 1 per parameter, 2 whole parameters (unequal)
};

zero::ShardLayout make_layout(int partitioner, const std::vector<zero::ParameterSpec>& params,
                              int ranks) {
  if (partitioner == 1) return zero::PerParameter{.alignment = 2}.partition(params, ranks);
  if (partitioner == 2) return zero::WholeParameterGreedy{}.partition(params, ranks);
  return zero::FlatContiguous{.alignment = 4}.partition(params, ranks);
}

// Where each parameter starts among its layer's parameters in order.
std::vector<std::size_t> ordered_begin(const zero::ShardLayout& layout) {
  std::vector<std::size_t> begin(layout.parameter_count());
  for (std::size_t g = 0; g < layout.layer_count(); ++g) {
    std::size_t at = 0;
    for (std::size_t p : layout.layer_parameters(g)) {
      begin[p] = at;
      at += layout.parameter(p).numel;
    }
  }
  return begin;
}

// `counted`: the communicator's statistics, where it counts.
template <class Strategy, class G, class Comm, class Exec>
void run_case_on(Comm& comm, Exec exec, const zero::CommStats* counted, const Case& c) {
  auto& world = zero::testing::world();
  const int rank = world.rank(), ranks = world.size();
  const auto params = model();
  const zero::ShardLayout layout = make_layout(c.partitioner, params, ranks);
  const zero::LayerImages images(layout);
  zero::BucketedReducer<Comm, Strategy, Exec> reducer(
      comm, layout, images,
      {.bucket_elements = c.bucket_elements, .bucket_dtype = c.bucket, .op = zero::ReduceOp::avg},
      exec);

  constexpr bool scatter = Strategy::collective == zero::Collective::reduce_scatter;
  std::size_t target_size = scatter ? layout.shard_numel(rank) : 0;
  if (!scatter)
    for (std::size_t g = 0; g < layout.layer_count(); ++g)
      target_size += layout.layer(g).flat_numel;
  const float initial = c.accumulate ? 0.5f : 0.0f;
  std::vector<float> target(target_size, initial);
  std::vector<zero::half> half_target(target_size);
  const bool half_out = c.bucket == DType::float16 && !c.accumulate;
  reducer.begin({half_out ? static_cast<void*>(half_target.data()) : target.data(),
                 half_out ? DType::float16 : DType::float32, target_size,
                 c.accumulate ? zero::Delivery::accumulate : zero::Delivery::assign});

  std::vector<std::size_t> order(layout.layer_count());
  std::iota(order.begin(), order.end(), 0);
  if (c.order == 0) std::reverse(order.begin(), order.end());
  if (c.order == 2) std::shuffle(order.begin(), order.end(), std::mt19937(42)); // same on all ranks
  std::vector<std::vector<G>> grads(layout.layer_count()); // read by queued packing
  for (std::size_t g : order) {
    grads[g] = layer_grads<G>(rank, g, layout.layer(g).numel);
    reducer.add(g, zero::View<const G>(grads[g]));
  }
  reducer.finish();
  if constexpr (zero::StreamSpace<Exec>) exec.fence(); // the deliveries are queued

  if (half_out)
    for (std::size_t i = 0; i < target_size; ++i)
      target[i] = static_cast<float>(half_target[i]);
  const std::string what =
      std::string(Exec::name) + " " + std::string(scatter ? "reduce_scatter" : "all_reduce") +
      " bucket " + std::to_string(c.bucket_elements) + " " + zero::to_string(c.bucket) + " order " +
      std::to_string(c.order) + (c.accumulate ? " accumulate" : "");
  const std::string layout_name(layout.policy());
  auto expected = [&](std::size_t g, std::size_t i) {
    float want = c.bucket == DType::float16 ? expected_average<zero::half>(ranks, g, i)
                                            : expected_average<float>(ranks, g, i);
    return c.accumulate ? want + initial : want;
  };
  auto check = [&](std::size_t at, float want, std::size_t g, std::size_t i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(target[at]), std::bit_cast<std::uint32_t>(want))
        << what << " " << layout_name << ": layer " << g << " element " << i << " got "
        << target[at] << " want " << want;
  };
  std::size_t checked = 0;
  if (scatter) {
    // This rank's shard: each position holds its parameter element's average, padding zero.
    const auto begin = ordered_begin(layout);
    for (std::size_t at = 0; at < layout.shard_numel(rank); ++at, ++checked) {
      const auto ref = layout.element_at(rank, at);
      if (!ref) {
        check(at, c.accumulate ? initial : 0.0f, 0, at);
        continue;
      }
      const std::size_t g = layout.layer_of(ref->parameter);
      const std::size_t i = begin[ref->parameter] + ref->offset;
      check(at, expected(g, i), g, i);
    }
  } else {
    // The whole model, each layer's parameters in order at its flat_base, then its padding.
    for (std::size_t g = 0; g < layout.layer_count(); ++g) {
      const zero::LayerInfo& info = layout.layer(g);
      for (std::size_t i = 0; i < info.flat_numel; ++i, ++checked)
        check(info.flat_base + i, i < info.numel ? expected(g, i) : (c.accumulate ? initial : 0.0f),
              g, i);
    }
  }
  EXPECT_GT(checked, 0u);
  if (counted == nullptr) return;
  // Every bucket went out once: the reduced elements are the model's padded size.
  const auto& stats = *counted;
  const auto op = scatter ? zero::Collective::reduce_scatter : zero::Collective::all_reduce;
  std::size_t padded = 0;
  for (std::size_t g = 0; g < layout.layer_count(); ++g)
    padded += layout.layer(g).flat_numel;
  EXPECT_EQ(stats[op].elements, padded) << what;
  EXPECT_EQ(stats[op].calls, reducer.plan().size()) << what;
  std::size_t widest = 0;
  for (std::size_t g = 0; g < layout.layer_count(); ++g)
    widest = std::max(widest, reducer.plan().buckets_of(g).size());
  EXPECT_LE(reducer.buffer_bytes(), (c.order == 0 ? widest + 1 : reducer.plan().size()) *
                                        reducer.plan().largest_bucket_elements() *
                                        zero::size_of(c.bucket))
      << what;
}

template <class Strategy, class G>
void run_case(const Case& c) {
  const auto mpi = [] {
    return zero::MpiCommunicator(zero::testing::world().boost_communicator());
  };
  {
    zero::CountingCommunicator counting{mpi()};
    run_case_on<Strategy, G>(counting, zero::HostThreads{}, &counting.stats(), c);
  }
  zero::HostStream stream("reducer");
  const zero::HostStreamSpace queued(stream);
  {
    zero::CountingCommunicator counting{mpi()};
    run_case_on<Strategy, G>(counting, queued, &counting.stats(), c);
  }
  zero::HostStream transfer("transfer");
  zero::StagedCommunicator<zero::HostStreamSpace, zero::MpiCommunicator> staged(
      mpi(), zero::HostStreamSpace(transfer), zero::HostStreamSpace(transfer));
  run_case_on<Strategy, G>(staged, queued, nullptr, c); // the reducer points it at `stream`...
  EXPECT_EQ(&staged.caller().stream(), &transfer);      // ...while it launches, and only then
}

const Case cases[] = {{1, DType::float32, 0, false},         {7, DType::float32, 0, false},
                      {100, DType::float32, 1, false},       {1000, DType::float32, 2, false},
                      {1 << 20, DType::float32, 0, false},   {333, DType::float16, 0, false},
                      {333, DType::float16, 2, true},        {5000, DType::float32, 0, true},
                      {64, DType::float32, 1, true},         {1, DType::float32, 0, false, 1},
                      {100, DType::float32, 2, false, 1},    {333, DType::float16, 0, true, 1},
                      {1, DType::float32, 0, false, 2},      {7, DType::float32, 1, false, 2},
                      {1000, DType::float32, 2, true, 2},    {333, DType::float16, 0, false, 2},
                      {1 << 20, DType::float32, 0, false, 2}};

TEST(BucketedReducer, ReduceScatterFloatGradients) {
  for (const Case& c : cases)
    run_case<zero::ReduceScatterGradients, float>(c);
}
TEST(BucketedReducer, AllReduceFloatGradients) {
  for (const Case& c : cases)
    run_case<zero::AllReduceGradients, float>(c);
}
TEST(BucketedReducer, HalfGradientsIntoHalfBuckets) {
  run_case<zero::ReduceScatterGradients, zero::half>({500, DType::float16, 0, false});
  run_case<zero::AllReduceGradients, zero::half>({500, DType::float16, 2, true});
}

TEST(BucketedReducer, BackwardOrderNeedsTheLargestLayersBucketsPlusOne) {
  auto& world = zero::testing::world();
  const auto layout = zero::FlatContiguous{}.partition(model(), world.size());
  const zero::LayerImages images(layout);
  zero::BucketedReducer<zero::MpiCommunicator, zero::ReduceScatterGradients> reducer(
      world, layout, images, {.bucket_elements = 64, .bucket_dtype = DType::float32});
  std::vector<float> shard(layout.shard_numel(world.rank()));
  for (int step = 0; step < 3; ++step) {
    reducer.begin({shard.data(), DType::float32, shard.size(), zero::Delivery::assign});
    for (std::size_t g = layout.layer_count(); g-- > 0;) {
      const auto grads = layer_grads<float>(world.rank(), g, layout.layer(g).numel);
      reducer.add(g, zero::View<const float>(grads));
    }
    reducer.finish();
  }
  EXPECT_GT(reducer.plan().size(), 10u);
  std::size_t widest = 0;
  for (std::size_t g = 0; g < layout.layer_count(); ++g)
    widest = std::max(widest, reducer.plan().buckets_of(g).size());
  EXPECT_LE(reducer.buffer_bytes(),
            (widest + 1) * reducer.plan().largest_bucket_elements() * sizeof(float));
  EXPECT_GE(reducer.stats().buckets, reducer.plan().size());
}

// Over a deferring stream (it runs work only once something waits for it) the packing has not run
// when the bucket fills: the collective must wait for it (a host communicator, on the host; a
// staged one, after the caller stream). A reducer that launched without waiting would reduce the
// unpacked buffer: the shard would not hold the averages, every run. Each call takes gradients of
// its own (`first_rank`), so that a bucket allocated where an earlier call's was cannot hold the
// right values before its packing.
template <class Comm>
void expect_collective_after_packing(Comm& comm, zero::HostStream& stream, int first_rank) {
  auto& world = zero::testing::world();
  const auto layout = zero::FlatContiguous{}.partition(model(), world.size());
  const zero::LayerImages images(layout);
  zero::BucketedReducer<Comm, zero::ReduceScatterGradients, zero::HostStreamSpace> reducer(
      comm, layout, images, {.bucket_elements = 1 << 20, .bucket_dtype = DType::float32},
      zero::HostStreamSpace(stream));
  std::vector<float> shard(layout.shard_numel(world.rank()), -7.0f);
  std::vector<std::vector<float>> grads(layout.layer_count());
  stream.defer_until_waited();
  reducer.begin({shard.data(), DType::float32, shard.size(), zero::Delivery::assign});
  for (std::size_t g = layout.layer_count(); g-- > 0;) {
    grads[g] = layer_grads<float>(first_rank + world.rank(), g, layout.layer(g).numel);
    reducer.add(g, zero::View<const float>(grads[g]));
  }
  reducer.finish();
  stream.end_deferral();
  stream.synchronize();
  const auto begin = ordered_begin(layout);
  for (std::size_t at = 0; at < shard.size(); ++at) {
    const auto ref = layout.element_at(world.rank(), at);
    const std::size_t g = ref ? layout.layer_of(ref->parameter) : 0;
    const float want = ref ? expected_average<float>(
                                 world.size(), g, begin[ref->parameter] + ref->offset, first_rank)
                           : 0.0f;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(shard[at]), std::bit_cast<std::uint32_t>(want))
        << "element " << at << " of the shard: got " << shard[at] << ", want " << want
        << " (a collective before its packing?)";
  }
}

TEST(BucketedReducer, OverAStreamACollectiveWaitsForItsPacking) {
  auto& world = zero::testing::world();
  zero::HostStream stream("reducer");
  expect_collective_after_packing(world, stream, 0);
  zero::HostStream transfer("transfer");
  zero::StagedCommunicator<zero::HostStreamSpace, zero::MpiCommunicator> staged(
      zero::MpiCommunicator(world.boost_communicator()), zero::HostStreamSpace(transfer),
      zero::HostStreamSpace(transfer));
  expect_collective_after_packing(staged, stream, 100);
}

TEST(BucketedReducer, MistakesAreNamed) {
  auto& world = zero::testing::world();
  const auto layout = zero::FlatContiguous{}.partition(model(), world.size());
  const zero::LayerImages images(layout);
  zero::BucketedReducer<zero::MpiCommunicator, zero::AllReduceGradients> reducer(
      world, layout, images, {.bucket_elements = 1 << 20, .bucket_dtype = DType::float32});
  std::size_t flat = 0;
  for (std::size_t g = 0; g < layout.layer_count(); ++g)
    flat += layout.layer(g).flat_numel;
  std::vector<float> out(flat);
  std::vector<float> small(2);
  EXPECT_THROW(reducer.add(0, zero::View<const float>(small)), zero::Error) << "before begin";
  reducer.begin({out.data(), DType::float32, out.size(), zero::Delivery::assign});
  try {
    reducer.add(0, zero::View<const float>(small));
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0 has 4 gradient elements, got 2"),
              std::string::npos)
        << e.what();
  }
  const auto g5 = layer_grads<float>(world.rank(), 5, layout.layer(5).numel);
  reducer.add(5, zero::View<const float>(g5));
  EXPECT_THROW(reducer.add(5, zero::View<const float>(g5)), zero::Error) << "twice";
  try {
    reducer.finish();
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no gradient was handed over for layer(s) 0, 2, 3, 4"),
              std::string::npos)
        << e.what();
  }
  // A layout for another number of ranks is named before anything reads its plan (for fewer ranks
  // than the communicator has, reading it first read past the plan's per-rank sections).
  const int other = world.size() > 1 ? world.size() - 1 : 2;
  const auto mismatched = zero::FlatContiguous{}.partition(model(), other);
  const zero::LayerImages mismatched_images(mismatched);
  try {
    zero::BucketedReducer<zero::MpiCommunicator, zero::AllReduceGradients> wrong(
        world, mismatched, mismatched_images,
        {.bucket_elements = 64, .bucket_dtype = DType::float32});
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the layout is for " + std::to_string(other) +
                                         " ranks but the communicator has " +
                                         std::to_string(world.size())),
              std::string::npos)
        << e.what();
  }
}

} // namespace
