// reduce_scatter and all_gather over blocks of different sizes, under every host communicator:
// results bit for bit against values computed locally from every rank's input (half and bfloat16
// summed in float), against the equal-block reduce_scatter and against all_reduce; in place and
// out of place; empty blocks (this rank's too, and everyone's), blocks longer than a pipeline
// chunk; size errors; counts that differ between ranks, with and without validation; and counts
// that do not outlive the call. Part of zero_test_collectives: 1, 2 and 3 ranks, tiny chunks, and
// chunked MPI. The sanitizer presets narrow the sweeps of types and reductions (sweep.hpp).

#include "comm_test.hpp"
#include "sweep.hpp"

#include <zero/comm/communicator.hpp>
#include <zero/core/dtype.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace variable_count_test {

using zero::DType;
using zero::ReduceOp;
using Counts = std::vector<std::size_t>;

constexpr DType reduced_dtypes[] = {DType::float32, DType::float64, DType::int32, DType::float16,
                                    DType::bfloat16};
constexpr DType all_dtypes[] = {DType::float32, DType::float64, DType::int32,   DType::int64,
                                DType::uint8,   DType::float16, DType::bfloat16};
constexpr ReduceOp all_ops[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

// Rank r's element i: pseudo-random, so that sums taken in another order round differently and
// equal bits mean the same order of summation.
template <class T>
T input_value(int rank, std::size_t i) {
  std::uint64_t x = (std::uint64_t(rank) + 1) * 0x9E3779B97F4A7C15ull ^ (i * 0xBF58476D1CE4E5B9ull);
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(x % 101);
  else
    return zero::convert<T>(static_cast<double>(x >> 11) * 0x1p-53 * 3.0 - 1.5);
}

// The order in which the communicator sums the ranks' contributions (see summation_order()).
struct SummationOrder {
  std::vector<std::vector<int>> groups;
  bool rounds_per_group = false; // two levels: each group's sum is rounded to the element type
};

template <class C>
SummationOrder summation_order_of(C& comm) {
  if constexpr (requires { comm.summation_order(); })
    return {comm.summation_order(), std::string(comm.transport()) == "hierarchical"};
  else
    return {{{0}}, false};
}

template <class A>
A combine_in(ReduceOp op, A acc, A v) {
  if (op == ReduceOp::max) return v > acc ? v : acc;
  if (op == ReduceOp::min) return v < acc ? v : acc;
  return static_cast<A>(acc + v);
}

// The reduction of element i over all ranks, in the communicator's order, in the accumulation type.
template <class T>
T expected_reduction(const SummationOrder& order, int ranks, std::size_t i, ReduceOp op) {
  using A = zero::accumulate_t<T>;
  auto group_sum = [&](const std::vector<int>& group) {
    A acc = zero::convert<A>(input_value<T>(group[0], i));
    for (std::size_t k = 1; k < group.size(); ++k)
      acc = combine_in(op, acc, zero::convert<A>(input_value<T>(group[k], i)));
    return order.rounds_per_group ? zero::convert<A>(zero::convert<T>(acc)) : acc;
  };
  A acc = group_sum(order.groups[0]);
  for (std::size_t g = 1; g < order.groups.size(); ++g)
    acc = combine_in(op, acc, group_sum(order.groups[g]));
  if (op == ReduceOp::avg) acc = static_cast<A>(acc / static_cast<A>(ranks));
  return zero::convert<T>(acc);
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Expects got[i] to have the bits of want(i) for every i; reports the first few differences. No
// early return: the other ranks may still be waiting in a collective of this test.
template <class T, class Want>
void expect_bits(std::span<const T> got, Want want, const std::string& what) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const T w = want(i);
    if (same_bits(got[i], w)) continue;
    if (wrong++ < 3)
      ADD_FAILURE() << what << ": element " << i << " is " << zero::convert<double>(got[i])
                    << ", expected " << zero::convert<double>(w);
  }
  EXPECT_EQ(wrong, 0u) << what;
}

struct Layout {
  std::string name;
  Counts counts;
};

// Block sizes per rank for `ranks` ranks; `chunk` is a pipeline chunk in elements, so that "long"
// blocks take several steps of every transport.
std::vector<Layout> layouts(int ranks, std::size_t chunk) {
  auto make = [&](auto count_of) {
    Counts counts(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r)
      counts[std::size_t(r)] = count_of(std::size_t(r));
    return counts;
  };
  return {
      {"uneven", make([](std::size_t r) { return 3 + 2 * r; })},
      {"every other empty", make([](std::size_t r) { return r % 2 == 0 ? 0 : 7 + r; })},
      {"only the last", make([&](std::size_t r) { return r + 1 == std::size_t(ranks) ? 37 : 0; })},
      {"all empty", make([](std::size_t) { return std::size_t{0}; })},
      {"equal", make([](std::size_t) { return std::size_t{64}; })},
      {"long", make([&](std::size_t r) { return r == 1 ? 0 : chunk + 1013 * (r + 1); })},
  };
}

template <class C>
std::size_t chunk_elements(C& comm, std::size_t element_bytes) {
  if constexpr (requires { comm.options(); })
    return comm.options().chunk_bytes / element_bytes;
  else
    return 4096;
}

template <class C>
class VariableCounts : public ::testing::Test {
 protected:
  C& comm = zero::testing::communicator<C>();
  int rank = comm.rank();
  int ranks = comm.size();
  std::size_t me = static_cast<std::size_t>(rank);
};
TYPED_TEST_SUITE(VariableCounts, zero::testing::HostCommunicators, zero::testing::CommunicatorName);

TYPED_TEST(VariableCounts, ReduceScatterHasTheBitsOfEqualBlocksAndAllReduce) {
  for (DType dtype : zero::testing::swept(reduced_dtypes))
    zero::visit_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      for (const Layout& layout : layouts(this->ranks, chunk_elements(this->comm, sizeof(T))))
        for (ReduceOp op : zero::testing::swept(all_ops)) {
          const Counts& counts = layout.counts;
          const Counts starts = [&] {
            Counts s(counts.size());
            std::exclusive_scan(counts.begin(), counts.end(), s.begin(), std::size_t{0});
            return s;
          }();
          const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
          const std::size_t mine = counts[this->me], first = starts[this->me];
          const std::string what =
              std::string(zero::to_string(dtype)) + " " + zero::to_string(op) + " " + layout.name;
          std::vector<T> input(total);
          for (std::size_t i = 0; i < total; ++i)
            input[i] = input_value<T>(this->rank, i);
          const SummationOrder order = summation_order_of(this->comm);
          auto expected = [&](std::size_t i) {
            return expected_reduction<T>(order, this->ranks, first + i, op);
          };

          std::vector<T> out(mine);
          this->comm.reduce_scatter(input, out, counts, op).wait();
          expect_bits<T>(out, expected, what + " out of place");

          std::vector<T> inout = input;
          const std::span<T> own = std::span<T>(inout).subspan(first, mine);
          this->comm.reduce_scatter(inout, own, counts, op).wait();
          expect_bits<T>(own, expected, what + " in place");

          std::vector<T> everything(total);
          this->comm.all_reduce(input, everything, op).wait();
          expect_bits<T>(
              out, [&](std::size_t i) { return everything[first + i]; },
              what + " against all_reduce");

          // The same data padded to equal blocks of the largest count.
          const std::size_t largest = *std::max_element(counts.begin(), counts.end());
          std::vector<T> padded(largest * counts.size(), zero::convert<T>(0.0f));
          for (std::size_t r = 0; r < counts.size(); ++r)
            std::copy_n(input.begin() + std::ptrdiff_t(starts[r]), counts[r],
                        padded.begin() + std::ptrdiff_t(r * largest));
          std::vector<T> equal_blocks(largest);
          this->comm.reduce_scatter(padded, equal_blocks, op).wait();
          expect_bits<T>(
              out, [&](std::size_t i) { return equal_blocks[i]; }, what + " against equal blocks");
        }
    });
}

TYPED_TEST(VariableCounts, AllGatherPlacesEveryBlock) {
  for (DType dtype : zero::testing::swept(all_dtypes))
    zero::visit_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      for (const Layout& layout : layouts(this->ranks, chunk_elements(this->comm, sizeof(T)))) {
        const Counts& counts = layout.counts;
        const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
        const std::size_t first = std::accumulate(
            counts.begin(), counts.begin() + std::ptrdiff_t(this->me), std::size_t{0});
        const std::string what = std::string(zero::to_string(dtype)) + " " + layout.name;
        // Element i of the output comes from the rank whose block holds i.
        std::vector<int> owner;
        for (std::size_t r = 0; r < counts.size(); ++r)
          owner.insert(owner.end(), counts[r], static_cast<int>(r));
        auto expected = [&](std::size_t i) { return input_value<T>(owner[i], i); };
        std::vector<T> mine(counts[this->me]);
        for (std::size_t i = 0; i < mine.size(); ++i)
          mine[i] = input_value<T>(this->rank, first + i);

        std::vector<T> out(total, zero::convert<T>(99.0f));
        this->comm.all_gather(mine, out, counts).wait();
        expect_bits<T>(out, expected, what + " out of place");

        std::vector<T> inout(total, zero::convert<T>(99.0f));
        std::copy(mine.begin(), mine.end(), inout.begin() + std::ptrdiff_t(first));
        this->comm.all_gather(std::span<T>(inout).subspan(first, counts[this->me]), inout, counts)
            .wait();
        expect_bits<T>(inout, expected, what + " in place");
      }
    });
}

TYPED_TEST(VariableCounts, CountsNeedNotOutliveTheCall) {
  auto counts = std::make_unique<Counts>();
  for (int r = 0; r < this->ranks; ++r)
    counts->push_back(std::size_t(r) * 3 + 1);
  const Counts kept = *counts;
  const std::size_t total = std::accumulate(kept.begin(), kept.end(), std::size_t{0});
  std::vector<float> input(total, 1.0f), out(kept[this->me]);
  std::vector<float> gathered(total), mine(kept[this->me], float(this->rank));
  zero::Work reduced = this->comm.reduce_scatter(input, out, *counts, ReduceOp::sum);
  zero::Work gathering = this->comm.all_gather(mine, gathered, *counts);
  std::fill(counts->begin(), counts->end(), 1000000);
  counts.reset();
  reduced.wait();
  gathering.wait();
  expect_bits<float>(
      out, [&](std::size_t) { return float(this->ranks); }, "reduce_scatter");
  std::size_t i = 0;
  for (std::size_t r = 0; r < kept.size(); ++r)
    for (std::size_t k = 0; k < kept[r]; ++k, ++i)
      EXPECT_EQ(gathered[i], float(r)) << "all_gather element " << i;
}

// Runs `call` and expects an invalid_argument error whose message is exactly `message`.
template <class Call>
void expect_size_error(Call&& call, const std::string& message) {
  try {
    call().wait();
    ADD_FAILURE() << "expected: " << message;
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::invalid_argument);
    EXPECT_EQ(std::string(e.what()), "zero: " + message);
  }
}

TYPED_TEST(VariableCounts, BadSizesThrowNamingTheCall) {
  const std::string n = std::to_string(this->ranks), rank_text = std::to_string(this->rank);
  Counts counts;
  for (int r = 0; r < this->ranks; ++r)
    counts.push_back(std::size_t(r) + 4);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const std::size_t mine = counts[this->me];
  const std::string t = std::to_string(total), c = std::to_string(mine);
  std::vector<float> whole(total), short_whole(total - 2), block(mine), long_block(mine + 1);
  Counts too_many = counts;
  too_many.push_back(1);

  expect_size_error(
      [&] { return this->comm.reduce_scatter(whole, block, too_many, ReduceOp::sum); },
      "reduce_scatter: " + std::to_string(this->ranks + 1) + " counts for a communicator of " + n +
          " ranks");
  expect_size_error(
      [&] { return this->comm.reduce_scatter(short_whole, block, counts, ReduceOp::sum); },
      "reduce_scatter: input has " + std::to_string(total - 2) +
          " elements, but the counts add up to " + t);
  expect_size_error(
      [&] { return this->comm.reduce_scatter(whole, long_block, counts, ReduceOp::sum); },
      "reduce_scatter: output has " + std::to_string(mine + 1) + " elements, but rank " +
          rank_text + "'s count is " + c);
  expect_size_error([&] { return this->comm.all_gather(block, whole, too_many); },
                    "all_gather: " + std::to_string(this->ranks + 1) +
                        " counts for a communicator of " + n + " ranks");
  expect_size_error([&] { return this->comm.all_gather(block, short_whole, counts); },
                    "all_gather: output has " + std::to_string(total - 2) +
                        " elements, but the counts add up to " + t);
  expect_size_error([&] { return this->comm.all_gather(long_block, whole, counts); },
                    "all_gather: input has " + std::to_string(mine + 1) + " elements, but rank " +
                        rank_text + "'s count is " + c);
  // Nothing was sent: the communicator is still in step.
  std::vector<float> one{1.0f};
  this->comm.all_reduce(one, ReduceOp::sum).wait();
  EXPECT_EQ(one[0], float(this->ranks));
}

// The example of docs/communicators.md ("Blocks of different sizes").
TEST(VariableCountGuide, ShardsOfDifferentSizes) {
  zero::MpiCommunicator& comm = zero::testing::world();
  // example-begin variable-blocks
  // Rank r owns r + 2 parameters: shards of different sizes, none padded to the largest.
  std::vector<std::size_t> counts;
  for (int r = 0; r < comm.size(); ++r)
    counts.push_back(std::size_t(r) + 2);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const std::size_t mine = counts[std::size_t(comm.rank())];

  std::vector<float> grads(total, 1.0f), params(total), shard(mine, 1.0f);
  std::vector<float> shard_grads(mine);
  comm.reduce_scatter(grads, shard_grads, counts, zero::ReduceOp::avg).wait(); // my block only
  for (std::size_t i = 0; i < mine; ++i)
    shard[i] -= 0.5f * shard_grads[i];
  comm.all_gather(shard, params, counts).wait(); // every rank's block, end to end
  // example-end variable-blocks
  for (float p : params)
    EXPECT_EQ(p, 0.5f);
}

TEST(VariableCountDescription, ShowsTheCounts) {
  zero::CollectiveArgs a;
  a.kind = zero::Collective::reduce_scatter;
  a.counts = {3, 5, 4};
  a.count = 5;
  EXPECT_EQ(a.describe(), "reduce_scatter([3, 5, 4] x float, sum)");
  a.kind = zero::Collective::all_gather;
  a.counts = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  EXPECT_EQ(a.describe(), "all_gather([1, 2, 3, 4, 5, 6, ..., 11, 12] x float)");
  a.counts = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(a.describe(), "all_gather([1, 2, 3, 4, 5, 6, 7, 8] x float)");
  EXPECT_EQ(a.send_count(8), 5u);
  EXPECT_EQ(a.recv_count(8), 36u);
  EXPECT_EQ(a.block_offset(3), 6u);
}

// Every rank calls `call` and must throw a mismatch error with exactly `message` (validation's
// heading carries the call's number, which depends on the tests before: compared from " on").
template <class Call>
void expect_mismatch(zero::MpiCommunicator& comm, Call&& call, const std::string& heading,
                     const std::string& message) {
  try {
    call().wait();
    ADD_FAILURE() << "expected a mismatch error";
  } catch (const zero::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), zero::ErrorKind::mismatch) << what;
    EXPECT_EQ(what.substr(0, heading.size() + 6), "zero: " + heading) << what;
    const std::size_t tail = what.find(" on a communicator");
    EXPECT_EQ(tail == std::string::npos ? what : what.substr(tail), message);
  }
  // Every rank threw at the same point, and the communicator is in step afterwards.
  Counts counts(static_cast<std::size_t>(comm.size()), 1);
  counts[0] = 3;
  std::vector<int> in(3 + counts.size() - 1, 1), out(counts[std::size_t(comm.rank())]);
  comm.reduce_scatter(in, out, counts, ReduceOp::sum).wait();
  EXPECT_EQ(out[0], comm.size());
}

// " on a communicator of N ranks: rank 0 called <first>; rank 1 called <rest>; ..."
std::string mismatch_tail(int ranks, const std::string& first, const std::string& rest) {
  std::string text = " on a communicator of " + std::to_string(ranks) + " ranks:";
  for (int r = 0; r < ranks; ++r)
    text += " rank " + std::to_string(r) + " called " + (r == 0 ? first : rest) +
            (r + 1 < ranks ? ";" : "");
  return text;
}

TEST(VariableCountMismatch, ThrowsOnEveryRankWithAndWithoutValidation) {
  auto& world = zero::testing::world();
  const int ranks = world.size();
  if (ranks < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  zero::CommOptions validated = world.options(), unvalidated = world.options();
  validated.validate = true;
  unvalidated.validate = false;
  unvalidated.node_size = 0; // the real nodes, whatever ZERO_NODE_SIZE simulates
  // On one machine, unvalidated means the shared-memory transport's own checks; across machines
  // (tools/zero-cluster) the MPI transports', which number the calls as validation does.
  const bool one_machine =
      zero::MpiCommunicator(world.boost_communicator(), unvalidated).nodes() == 1;
  if (one_machine) unvalidated.transport = zero::Transport::shared_memory;
  struct Case {
    const char* heading;
    zero::MpiCommunicator comm;
  };
  Case cases[] = {
      {"collective mismatch at call #",
       zero::MpiCommunicator(world.boost_communicator(), validated)},
      {one_machine ? "collective mismatch on a communicator" : "collective mismatch at call #",
       zero::MpiCommunicator(world.boost_communicator(), unvalidated)}};

  // Rank 0 lists [1, 2, 2, ...], the others [2, 1, 2, ...]: the same total, so only the counts
  // tell the calls apart.
  Counts counts(static_cast<std::size_t>(ranks), 2);
  counts[world.rank() == 0 ? 0 : 1] = 1;
  std::string listed_first = "[1, 2", listed_rest = "[2, 1";
  for (int r = 2; r < ranks; ++r) {
    listed_first += ", 2";
    listed_rest += ", 2";
  }
  listed_first += "]";
  listed_rest += "]";
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  std::vector<float> whole(total), block(counts[std::size_t(world.rank())]);
  // Rank 0 calls with equal blocks (2 each), the others with [1, 3, 2, ...].
  Counts equal_or_not(static_cast<std::size_t>(ranks), 2);
  if (world.rank() != 0) {
    equal_or_not[0] = 1;
    equal_or_not[1] = 3;
  }
  std::vector<float> equal_whole(2 * std::size_t(ranks));
  std::vector<float> equal_block(equal_or_not[std::size_t(world.rank())]);
  std::string uneven = "[1, 3";
  for (int r = 2; r < ranks; ++r)
    uneven += ", 2";
  uneven += "]";

  for (Case& c : cases) {
    SCOPED_TRACE(c.heading);
    expect_mismatch(
        c.comm, [&] { return c.comm.reduce_scatter(whole, block, counts, ReduceOp::sum); },
        c.heading,
        mismatch_tail(ranks, "reduce_scatter(" + listed_first + " x float, sum)",
                      "reduce_scatter(" + listed_rest + " x float, sum)"));
    expect_mismatch(
        c.comm, [&] { return c.comm.all_gather(block, whole, counts); }, c.heading,
        mismatch_tail(ranks, "all_gather(" + listed_first + " x float)",
                      "all_gather(" + listed_rest + " x float)"));
    expect_mismatch(
        c.comm,
        [&] {
          return c.comm.reduce_scatter(equal_whole, equal_block, equal_or_not, ReduceOp::max);
        },
        c.heading,
        mismatch_tail(ranks, "reduce_scatter(2 x float, max)",
                      "reduce_scatter(" + uneven + " x float, max)"));
  }
}

} // namespace variable_count_test
