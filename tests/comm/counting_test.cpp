// CountingCommunicator records calls and volumes per op, forwards to the wrapped communicator, and
// accounts an all-reduce as twice its size (the ZeRO paper's 2Ψ).

#include "comm_test.hpp"

#include <zero/comm/counting_communicator.hpp>

#include <gtest/gtest.h>

#include <vector>

namespace {

using zero::Collective;
using zero::ReduceOp;

// A communicator written by a user: only the typed API, no submit(). Counting must still work.
class TypedOnly : public zero::SelfCommunicator {
 public:
  using memory_space = zero::host;
  TypedOnly split(int, int) const { return {}; }
};
static_assert(zero::Communicator<TypedOnly>);

template <class C>
void exercise_and_check(zero::CountingCommunicator<C>& counting) {
  const std::size_t n = static_cast<std::size_t>(counting.size());
  std::vector<float> grads(100 * n, 1.0f), shard(100);
  counting.all_reduce(grads, ReduceOp::sum).wait();
  counting.reduce_scatter(grads, shard, ReduceOp::avg).wait();
  counting.all_gather(shard, grads).wait();
  counting.all_gather(grads).wait();
  counting.broadcast(shard, 0).wait();
  counting.barrier();
  const zero::CommStats& s = counting.stats();
  EXPECT_EQ(s[Collective::all_reduce].calls, 1u);
  EXPECT_EQ(s[Collective::all_reduce].elements, 100 * n);
  EXPECT_EQ(s[Collective::reduce_scatter].elements, 100 * n) << "the full input";
  EXPECT_EQ(s[Collective::all_gather].calls, 2u);
  EXPECT_EQ(s[Collective::all_gather].elements, 2 * 100 * n) << "the full output";
  EXPECT_EQ(s[Collective::all_gather].bytes, 2 * 100 * n * sizeof(float));
  EXPECT_EQ(s[Collective::broadcast].elements, 100u);
  EXPECT_EQ(s[Collective::barrier].calls, 1u);
  EXPECT_EQ(s.volume_elements(), 2 * 100 * n + 100 * n + 2 * 100 * n + 100);
  EXPECT_EQ(s.total_calls(), 6u);
  // The data really moved.
  EXPECT_EQ(grads[0], static_cast<float>(n));
  const zero::CommStats before = counting.stats();
  counting.all_reduce(shard, ReduceOp::max).wait();
  EXPECT_EQ((counting.stats() - before).volume_elements(), 200u);
  counting.reset_stats();
  EXPECT_EQ(counting.stats().total_calls(), 0u);
}

TEST(Counting, WrapsSelf) {
  zero::CountingCommunicator counting{zero::SelfCommunicator{}};
  exercise_and_check(counting);
}

TEST(Counting, WrapsATypedOnlyCommunicator) {
  zero::CountingCommunicator counting{TypedOnly{}};
  exercise_and_check(counting);
}

TEST(Counting, WrapsMpi) {
  zero::CountingCommunicator counting{
      zero::MpiCommunicator(zero::testing::world().boost_communicator())};
  exercise_and_check(counting);
  auto part = counting.split(counting.rank() % 2, 0);
  EXPECT_EQ(part.stats().total_calls(), 0u);
}

// Both transports reduce in rank order whatever the chunking, and reduce_scatter gives the same
// bits as the matching slice of all_reduce: the basis of deterministic training.
TEST(Determinism, ReductionsAreBitwiseReproducible) {
  auto& world = zero::testing::world();
  zero::CommOptions tiny = world.options();
  tiny.chunk_bytes = 4096;
  zero::MpiCommunicator small_chunks(world.boost_communicator(), tiny);
  const std::size_t n = static_cast<std::size_t>(world.size()) * 10007;
  std::vector<float> input(n);
  std::uint32_t state = 17u + static_cast<std::uint32_t>(world.rank()) * 7919u;
  for (float& x : input) {
    state = state * 1664525u + 1013904223u;
    x = static_cast<float>(state >> 8) * 1e-7f -
        0.8f; // values whose sums round differently by order
  }
  std::vector<float> a(n), b(n), shard(n / static_cast<std::size_t>(world.size()));
  world.all_reduce(input, a, ReduceOp::sum).wait();
  small_chunks.all_reduce(input, b, ReduceOp::sum).wait();
  small_chunks.reduce_scatter(input, shard, ReduceOp::sum).wait();
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(a[i]), std::bit_cast<std::uint32_t>(b[i])) << i;
  const std::size_t base = shard.size() * static_cast<std::size_t>(world.rank());
  for (std::size_t i = 0; i < shard.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(shard[i]), std::bit_cast<std::uint32_t>(a[base + i]))
        << i;
}

} // namespace
