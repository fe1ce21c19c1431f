// ShardedTensor with every storage policy (Replicated, the three built-in partitioners and the
// user-written KeepSmallWhole from examples/custom_partitioner), on SelfCommunicator and on MPI at
// 1, 2 and 3 ranks: scatter then gather is the identity, gather(reduce_scatter(x)) equals
// all_reduce(x), conversions between element types, the Gathered guard, and layouts that differ
// between ranks reported on every rank.

#include "comm_test.hpp"
#include "keep_small_whole.hpp"

#include <zero/core/bfloat16.hpp>
#include <zero/core/half.hpp>
#include <zero/shard.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

namespace {

using zero::DType;
using zero::ParameterSpec;
using zero::ReduceOp;
using zero::Segment;

template <class C, class P>
struct Case {
  using Communicator = C;
  using Policy = P;
};
template <class C>
struct ReplicatedCase : Case<C, zero::Replicated> {
  static constexpr const char* name = "Replicated";
  static zero::Replicated make() { return {}; }
};
template <class C>
struct FlatCase : Case<C, zero::Sharded<zero::FlatContiguous>> {
  static constexpr const char* name = "FlatContiguous16";
  static zero::Sharded<zero::FlatContiguous> make() { return {}; }
};
template <class C>
struct FlatUnalignedCase : Case<C, zero::Sharded<zero::FlatContiguous>> {
  static constexpr const char* name = "FlatContiguous1";
  static zero::Sharded<zero::FlatContiguous> make() { return {{.alignment = 1}}; }
};
template <class C>
struct PerParameterCase : Case<C, zero::Sharded<zero::PerParameter>> {
  static constexpr const char* name = "PerParameter4";
  static zero::Sharded<zero::PerParameter> make() { return {{.alignment = 4}}; }
};
template <class C>
struct GreedyCase : Case<C, zero::Sharded<zero::WholeParameterGreedy>> {
  static constexpr const char* name = "Greedy";
  static zero::Sharded<zero::WholeParameterGreedy> make() { return {}; }
};
template <class C>
struct UserCase : Case<C, zero::Sharded<KeepSmallWhole>> {
  static constexpr const char* name = "KeepSmallWhole";
  static zero::Sharded<KeepSmallWhole> make() { return {{.threshold = 64}}; }
};

using Self = zero::SelfCommunicator;
using Mpi = zero::MpiCommunicator;
using Cases = ::testing::Types<ReplicatedCase<Self>, FlatCase<Self>, FlatUnalignedCase<Self>,
                               PerParameterCase<Self>, GreedyCase<Self>, UserCase<Self>,
                               ReplicatedCase<Mpi>, FlatCase<Mpi>, FlatUnalignedCase<Mpi>,
                               PerParameterCase<Mpi>, GreedyCase<Mpi>, UserCase<Mpi>>;

struct CaseName {
  template <class T>
  static std::string GetName(int) {
    return std::string(std::is_same_v<typename T::Communicator, Self> ? "Self_" : "Mpi_") + T::name;
  }
};

std::vector<ParameterSpec> numbered(const std::vector<std::size_t>& sizes) {
  std::vector<ParameterSpec> params;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    params.push_back({"p" + std::to_string(i), sizes[i]});
  return params;
}

struct ParameterSet {
  std::string name;
  std::vector<ParameterSpec> params;
};

// One layer (sizes 0, 1, below the world size, primes, one that straddles every rank); layers
// registered out of order; nothing at all.
std::vector<ParameterSet> parameter_sets() {
  return {{"one_layer", numbered({0, 1, 2, 3, 5, 7, 13, 31, 101, 1031, 1, 0})},
          {"layers",
           {{"a", 5, DType::float32, 2},
            {"b", 0, DType::float32, 0},
            {"c", 170, DType::float32, 2},
            {"d", 3, DType::float32, -1},
            {"e", 64, DType::float32, 0},
            {"f", 1, DType::float32, 7},
            {"g", 29, DType::float32, -1}}},
          {"empty", {}}};
}

// Values whose sums over three ranks and averages are exact in float.
float value(std::size_t e) {
  return static_cast<float>((e * 7 + 3) % 1000) - 100.0f;
}
float rank_value(int rank, std::size_t e) {
  return static_cast<float>((e * 3 + static_cast<std::size_t>(rank) * 5) % 17) - 8.0f;
}
std::vector<float> values(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t e = 0; e < n; ++e)
    v[e] = value(e);
  return v;
}

template <class Case>
class ShardedTensors : public ::testing::Test {
 protected:
  using Comm = typename Case::Communicator;
  using Tensor = zero::ShardedTensor<float, typename Case::Policy>;
  Comm& comm = zero::testing::communicator<Comm>();
  int rank = comm.rank();
  int ranks = comm.size();

  Tensor make(const std::vector<ParameterSpec>& params) {
    return Tensor(comm, params, Case::make());
  }

  // The slice holds full[element] at every owned position and zero at every padding position.
  template <class T>
  void expect_slice(const zero::ShardedTensor<T, typename Case::Policy>& t,
                    const std::vector<T>& full, const std::string& what) {
    const auto& layout = t.layout();
    const auto local = t.local();
    std::vector<char> owned(local.size(), 0);
    for (const Segment& s : layout.rank_segments(t.slice()))
      for (std::size_t k = 0; k < s.length; ++k) {
        owned[s.shard_offset + k] = 1;
        ASSERT_EQ(local[s.shard_offset + k],
                  full[layout.element_range(s.parameter).begin + s.parameter_offset + k])
            << what << ": " << layout.parameter(s.parameter).name << "[" << s.parameter_offset + k
            << "]";
      }
    for (std::size_t i = 0; i < local.size(); ++i)
      if (!owned[i]) {
        ASSERT_EQ(local[i], T{}) << what << ": padding at " << i;
      }
  }
};
TYPED_TEST_SUITE(ShardedTensors, Cases, CaseName);

TYPED_TEST(ShardedTensors, ScatterThenGatherIsTheIdentity) {
  for (const auto& set : parameter_sets())
    for (int root : {0, this->ranks - 1}) {
      SCOPED_TRACE(set.name + ", root " + std::to_string(root));
      auto t = this->make(set.params);
      const auto expected = values(t.numel());
      const std::vector<float> source = this->rank == root ? expected : std::vector<float>{};
      t.scatter_from(this->comm, source, root).wait();
      this->expect_slice(t, expected, "after scatter_from");

      auto gathered = t.gather(this->comm);
      const auto view = gathered.view();
      EXPECT_EQ(std::vector<float>(view.begin(), view.end()), expected);

      std::vector<float> at_root(this->rank == root ? t.numel() : 0);
      t.gather_to(this->comm, at_root, root).wait();
      if (this->rank == root) {
        EXPECT_EQ(at_root, expected);
      }

      std::vector<float> every(t.numel());
      t.gather_into(this->comm, every).wait();
      EXPECT_EQ(every, expected);
      if (t.padded_in_order()) {
        std::vector<float> padded(t.padded_numel(), -1.0f);
        t.gather_into(this->comm, padded).wait();
        EXPECT_EQ(std::vector<float>(padded.begin(), padded.begin() + static_cast<long>(t.numel())),
                  expected);
        for (std::size_t i = t.numel(); i < padded.size(); ++i)
          ASSERT_EQ(padded[i], 0.0f);
      }
    }
}

TYPED_TEST(ShardedTensors, GatherOfReduceScatterEqualsAllReduce) {
  for (const auto& set : parameter_sets())
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
      SCOPED_TRACE(set.name + ", " + zero::to_string(op));
      auto scattered = this->make(set.params);
      auto reduced = this->make(set.params);
      const std::size_t n = scattered.numel();
      std::vector<float> x(n), expected(n);
      for (std::size_t e = 0; e < n; ++e) {
        x[e] = rank_value(this->rank, e);
        for (int r = 0; r < this->ranks; ++r)
          expected[e] += rank_value(r, e);
        if (op == ReduceOp::avg) expected[e] /= static_cast<float>(this->ranks);
      }

      scattered.reduce_scatter_from(this->comm, x, op).wait();
      this->expect_slice(scattered, expected, "after reduce_scatter_from");
      auto gathered = scattered.gather(this->comm);
      const std::vector<float> via_scatter(gathered.view().begin(), gathered.view().end());

      std::vector<float> y = x;
      reduced.all_reduce(this->comm, y, op).wait();
      EXPECT_EQ(via_scatter, y);
      EXPECT_EQ(y, expected);
      this->expect_slice(reduced, expected, "after all_reduce");

      if (scattered.padded_in_order()) { // the copy-free path with a padded buffer
        std::vector<float> padded(scattered.padded_numel(), 0.0f);
        std::copy(x.begin(), x.end(), padded.begin());
        auto again = this->make(set.params);
        again.reduce_scatter_from(this->comm, padded, op).wait();
        this->expect_slice(again, expected, "after reduce_scatter_from of a padded buffer");
      }
    }
}

TYPED_TEST(ShardedTensors, ConvertsSlicesBetweenElementTypes) {
  const auto params = parameter_sets()[0].params;
  auto master = this->make(params);
  std::vector<float> full(master.numel());
  for (std::size_t e = 0; e < full.size(); ++e)
    full[e] = 0.1f * static_cast<float>(e) + 0.013f;
  master.scatter_from(this->comm, full).wait();

  const auto halves = master.template converted<zero::half>();
  const auto bf16 = master.template converted<zero::bfloat16>();
  EXPECT_EQ(halves.bytes_resident() * 2, master.bytes_resident());
  auto gathered_half = halves.gather(this->comm);
  auto gathered_bf16 = bf16.gather(this->comm);
  std::vector<float> rounded(full.size());
  for (std::size_t e = 0; e < full.size(); ++e) {
    ASSERT_EQ(gathered_half.view()[e].bits, zero::half(full[e]).bits) << e;
    ASSERT_EQ(gathered_bf16.view()[e].bits, zero::bfloat16(full[e]).bits) << e;
    rounded[e] = static_cast<float>(zero::half(full[e]));
  }

  // Back into an fp32 tensor on the same layout (made collectively from the shared layout).
  typename TestFixture::Tensor widened(this->comm, master.shared_layout(), TypeParam::make());
  widened.convert_from(halves);
  this->expect_slice(widened, rounded, "after convert_from");
}

TYPED_TEST(ShardedTensors, ReportsResidentBytes) {
  const auto params = parameter_sets()[0].params;
  auto t = this->make(params);
  const auto& layout = t.layout();
  EXPECT_EQ(t.bytes_resident(), layout.max_shard_numel() * sizeof(float));
  if constexpr (TypeParam::Policy::sharded) {
    EXPECT_EQ(layout.world_size(), this->ranks);
    if (layout.equal_slices()) {
      EXPECT_EQ(t.bytes_resident(), layout.bytes(this->rank));
    }
    EXPECT_EQ(t.local().size(), layout.shard_numel(this->rank));
  } else {
    EXPECT_EQ(t.bytes_resident(), t.numel() * sizeof(float));
    EXPECT_EQ(t.local().size(), t.numel());
  }
}

TYPED_TEST(ShardedTensors, GatheredBuffersAreHeldUntilReleased) {
  const auto params = parameter_sets()[0].params;
  auto t = this->make(params);
  const auto expected = values(t.numel());
  t.scatter_from(this->comm, expected).wait();

  auto first = t.gather(this->comm);
  auto second = t.gather(this->comm); // two gathers in flight, completed out of order
  second.wait();
  while (!first.test()) {
  }
  ASSERT_TRUE(first.holds());
  auto moved = std::move(first);
  EXPECT_FALSE(first.holds());
  const auto p9 = moved.parameter(9);
  const auto range = t.layout().element_range(9);
  EXPECT_EQ(std::vector<float>(p9.begin(), p9.end()),
            std::vector<float>(expected.begin() + static_cast<long>(range.begin),
                               expected.begin() + static_cast<long>(range.end)));
  EXPECT_EQ(second.view()[t.numel() - 2], expected[t.numel() - 2]);
  moved.release();
  EXPECT_FALSE(moved.holds());
  EXPECT_THROW((void)moved.view(), zero::Error);
  {
    auto scoped = t.gather(this->comm); // released, and waited for, at scope exit
  }
}

TYPED_TEST(ShardedTensors, RejectsBuffersOfTheWrongSize) {
  const auto params = parameter_sets()[0].params;
  auto t = this->make(params);
  std::vector<float> wrong(t.padded_numel() + 1); // neither numel() nor padded_numel()
  try {
    t.reduce_scatter_from(this->comm, wrong).wait();
    FAIL() << "expected an error";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_scatter_from: the whole-tensor buffer has " +
                                         std::to_string(t.padded_numel() + 1) +
                                         " elements, expected " + std::to_string(t.numel())),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(t.all_reduce(this->comm, wrong).wait(), zero::Error);
  EXPECT_THROW(t.gather_into(this->comm, wrong).wait(), zero::Error);
  std::vector<float> full(t.numel());
  EXPECT_THROW(t.scatter_from(this->comm, full, this->ranks).wait(), zero::Error);
  EXPECT_THROW(t.gather_to(this->comm, full, -1).wait(), zero::Error);
}

// --- layouts that differ between ranks -----------------------------------------------------------

zero::MpiCommunicator& world() {
  return zero::testing::world();
}

template <class F>
void expect_error_on_every_rank(F&& f, zero::ErrorKind kind,
                                const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "missing '" << needle << "' in: " << e.what();
  }
  std::vector<int> one{1}; // and the communicator still works
  world().all_reduce(one, ReduceOp::sum).wait();
  EXPECT_EQ(one[0], world().size());
}

TEST(LayoutMismatch, DifferentParametersAreNamedOnEveryRank) {
  if (world().size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  auto params = numbered({4, 4, 4});
  if (world().rank() == 1) params[1] = {"p1_on_rank_1", 6};
  expect_error_on_every_rank(
      [&] { zero::ShardedTensor<float> t(world(), params); }, zero::ErrorKind::mismatch,
      {"ranks registered different parameters: parameter #1 is rank 0: 'p1' (4 x float, layer 0); "
       "rank 1: 'p1_on_rank_1' (6 x float, layer 0)"});
}

TEST(LayoutMismatch, AnExtraParameterIsNamed) {
  if (world().size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  const int last = world().size() - 1;
  auto params = numbered({4, 4, 4});
  if (world().rank() == last) params.push_back({"extra", 9, DType::float32, 3});
  const std::string counts =
      world().size() == 2 ? "rank 0: 3; rank 1: 4" : "rank 0: 3; rank 1: 3; rank 2: 4";
  expect_error_on_every_rank(
      [&] { (void)zero::make_layout(world(), zero::PerParameter{}, params); },
      zero::ErrorKind::mismatch,
      {"parameter #3 is rank 0: no parameter",
       "rank " + std::to_string(last) + ": 'extra' (9 x float, layer 3)",
       "(parameter counts: " + counts + ")"});
}

TEST(LayoutMismatch, DifferentPartitionsOfTheSameParameters) {
  if (world().size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  const auto params = numbered({40, 4});
  zero::Sharded<zero::FlatContiguous> policy{{.alignment = world().rank() == 1 ? 8u : 16u}};
  expect_error_on_every_rank(
      [&] {
        zero::ShardedTensor<float, zero::Sharded<zero::FlatContiguous>> t(world(), params, policy);
      },
      zero::ErrorKind::mismatch,
      {"ranks registered the same parameters but built different shard layouts: rank 0: "
       "flat_contiguous(alignment=16) over " +
       std::to_string(world().size()) +
       " ranks; rank 1: "
       "flat_contiguous(alignment=8)"});
}

TEST(LayoutMismatch, ALocallyBuiltLayoutIsCheckedWhenATensorUsesIt) {
  if (world().size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  auto params = numbered({4, 4});
  if (world().rank() == 0) params[0].numel = 5;
  auto layout = std::make_shared<const zero::ShardLayout>(
      zero::make_layout(zero::FlatContiguous{}, params, world().size()));
  expect_error_on_every_rank(
      [&] { zero::ShardedTensor<float> t(world(), layout); }, zero::ErrorKind::mismatch,
      {"parameter #0 is rank 0: 'p0' (5 x float, layer 0); rank 1: 'p0' (4 x float, layer 0)"});
}

TEST(LayoutMismatch, ABuildErrorOnOneRankReachesEveryRank) {
  if (world().size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  auto params = numbered({4, 4});
  if (world().rank() == 1) params[1].name = "p0";
  expect_error_on_every_rank([&] { zero::ShardedTensor<float> t(world(), params); },
                             zero::ErrorKind::invalid_argument,
                             {"building the shard layout failed on rank 1: shard layout: parameter "
                              "name 'p0' is registered "
                              "twice (#0 and #1)"});
}

TEST(LayoutMismatch, TensorsOnOtherCommunicatorsAreRejected) {
  if (world().size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  zero::ShardedTensor<float> t(world(), numbered({10}));
  zero::SelfCommunicator self;
  std::vector<float> full(10);
  try {
    t.gather_into(self, full).wait();
    FAIL() << "expected an error";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the tensor belongs to rank"), std::string::npos)
        << e.what();
  }
}

} // namespace
