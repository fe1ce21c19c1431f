// CountingCommunicator records calls and volumes per op, forwards to the wrapped communicator, and
// accounts an all-reduce as twice its size (the ZeRO paper's 2Ψ). Blocks of different sizes count
// their whole buffer, and are offered only when the wrapped communicator has them.

#include "comm_test.hpp"

#include <zero/comm/counting_communicator.hpp>

#include <gtest/gtest.h>

#include <numeric>
#include <utility>
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

// A user's communicator on zero's front end whose submit() predates blocks of different sizes: it
// does not declare supports_variable_counts, so neither it nor its counting wrapper offers them.
class EqualBlocksOnly : public zero::detail::CollectiveApi<EqualBlocksOnly, zero::host> {
 public:
  int rank() const { return 0; }
  int size() const { return 1; }
  EqualBlocksOnly split(int, int) const { return {}; }
  zero::Work submit(const zero::CollectiveArgs& args) { return self_.submit(args); }

 private:
  zero::SelfCommunicator self_;
};
static_assert(zero::Communicator<EqualBlocksOnly>);
static_assert(!zero::VariableCountCommunicator<EqualBlocksOnly>);
static_assert(!zero::VariableCountCommunicator<zero::CountingCommunicator<EqualBlocksOnly>>);
static_assert(zero::VariableCountCommunicator<zero::CountingCommunicator<zero::SelfCommunicator>>);
static_assert(zero::VariableCountCommunicator<zero::CountingCommunicator<zero::MpiCommunicator>>);

// A user's communicator with only typed calls, blocks of different sizes included, forwarding to
// one of zero's: counting reaches it through its typed API.
template <class C>
class TypedForwarding {
 public:
  using memory_space = typename C::memory_space;
  explicit TypedForwarding(C inner) : inner_(std::move(inner)) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  TypedForwarding split(int color, int key) { return TypedForwarding(inner_.split(color, key)); }
  void barrier() { inner_.barrier(); }
  template <class... Args>
  zero::Work all_reduce(Args&&... args) {
    return inner_.all_reduce(std::forward<Args>(args)...);
  }
  template <class... Args>
  zero::Work reduce_scatter(Args&&... args) {
    return inner_.reduce_scatter(std::forward<Args>(args)...);
  }
  template <class... Args>
  zero::Work all_gather(Args&&... args) {
    return inner_.all_gather(std::forward<Args>(args)...);
  }
  template <class... Args>
  zero::Work broadcast(Args&&... args) {
    return inner_.broadcast(std::forward<Args>(args)...);
  }
  template <class... Args>
  zero::Work reduce(Args&&... args) {
    return inner_.reduce(std::forward<Args>(args)...);
  }

 private:
  C inner_;
};
static_assert(zero::VariableCountCommunicator<TypedForwarding<zero::SelfCommunicator>>);

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

// Rank r owns a block of r + 1 elements: the blocks differ wherever there are two ranks.
template <class C>
void exercise_variable_counts(zero::CountingCommunicator<C>& counting) {
  const int ranks = counting.size();
  std::vector<std::size_t> counts;
  for (int r = 0; r < ranks; ++r)
    counts.push_back(std::size_t(r) + 1);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const std::size_t mine = counts[std::size_t(counting.rank())];
  std::vector<double> whole(total, 1.0), block(mine);
  const zero::CommStats before = counting.stats();
  counting.reduce_scatter(whole, block, counts, ReduceOp::sum).wait();
  counting.all_gather(block, whole, counts).wait();
  const zero::CommStats s = counting.stats() - before;
  EXPECT_EQ(s[Collective::reduce_scatter].calls, 1u);
  EXPECT_EQ(s[Collective::reduce_scatter].elements, total) << "the whole input";
  EXPECT_EQ(s[Collective::reduce_scatter].bytes, total * sizeof(double));
  EXPECT_EQ(s[Collective::all_gather].elements, total) << "the whole output";
  EXPECT_EQ(s.volume_elements(), 2 * total);
  EXPECT_EQ(block[0], double(ranks)) << "the data really moved";
  EXPECT_EQ(whole[total - 1], double(ranks));
  EXPECT_EQ((before + s).total_bytes(), counting.stats().total_bytes());
}

TEST(Counting, BlocksOfDifferentSizesCountTheirWholeBuffer) {
  zero::CountingCommunicator self{zero::SelfCommunicator{}};
  exercise_variable_counts(self);
  zero::CountingCommunicator mpi{
      zero::MpiCommunicator(zero::testing::world().boost_communicator())};
  exercise_variable_counts(mpi);
  zero::CountingCommunicator typed{
      TypedForwarding(zero::MpiCommunicator(zero::testing::world().boost_communicator()))};
  exercise_variable_counts(typed);
}

TEST(Counting, StatsAddUp) {
  zero::CommStats a, b;
  a[Collective::all_gather] = {2, 100, 400};
  a[Collective::barrier] = {1, 0, 0};
  b[Collective::all_gather] = {1, 10, 40};
  b[Collective::all_reduce] = {3, 30, 120};
  const zero::CommStats sum = a + b;
  EXPECT_EQ(sum[Collective::all_gather].calls, 3u);
  EXPECT_EQ(sum[Collective::all_gather].elements, 110u);
  EXPECT_EQ(sum[Collective::all_reduce].bytes, 120u);
  EXPECT_EQ(sum.total_calls(), 7u);
  EXPECT_EQ(sum.volume_elements(), a.volume_elements() + b.volume_elements());
  zero::CommStats running = a;
  running += b;
  const zero::CommStats back = running - b;
  for (Collective c : zero::all_collectives) {
    EXPECT_EQ(back[c].calls, a[c].calls);
    EXPECT_EQ(back[c].elements, a[c].elements);
    EXPECT_EQ(back[c].bytes, a[c].bytes);
  }
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
