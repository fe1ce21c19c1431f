// Every collective of every host communicator, checked element by element against values computed
// locally from every rank's input, for all element types, all reductions, odd sizes (0, 1, primes,
// not divisible by the world size) and in-place and out-of-place calls. Registered at 1, 2 and 3
// ranks, with the shared-memory transport, with tiny chunks (many pipeline steps) and with the
// chunked-MPI transport. The sanitizer presets narrow the sweeps of types and reductions
// (sweep.hpp).

#include "comm_test.hpp"
#include "reference.hpp"
#include "sweep.hpp"

#include <zero/comm/communicator.hpp>
#include <zero/comm/staged_communicator.hpp>
#include <zero/core/buffer.hpp>
#include <zero/core/dtype.hpp>
#include <zero/core/host_stream_space.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using zero::DType;
using zero::ReduceOp;

constexpr DType all_dtypes[] = {DType::float32, DType::float64, DType::int32,   DType::int64,
                                DType::uint8,   DType::float16, DType::bfloat16};
constexpr ReduceOp all_ops[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};
// ReduceToEveryRoot (it runs once per root): float32, int64 and both 16-bit floats.
constexpr DType reduce_dtypes[] = {DType::float32, DType::int64, DType::float16, DType::bfloat16};
constexpr std::size_t sizes[] = {0, 1, 2, 7, 64, 1031, 40009};

// Rank r's element i and the expected results: the collective benchmark's reference, so that the
// tests and the benchmark's #wrong column check the same thing.
template <class T>
T input_value(int rank, std::size_t i) {
  return bench::pattern_value<T>(rank, i);
}

template <class T>
T expected_reduction(int ranks, std::size_t i, ReduceOp op) {
  zero::CollectiveArgs args;
  args.kind = zero::Collective::all_reduce;
  args.op = op;
  return bench::expected_value<T>(args, i, 0, ranks);
}

template <class T>
bool same(T a, T b) {
  if constexpr (zero::LowPrecision<T>)
    return a.bits == b.bits;
  else
    return a == b;
}

template <class T>
std::string show(T v) {
  return std::to_string(zero::convert<double>(v));
}

template <class T>
std::vector<T> rank_input(int rank, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = input_value<T>(rank, i);
  return v;
}

// Counts mismatches and reports the first few.
template <class T, class Expected>
void expect_elements(const std::vector<T>& got, std::size_t n, Expected expected,
                     const std::string& what) {
  ASSERT_EQ(got.size(), n) << what;
  int reported = 0;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const T want = expected(i);
    if (same(got[i], want)) continue;
    ++wrong;
    if (reported++ < 3)
      ADD_FAILURE() << what << ": element " << i << " is " << show(got[i]) << ", expected "
                    << show(want);
  }
  EXPECT_EQ(wrong, 0u) << what;
}

} // namespace

// The staged communicator over the host stream space (device buffers carried through pinned host
// memory on a GPU): a caller and a transfer stream of its own, a duplicate of the MPI world behind.
namespace zero::testing {
using Staged = StagedCommunicator<HostStreamSpace, MpiCommunicator>;
struct StagedWorld {
  HostStream caller{"caller"};
  HostStream transfer{"transfer"};
  Staged comm{MpiCommunicator(boost::mpi::communicator()), HostStreamSpace(caller),
              HostStreamSpace(transfer)};
};
template <>
Staged& communicator<Staged>() {
  static std::unique_ptr<StagedWorld> world;
  if (!world) {
    world = std::make_unique<StagedWorld>();
    release_hooks().emplace_back([] { world.reset(); });
  }
  return world->comm;
}
} // namespace zero::testing

namespace {

using CollectiveCommunicators =
    ::testing::Types<zero::SelfCommunicator, zero::MpiCommunicator,
                     zero::testing::SimulatedNodesCommunicator, zero::testing::Staged>;
struct CollectiveCommunicatorName {
  template <class C>
  static std::string GetName(int i) {
    if constexpr (std::is_same_v<C, zero::testing::Staged>)
      return "Staged";
    else
      return zero::testing::CommunicatorName::GetName<C>(i);
  }
};

template <class C>
class Collectives : public ::testing::Test {
 protected:
  C& comm = zero::testing::communicator<C>();
  int rank = comm.rank();
  int ranks = comm.size();
};
TYPED_TEST_SUITE(Collectives, CollectiveCommunicators, CollectiveCommunicatorName);

TYPED_TEST(Collectives, AllReduce) {
  for (DType dtype : zero::testing::swept(all_dtypes))
    zero::visit_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      for (ReduceOp op : zero::testing::swept(all_ops))
        for (std::size_t n : sizes) {
          const std::string what = std::string("all_reduce ") + zero::to_string(dtype) + " " +
                                   zero::to_string(op) + " n=" + std::to_string(n);
          const auto input = rank_input<T>(this->rank, n);
          std::vector<T> out(n);
          this->comm.all_reduce(input, out, op).wait();
          auto expected = [&](std::size_t i) { return expected_reduction<T>(this->ranks, i, op); };
          expect_elements(out, n, expected, what + " out of place");
          auto inout = rank_input<T>(this->rank, n);
          this->comm.all_reduce(inout, op).wait();
          expect_elements(inout, n, expected, what + " in place");
        }
    });
}

TYPED_TEST(Collectives, ReduceScatter) {
  const auto world = static_cast<std::size_t>(this->ranks);
  const auto me = static_cast<std::size_t>(this->rank);
  for (DType dtype : zero::testing::swept(all_dtypes))
    zero::visit_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      for (ReduceOp op : zero::testing::swept(all_ops))
        for (std::size_t block : sizes) {
          const std::string what = std::string("reduce_scatter ") + zero::to_string(dtype) + " " +
                                   zero::to_string(op) + " block=" + std::to_string(block);
          const auto input = rank_input<T>(this->rank, block * world);
          std::vector<T> out(block);
          this->comm.reduce_scatter(input, out, op).wait();
          auto expected = [&](std::size_t i) {
            return expected_reduction<T>(this->ranks, me * block + i, op);
          };
          expect_elements(out, block, expected, what + " out of place");
          auto inout = rank_input<T>(this->rank, block * world);
          this->comm.reduce_scatter(inout, op).wait();
          std::vector<T> mine(inout.begin() + static_cast<std::ptrdiff_t>(me * block),
                              inout.begin() + static_cast<std::ptrdiff_t>((me + 1) * block));
          expect_elements(mine, block, expected, what + " in place");
        }
    });
}

TYPED_TEST(Collectives, AllGather) {
  const auto world = static_cast<std::size_t>(this->ranks);
  const auto me = static_cast<std::size_t>(this->rank);
  for (DType dtype : zero::testing::swept(all_dtypes))
    zero::visit_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      for (std::size_t block : sizes) {
        const std::string what =
            std::string("all_gather ") + zero::to_string(dtype) + " block=" + std::to_string(block);
        // Rank r contributes elements [r * block, (r + 1) * block) of me r's input pattern.
        auto expected = [&](std::size_t i) {
          return input_value<T>(static_cast<int>(i / block), i);
        };
        std::vector<T> mine(block);
        for (std::size_t i = 0; i < block; ++i)
          mine[i] = input_value<T>(this->rank, me * block + i);
        std::vector<T> out(block * world);
        this->comm.all_gather(mine, out).wait();
        expect_elements(out, block * world, expected, what + " out of place");
        std::vector<T> inout(block * world, zero::convert<T>(99.0f));
        std::copy(mine.begin(), mine.end(),
                  inout.begin() + static_cast<std::ptrdiff_t>(me * block));
        this->comm.all_gather(inout).wait();
        expect_elements(inout, block * world, expected, what + " in place");
      }
    });
}

TYPED_TEST(Collectives, BroadcastFromEveryRoot) {
  for (DType dtype : zero::testing::swept(all_dtypes))
    zero::visit_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      for (int root = 0; root < this->ranks; ++root)
        for (std::size_t n : sizes) {
          const std::string what = std::string("broadcast ") + zero::to_string(dtype) + " root " +
                                   std::to_string(root) + " n=" + std::to_string(n);
          auto expected = [&](std::size_t i) { return input_value<T>(root, i); };
          auto inout = rank_input<T>(this->rank, n);
          this->comm.broadcast(inout, root).wait();
          expect_elements(inout, n, expected, what + " in place");
          const auto input = this->rank == root ? rank_input<T>(root, n) : std::vector<T>{};
          std::vector<T> out(n);
          this->comm.broadcast(input, out, root).wait();
          expect_elements(out, n, expected, what + " out of place");
        }
    });
}

TYPED_TEST(Collectives, ReduceToEveryRoot) {
  for (DType dtype : zero::testing::swept(reduce_dtypes))
    zero::visit_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      for (ReduceOp op : zero::testing::swept(all_ops))
        for (int root = 0; root < this->ranks; ++root)
          for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1031}}) {
            const std::string what = std::string("reduce ") + zero::to_string(dtype) + " " +
                                     zero::to_string(op) + " root " + std::to_string(root);
            const auto input = rank_input<T>(this->rank, n);
            std::vector<T> out(this->rank == root ? n : 0);
            this->comm.reduce(input, out, op, root).wait();
            if (this->rank == root) {
              auto expected = [&](std::size_t i) {
                return expected_reduction<T>(this->ranks, i, op);
              };
              expect_elements(out, n, expected, what);
            }
          }
    });
}

TYPED_TEST(Collectives, ManyOutstandingOperationsCompleteInOrder) {
  constexpr int count = 24;
  std::vector<std::vector<float>> data;
  std::vector<zero::Work> works;
  for (int k = 0; k < count; ++k) {
    data.push_back(rank_input<float>(this->rank + k, 1000 + static_cast<std::size_t>(k)));
    works.push_back(this->comm.all_reduce(data.back(), ReduceOp::sum));
  }
  zero::wait_all(works);
  for (int k = 0; k < count; ++k)
    for (std::size_t i = 0; i < data[std::size_t(k)].size(); ++i) {
      float want = 0;
      for (int r = 0; r < this->ranks; ++r)
        want += input_value<float>(r + k, i);
      ASSERT_EQ(data[std::size_t(k)][i], want) << "operation " << k << " element " << i;
    }
}

TYPED_TEST(Collectives, TestReportsCompletion) {
  std::vector<double> v(5000, 1.0);
  zero::Work w = this->comm.all_reduce(v, ReduceOp::sum);
  while (!w.test()) {
  }
  EXPECT_FALSE(w.pending());
  EXPECT_EQ(v[4999], this->ranks);
  this->comm.barrier();
}

TYPED_TEST(Collectives, AcceptsBuffersAndViews) {
  zero::Buffer<float> buffer(6, 2.0f);
  this->comm.all_reduce(buffer, ReduceOp::sum).wait();
  EXPECT_EQ(buffer[5], 2.0f * static_cast<float>(this->ranks));
  zero::View<float> tail = buffer.view().subview(3, 3);
  this->comm.broadcast(tail, 0).wait();
  EXPECT_EQ(tail[0], 2.0f * static_cast<float>(this->ranks));
}

TYPED_TEST(Collectives, BadArgumentsThrowBeforeAnythingIsSent) {
  std::vector<float> a(10), b(11);
  try {
    this->comm.all_reduce(a, b, ReduceOp::sum).wait();
    FAIL() << "expected an error";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("all_reduce: output has 11 elements but input has 10"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(this->comm.broadcast(a, this->ranks).wait(), zero::Error);
  EXPECT_THROW(this->comm.broadcast(a, -1).wait(), zero::Error);
  std::vector<float> full(static_cast<std::size_t>(this->ranks) * 4 + 1);
  std::vector<float> block(4);
  EXPECT_THROW(this->comm.reduce_scatter(full, block, ReduceOp::sum).wait(), zero::Error);
  EXPECT_THROW(this->comm.all_gather(block, full).wait(), zero::Error);
  if (this->ranks > 1) {
    EXPECT_THROW(this->comm.reduce_scatter(full, ReduceOp::sum).wait(), zero::Error);
    EXPECT_THROW(this->comm.all_gather(full).wait(), zero::Error);
  }
  // The communicator is still usable afterwards.
  std::vector<float> ok(3, 1.0f);
  this->comm.all_reduce(ok, ReduceOp::sum).wait();
  EXPECT_EQ(ok[0], static_cast<float>(this->ranks));
}

TYPED_TEST(Collectives, SplitFormsSubGroups) {
  // Two groups, even and odd ranks, ordered in reverse by key.
  auto group = this->comm.split(this->rank % 2, -this->rank);
  const int members = (this->ranks + 1 - this->rank % 2) / 2;
  EXPECT_EQ(group.size(), members);
  std::vector<int> in{this->rank}, out(static_cast<std::size_t>(group.size()));
  group.all_gather(in, out).wait();
  for (int i = 0; i < group.size(); ++i) {
    EXPECT_EQ(out[std::size_t(i)] % 2, this->rank % 2);
    if (i > 0) {
      EXPECT_GT(out[std::size_t(i - 1)], out[std::size_t(i)]) << "key orders the group";
    }
  }
  EXPECT_EQ(out[std::size_t(group.rank())], this->rank);
  // The parent still works while the child exists.
  std::vector<int> one{1};
  this->comm.all_reduce(one, ReduceOp::sum).wait();
  EXPECT_EQ(one[0], this->ranks);
}

} // namespace
