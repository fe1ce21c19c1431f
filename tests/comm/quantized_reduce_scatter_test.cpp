// Quantized reduce-scatter (ZeRO++'s qgZ): on the hierarchical transport every rank's result lies
// within the documented bound of the exact sum (4 and 8 bits; float and bfloat16; equal and
// per-rank counts; sum and avg; in and out of place) and is not the exact sum; a non-finite
// contribution arrives as NaN; on one node the result is bitwise the exact reduction; the counting
// decorator counts packed bytes only where they are packed; ranks that ask for different
// quantizations, or an op that cannot be taken over quantized values, fail by name. Part of
// zero_test_collectives (1-3 ranks, and 2 x 2 simulated nodes).

#include "comm_test.hpp"

#include <zero/comm/counting_communicator.hpp>
#include <zero/comm/mpi_communicator.hpp>
#include <zero/core/bfloat16.hpp>
#include <zero/core/block_quantization.hpp>
#include <zero/core/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using zero::BlockQuantization;
using zero::ReduceOp;
using zero::testing::SimulatedNodesCommunicator;

// Rank r's contribution: normal values scaled by 1 + r, so that ranks' ranges differ.
std::vector<float> contribution(int r, std::size_t n) {
  std::mt19937 random(100 + static_cast<unsigned>(r));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n);
  for (float& v : values)
    v = normal(random) * float(1 + r);
  return values;
}

std::vector<std::size_t> counts_for(int ranks, bool equal) {
  std::vector<std::size_t> counts(std::size_t(ranks), 1500);
  if (!equal)
    for (int r = 0; r < ranks; ++r)
      counts[std::size_t(r)] = 700 + 531 * std::size_t(r); // a tail piece in most blocks
  return counts;
}

struct Expected {
  std::vector<double> exact; // this rank's block
  double bound = 0;          // the most any element may be off
};

// The exact result and the bound of docs/multinode.md, with every block's maximum taken as the
// largest magnitude of the rank's (or the node's partial) whole input, which bounds it.
Expected expected(const zero::MpiCommunicator& comm, std::span<const std::size_t> counts,
                  const BlockQuantization& q, ReduceOp op) {
  const int ranks = comm.size();
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const std::size_t begin =
      std::accumulate(counts.begin(), counts.begin() + comm.rank(), std::size_t{0});
  const double half_step = 1.0 / (2.0 * q.levels());
  Expected e;
  e.exact.assign(counts[std::size_t(comm.rank())], 0.0);
  double rounding = 0;
  for (const std::vector<int>& node : comm.summation_order()) {
    std::vector<double> partial(total, 0.0);
    double contributions = 0; // the sum of the node's ranks' largest magnitudes
    for (int r : node) {
      const std::vector<float> x = contribution(r, total);
      double largest = 0;
      for (std::size_t i = 0; i < total; ++i) {
        partial[i] += x[i];
        largest = std::max(largest, double(std::fabs(x[i])));
      }
      contributions += largest;
      rounding += largest;
    }
    double partial_largest = 0;
    for (std::size_t i = 0; i < total; ++i)
      partial_largest = std::max(partial_largest, std::fabs(partial[i]));
    // The node's partial as it is sent: the exact one plus level one's rounding.
    e.bound += half_step * (contributions + partial_largest + half_step * contributions);
    for (std::size_t i = 0; i < e.exact.size(); ++i)
      e.exact[i] += partial[begin + i];
  }
  e.bound += 1e-6 * rounding; // float sums of the dequantized values
  if (op == ReduceOp::avg) {
    for (double& v : e.exact)
      v /= ranks;
    e.bound /= ranks;
  }
  return e;
}

template <class T>
void check_within_bound(zero::MpiCommunicator& comm, const BlockQuantization& q, bool equal,
                        ReduceOp op, bool in_place, const std::string& what) {
  const std::vector<std::size_t> counts = counts_for(comm.size(), equal);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const std::vector<float> mine = contribution(comm.rank(), total);
  std::vector<T> in(mine.begin(), mine.end());
  const std::size_t begin =
      std::accumulate(counts.begin(), counts.begin() + comm.rank(), std::size_t{0});
  std::vector<T> separate(counts[std::size_t(comm.rank())]);
  std::span<T> out =
      in_place ? std::span<T>(in).subspan(begin, separate.size()) : std::span<T>(separate);
  comm.reduce_scatter(in, out, counts, op, q).wait();
  const Expected e = expected(comm, counts, q, op);
  double largest_error = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    // bfloat16 results round once more, to 8 bits of mantissa.
    const double slack =
        std::is_same_v<T, float> ? 0.0 : std::fabs(e.exact[i]) / 128 + e.bound / 128;
    const double error = std::fabs(double(float(out[i])) - e.exact[i]);
    ASSERT_LE(error, e.bound + slack) << what << ", element " << i << " of rank " << comm.rank();
    largest_error = std::max(largest_error, error);
  }
  // Quantized, not exact: the error is a visible share of what the bits allow.
  if (comm.size() > 1) {
    EXPECT_GT(largest_error, e.bound / 50) << what;
  }
}

TEST(QuantizedReduceScatter, EveryResultIsWithinTheBoundOfTheExactSum) {
  auto& nodes = zero::testing::communicator<SimulatedNodesCommunicator>();
  ASSERT_TRUE(nodes.quantizes_on_wire());
  for (const int bits : {4, 8})
    for (const bool equal : {true, false})
      for (const ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
        for (const bool in_place : {false, true}) {
          const BlockQuantization q{.block = 64, .bits = bits};
          const std::string what = std::to_string(bits) + " bits, " +
                                   (equal ? "equal" : "per-rank") + " counts, " +
                                   zero::to_string(op) + (in_place ? ", in place" : "");
          check_within_bound<float>(nodes, q, equal, op, in_place, what);
          check_within_bound<zero::bfloat16>(nodes, q, equal, op, in_place, what + ", bfloat16");
        }
}

TEST(QuantizedReduceScatter, ANonFiniteContributionArrivesAsNaN) {
  auto& nodes = zero::testing::communicator<SimulatedNodesCommunicator>();
  if (nodes.size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  const BlockQuantization q{.block = 16, .bits = 4};
  const std::size_t block = 256;
  std::vector<float> in(block * std::size_t(nodes.size()), 1.0f);
  // The last rank overflows in element 5 of every rank's block.
  if (nodes.rank() == nodes.size() - 1)
    for (int r = 0; r < nodes.size(); ++r)
      in[std::size_t(r) * block + 5] = std::numeric_limits<float>::infinity();
  std::vector<float> out(block);
  const std::vector<std::size_t> counts(std::size_t(nodes.size()), block);
  nodes.reduce_scatter(in, out, counts, ReduceOp::sum, q).wait();
  EXPECT_TRUE(std::isnan(out[5]));
  EXPECT_EQ(out[100], float(nodes.size())) << "blocks without it stay finite and exact";
}

TEST(QuantizedReduceScatter, OnOneNodeTheReductionIsExact) {
  auto& world = zero::testing::world();
  if (world.nodes() != 1)
    GTEST_SKIP() << zero::testing::not_applicable << "the ranks span several nodes";
  EXPECT_FALSE(world.quantizes_on_wire());
  const std::vector<std::size_t> counts = counts_for(world.size(), false);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const std::vector<float> in = contribution(world.rank(), total);
  std::vector<float> quantized(counts[std::size_t(world.rank())]), exact(quantized.size());
  world.reduce_scatter(in, quantized, counts, ReduceOp::avg, BlockQuantization{.bits = 4}).wait();
  world.reduce_scatter(in, exact, counts, ReduceOp::avg).wait();
  EXPECT_EQ(quantized, exact);
}

TEST(QuantizedReduceScatter, CountsPackedBytesWhereTheyArePacked) {
  const BlockQuantization q{.block = 256, .bits = 4};
  const std::size_t block = 4096;
  auto run = [&](zero::MpiCommunicator comm) {
    zero::CountingCommunicator<zero::MpiCommunicator> counting(std::move(comm));
    const std::vector<float> in(block * std::size_t(counting.size()), 1.0f);
    std::vector<float> out(block);
    const std::vector<std::size_t> counts(std::size_t(counting.size()), block);
    counting.reduce_scatter(in, out, counts, ReduceOp::sum, q).wait();
    EXPECT_EQ(out.front(), float(counting.size()));
    return counting.stats()[zero::Collective::reduce_scatter];
  };
  auto& nodes = zero::testing::communicator<SimulatedNodesCommunicator>();
  const std::size_t elements = block * std::size_t(nodes.size());
  const zero::CollectiveCount packed = run(nodes.split(0, nodes.rank()));
  EXPECT_EQ(packed.elements, elements);
  EXPECT_EQ(packed.bytes, q.packed_bytes(elements)); // 0.14 of the float bytes
  auto& world = zero::testing::world();
  if (world.nodes() == 1) {
    const zero::CollectiveCount exact = run(world.split(0, world.rank()));
    EXPECT_EQ(exact.bytes, elements * sizeof(float));
  }
}

TEST(QuantizedReduceScatter, RefusesWhatItCannotDo) {
  auto& nodes = zero::testing::communicator<SimulatedNodesCommunicator>();
  const std::vector<std::size_t> counts(std::size_t(nodes.size()), 8);
  std::vector<float> in(8 * std::size_t(nodes.size())), out(8);
  try {
    nodes.reduce_scatter(in, out, counts, ReduceOp::max, BlockQuantization{}).wait();
    FAIL() << "max over quantized values was accepted";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a quantized reduction adds its contributions; max"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      (void)nodes.reduce_scatter(in, out, counts, ReduceOp::sum, BlockQuantization{.bits = 2}),
      zero::Error);
}

TEST(QuantizedReduceScatter, RanksAskingForDifferentBitsFailOnEveryRank) {
  auto& nodes = zero::testing::communicator<SimulatedNodesCommunicator>();
  if (nodes.size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  const std::vector<std::size_t> counts(std::size_t(nodes.size()), 8);
  std::vector<float> in(8 * std::size_t(nodes.size())), out(8);
  const BlockQuantization q{.block = 256, .bits = nodes.rank() == 0 ? 4 : 8};
  try {
    nodes.reduce_scatter(in, out, counts, ReduceOp::sum, q).wait();
    FAIL() << "ranks with different quantizations went ahead";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::mismatch);
    const std::string message = e.what();
    EXPECT_NE(message.find("rank 0 called reduce_scatter(8 x float, sum, int4 blocks of 256 across "
                           "nodes); rank 1 called reduce_scatter(8 x float, sum, int8 blocks of "
                           "256 across nodes)"),
              std::string::npos)
        << message;
  }
}

} // namespace
