// The tensor-parallel layers (include/zero/tensor_parallel/) against the same computation done
// whole on one rank with plain loops: each rank's part of a result must be the matching part of
// the whole one. Every layer runs over the world as one tensor group, then over the tensor group
// of each TensorParallelGroups the world divides into (at 4 ranks, groups of 1, 2 and 4). The data
// are pseudo-random and the same on every rank; the sizes a layer splits divide by 1 to 4, while
// the vocabulary (10) does not, so that at 3 and 4 ranks the last slices hold padding.

#include "comm_test.hpp"

#include <zero/comm/staged_communicator.hpp>
#include <zero/core/host_stream_space.hpp>
#include <zero/tensor_parallel/conjugates.hpp>
#include <zero/tensor_parallel/groups.hpp>
#include <zero/tensor_parallel/linear.hpp>
#include <zero/tensor_parallel/slices.hpp>
#include <zero/tensor_parallel/vocab_parallel.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

using zero::TensorSlice;
using HostView = zero::View<float, zero::host>;
using Groups = zero::TensorParallelGroups<zero::MpiCommunicator>;

zero::MpiCommunicator& world() {
  return zero::testing::world();
}

// A MatrixProduct without BLAS: c = alpha op(a) op(b) + beta c, row-major, each element summed
// over k in order onto beta c (so that adding a bias before the product or after it gives different
// bits); c is not read where beta is 0, as sgemm does.
struct NaiveProduct {
  void operator()(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k,
                  float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                  float beta, float* c, std::size_t ldc) const {
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        float& out = c[i * ldc + j];
        float sum = beta == 0.0f ? 0.0f : beta * out;
        for (std::size_t p = 0; p < k; ++p)
          sum += alpha * (transpose_a ? a[p * lda + i] : a[i * lda + p]) *
                 (transpose_b ? b[j * ldb + p] : b[p * ldb + j]);
        out = sum;
      }
  }
};
static_assert(zero::MatrixProduct<NaiveProduct>);

// Values in [-scale, scale), the same on every rank for the same seed (splitmix64).
std::vector<float> random_values(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::vector<float> out(n);
  std::uint64_t state = seed * 0x2545f4914f6cdd1dull;
  for (float& v : out) {
    state += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    v = scale * (float(z >> 40) / float(1 << 24) * 2.0f - 1.0f);
  }
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Whether every rank of `group` holds the same bits in `values`.
template <class Comm, class T>
bool same_on_every_rank(Comm& group, const std::vector<T>& values) {
  std::vector<T> all(values.size() * std::size_t(group.size()));
  group.all_gather(values, all).wait();
  for (std::size_t r = 0; r < std::size_t(group.size()); ++r)
    if (std::memcmp(all.data() + r * values.size(), values.data(), values.size() * sizeof(T)))
      return false;
  return true;
}

// Each of `got` within `relative` of `want` times the largest magnitude in `want` (elements that
// are sums of terms of both signs are only as precise as the terms).
template <class T>
void expect_close(const std::vector<T>& got, const std::vector<double>& want, double relative,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double largest = 0.0;
  for (double w : want)
    largest = std::max(largest, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(std::abs(double(got[i]) - want[i]), relative * largest)
        << what << "[" << i << "]: " << got[i] << " against " << want[i];
}

// `body`, which throws zero::Error(invalid_argument), with a message that holds `expected`.
template <class Body>
void expect_refused(Body&& body, const std::string& expected) {
  try {
    body();
    ADD_FAILURE() << "not refused; expected an error saying: " << expected;
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

std::vector<std::unique_ptr<Groups>>& groupings_slot() {
  static std::vector<std::unique_ptr<Groups>> groupings;
  return groupings;
}

// The world's TensorParallelGroups for every group size that divides it, made once (each is two
// collective splits) and released before MPI is finalised.
const std::vector<std::unique_ptr<Groups>>& every_grouping() {
  auto& slot = groupings_slot();
  if (slot.empty()) {
    for (int t = 1; t <= world().size(); ++t)
      if (world().size() % t == 0) slot.push_back(std::make_unique<Groups>(world(), t));
    zero::testing::release_hooks().push_back([] { groupings_slot().clear(); });
  }
  return slot;
}

// `check(tensor, first_world_rank)` over the world as one tensor group, then over the tensor group
// of every grouping; the groups are consecutive world ranks from first_world_rank on.
template <class Check>
void over_every_tensor_group(Check&& check) {
  {
    SCOPED_TRACE("the world as one tensor group");
    check(world(), 0);
  }
  for (const auto& groups : every_grouping()) {
    SCOPED_TRACE("tensor groups of " + std::to_string(groups->tensor_size()) + " of " +
                 std::to_string(groups->world_size()) + " ranks");
    check(groups->tensor(), groups->world_rank() - groups->tensor_rank());
  }
}

// ---------------------------------------------------------------------------------------------
// The groups: consecutive ranks hold a tensor's slices, the ranks of the same tensor rank are the
// data-parallel replicas.

TEST(TensorParallelGroups, HoldTheRightRanksInSliceAndReplicaOrder) {
  const int w = world().rank(), size = world().size();
  for (const auto& groups : every_grouping()) {
    const int t = groups->tensor_size();
    SCOPED_TRACE("tensor groups of " + std::to_string(t));
    EXPECT_EQ(groups->tensor().size(), t);
    EXPECT_EQ(groups->tensor_rank(), w % t);
    EXPECT_EQ(groups->data_size(), size / t);
    EXPECT_EQ(groups->data_rank(), w / t);
    EXPECT_EQ(groups->world_rank(), w);
    EXPECT_EQ(groups->world_size(), size);

    const std::vector<std::int64_t> mine{w};
    std::vector<std::int64_t> tensor_members(static_cast<std::size_t>(t)), tensor_expected;
    groups->tensor().all_gather(mine, tensor_members).wait();
    for (int i = 0; i < t; ++i)
      tensor_expected.push_back(w / t * t + i);
    EXPECT_EQ(tensor_members, tensor_expected);

    std::vector<std::int64_t> data_members(std::size_t(size / t)), data_expected;
    groups->data().all_gather(mine, data_members).wait();
    for (int d = 0; d < size / t; ++d)
      data_expected.push_back(d * t + w % t);
    EXPECT_EQ(data_members, data_expected);
  }
}

TEST(TensorParallelGroups, RefuseASizeThatDoesNotDivideTheWorldOrDiffersBetweenRanks) {
  const int size = world().size();
  expect_refused([&] { Groups groups(world(), size + 1); },
                 std::to_string(size) + " ranks do not split into groups of " +
                     std::to_string(size + 1));
  expect_refused([&] { Groups groups(world(), 0); }, "must be at least 1, not 0");
  if (size > 1) {
    const int asked = world().rank() == 0 ? 1 : size;
    expect_refused([&] { Groups groups(world(), asked); },
                   "rank 0 asked for groups of 1 ranks, rank 1 for groups of " +
                       std::to_string(size));
  }
}

// ---------------------------------------------------------------------------------------------
// Column-parallel then row-parallel: an MLP block x -> tanh(x W1^T + b1) -> y = a W2^T + b2, whose
// hidden width splits over the group.

constexpr std::size_t batch = 5, inputs = 12, hidden = 24, outputs = 10;

struct Mlp {
  std::vector<float> x = random_values(batch * inputs, 1);
  std::vector<float> w1 = random_values(hidden * inputs, 2, 0.5f);
  std::vector<float> b1 = random_values(hidden, 3);
  std::vector<float> w2 = random_values(outputs * hidden, 4, 0.5f);
  std::vector<float> b2 = random_values(outputs, 5);
  std::vector<float> dy = random_values(batch * outputs, 6); // the loss's gradient for y
};

// The whole block on one rank, in double.
struct WholeMlp {
  std::vector<double> pre, y, dw1, db1, dw2, db2, da, dx;
};

WholeMlp whole_mlp(const Mlp& m) {
  WholeMlp o;
  o.pre.assign(batch * hidden, 0.0);
  std::vector<double> a(batch * hidden);
  for (std::size_t r = 0; r < batch; ++r)
    for (std::size_t h = 0; h < hidden; ++h) {
      double sum = m.b1[h];
      for (std::size_t i = 0; i < inputs; ++i)
        sum += double(m.x[r * inputs + i]) * m.w1[h * inputs + i];
      o.pre[r * hidden + h] = sum;
      a[r * hidden + h] = std::tanh(sum);
    }
  o.y.assign(batch * outputs, 0.0);
  for (std::size_t r = 0; r < batch; ++r)
    for (std::size_t k = 0; k < outputs; ++k) {
      double sum = m.b2[k];
      for (std::size_t h = 0; h < hidden; ++h)
        sum += a[r * hidden + h] * m.w2[k * hidden + h];
      o.y[r * outputs + k] = sum;
    }
  o.dw2.assign(outputs * hidden, 0.0);
  o.db2.assign(outputs, 0.0);
  o.da.assign(batch * hidden, 0.0);
  for (std::size_t r = 0; r < batch; ++r)
    for (std::size_t k = 0; k < outputs; ++k) {
      const double dy = m.dy[r * outputs + k];
      o.db2[k] += dy;
      for (std::size_t h = 0; h < hidden; ++h) {
        o.dw2[k * hidden + h] += dy * a[r * hidden + h];
        o.da[r * hidden + h] += dy * m.w2[k * hidden + h];
      }
    }
  o.dw1.assign(hidden * inputs, 0.0);
  o.db1.assign(hidden, 0.0);
  o.dx.assign(batch * inputs, 0.0);
  for (std::size_t r = 0; r < batch; ++r)
    for (std::size_t h = 0; h < hidden; ++h) {
      const double dpre = o.da[r * hidden + h] * (1.0 - a[r * hidden + h] * a[r * hidden + h]);
      o.db1[h] += dpre;
      for (std::size_t i = 0; i < inputs; ++i) {
        o.dw1[h * inputs + i] += dpre * m.x[r * inputs + i];
        o.dx[r * inputs + i] += dpre * m.w1[h * inputs + i];
      }
    }
  return o;
}

// Rows [first, first + count) of a whole [rows, cols] matrix, and columns likewise.
std::vector<double> rows_of(const std::vector<double>& whole, std::size_t cols, std::size_t first,
                            std::size_t count) {
  return {whole.begin() + std::ptrdiff_t(first * cols),
          whole.begin() + std::ptrdiff_t((first + count) * cols)};
}
std::vector<double> columns_of(const std::vector<double>& whole, std::size_t cols,
                               std::size_t first, std::size_t count) {
  std::vector<double> out;
  for (std::size_t r = 0; r < whole.size() / cols; ++r)
    for (std::size_t c = first; c < first + count; ++c)
      out.push_back(whole[r * cols + c]);
  return out;
}

template <class Comm>
void check_mlp(Comm& tensor) {
  const Mlp m;
  const WholeMlp whole = whole_mlp(m);
  const std::vector<float>&x = m.x, &dy = m.dy, &whole_w1 = m.w1, &whole_b1 = m.b1,
        &whole_w2 = m.w2, &b2 = m.b2;

  // example-begin tensor-parallel-mlp
  // The block x -> a = tanh(x W1^T + b1) -> y = a W2^T + b2 over the group `tensor`: this rank
  // computes hidden / T of the hidden units (its rows of W1 and b1), and the second layer reads
  // only those (its columns of W2); b2 is whole on every rank.
  const TensorSlice slice{tensor.rank(), tensor.size()};
  zero::ColumnParallelLinear up(tensor, inputs, hidden, NaiveProduct{});
  zero::RowParallelLinear down(tensor, hidden, outputs, NaiveProduct{});
  const std::vector<float> w1 = zero::slice_rows(whole_w1, hidden, inputs, slice, "W1");
  const std::vector<float> b1 = zero::slice_rows(whole_b1, hidden, 1, slice, "b1");
  const std::vector<float> w2 = zero::slice_columns(whole_w2, outputs, hidden, slice, "W2");
  const std::size_t local = up.local_out(); // hidden / T

  std::vector<float> pre(batch * local), a(batch * local), y(batch * outputs);
  up.forward(x.data(), w1.data(), b1.data(), pre.data(), batch);
  std::transform(pre.begin(), pre.end(), a.begin(), [](float v) { return std::tanh(v); });
  down.forward(a.data(), w2.data(), b2.data(), y.data(), batch); // y whole on every rank

  // Backward from dy, the loss's gradient for y (whole on every rank): dW and db are this rank's
  // slices (db2 whole, the same on every rank), dx is whole.
  std::vector<float> dw2(w2.size()), db2(outputs), da(a.size());
  std::vector<float> dw1(w1.size()), db1(local), dx(x.size());
  down.backward(a.data(), w2.data(), dy.data(), dw2.data(), db2.data(), da.data(), batch);
  for (std::size_t i = 0; i < da.size(); ++i)
    da[i] *= 1.0f - a[i] * a[i]; // through tanh
  up.backward(x.data(), w1.data(), da.data(), dw1.data(), db1.data(), dx.data(), batch);
  // example-end tensor-parallel-mlp

  ASSERT_EQ(local, hidden / std::size_t(tensor.size()));
  const std::size_t first = std::size_t(tensor.rank()) * local;
  constexpr double tight = 1e-5;
  expect_close(pre, columns_of(whole.pre, hidden, first, local), tight, "pre-activation");
  expect_close(y, whole.y, tight, "y");
  expect_close(dw2, columns_of(whole.dw2, hidden, first, local), tight, "dW2");
  expect_close(db2, whole.db2, tight, "db2");
  expect_close(dw1, rows_of(whole.dw1, inputs, first, local), tight, "dW1");
  expect_close(db1, rows_of(whole.db1, 1, first, local), tight, "db1");
  expect_close(dx, whole.dx, tight, "dx");
  EXPECT_TRUE(same_on_every_rank(tensor, y));
  EXPECT_TRUE(same_on_every_rank(tensor, db2)); // each rank updates its own copy of b2
  EXPECT_TRUE(same_on_every_rank(tensor, dx));

  if (tensor.size() == 1) { // a plain linear layer, computed as one: the bias, then the product
    std::vector<float> plain_pre(batch * hidden), plain_y(batch * outputs);
    for (std::size_t r = 0; r < batch; ++r) {
      std::copy(m.b1.begin(), m.b1.end(), plain_pre.begin() + std::ptrdiff_t(r * hidden));
      std::copy(b2.begin(), b2.end(), plain_y.begin() + std::ptrdiff_t(r * outputs));
    }
    NaiveProduct{}(false, true, batch, hidden, inputs, 1.0f, x.data(), inputs, m.w1.data(), inputs,
                   1.0f, plain_pre.data(), hidden);
    NaiveProduct{}(false, true, batch, outputs, hidden, 1.0f, a.data(), hidden, m.w2.data(), hidden,
                   1.0f, plain_y.data(), outputs);
    EXPECT_TRUE(same_bits(pre, plain_pre));
    EXPECT_TRUE(same_bits(y, plain_y));
  }
}

TEST(ParallelLinear, ColumnThenRowMatchesTheWholeBlock) {
  over_every_tensor_group([](auto& tensor, int) { check_mlp(tensor); });
}

TEST(ParallelLinear, OneRankIsAPlainLinearLayerBitForBit) {
  zero::SelfCommunicator self;
  check_mlp(self);
}

TEST(ParallelLinear, RefuseWidthsTheGroupDoesNotDivideNamingTheLayer) {
  if (world().size() == 1) return; // every width divides into one slice
  expect_refused(
      [] {
        zero::ColumnParallelLinear up(world(), inputs, std::size_t(world().size()) + 1,
                                      NaiveProduct{}, "the MLP's hidden units");
      },
      "the MLP's hidden units (" + std::to_string(world().size() + 1) + ") does not divide into");
  expect_refused(
      [] {
        zero::RowParallelLinear down(world(), std::size_t(world().size()) + 1, outputs,
                                     NaiveProduct{}, "the MLP's down projection");
      },
      "the MLP's down projection (");
}

// ---------------------------------------------------------------------------------------------
// Slicing whole tensors and joining the slices back.

TEST(Slices, JoinsInvertTheSlicesOfEveryRank) {
  constexpr std::size_t rows = 12, cols = 12, blocks = 3;
  const std::vector<float> whole = random_values(rows * cols, 7);
  const std::vector<float> fused = random_values(blocks * rows * cols, 8);
  for (int t = 1; t <= 4; ++t) {
    SCOPED_TRACE(std::to_string(t) + " slices");
    const std::size_t part = rows / std::size_t(t);
    std::vector<std::vector<float>> by_rows, by_columns, by_heads;
    for (int r = 0; r < t; ++r) {
      const TensorSlice slice{r, t};
      by_rows.push_back(zero::slice_rows(whole, rows, cols, slice, "w"));
      by_columns.push_back(zero::slice_columns(whole, rows, cols, slice, "w"));
      by_heads.push_back(zero::slice_fused_rows(fused, blocks, rows, cols, slice, "qkv"));
      const std::size_t first = std::size_t(r) * part;
      EXPECT_EQ(zero::slice_range(rows, slice, "w"), (zero::Range{first, first + part}));
      for (std::size_t i = 0; i < part; ++i)
        for (std::size_t c = 0; c < cols; ++c) {
          EXPECT_EQ(by_rows[r][i * cols + c], whole[(first + i) * cols + c]);
          EXPECT_EQ(by_columns[r][c * part + i], whole[c * cols + first + i]);
          for (std::size_t b = 0; b < blocks; ++b)
            EXPECT_EQ(by_heads[r][(b * part + i) * cols + c],
                      fused[(b * rows + first + i) * cols + c]);
        }
    }
    EXPECT_TRUE(same_bits(zero::join_rows(by_rows, part, cols, "w"), whole));
    EXPECT_TRUE(same_bits(zero::join_columns(by_columns, rows, part, "w"), whole));
    EXPECT_TRUE(same_bits(zero::join_fused_rows(by_heads, blocks, part, cols, "qkv"), fused));
  }
}

TEST(Slices, FusedRowsTakeTheSameRowsOfEveryBlock) {
  std::vector<float> fused(12); // 3 blocks of 4 rows of one column, each row its index
  for (std::size_t i = 0; i < fused.size(); ++i)
    fused[i] = float(i);
  EXPECT_EQ(zero::slice_fused_rows(fused, 3, 4, 1, {0, 2}, "qkv"),
            (std::vector<float>{0, 1, 4, 5, 8, 9}));
  EXPECT_EQ(zero::slice_fused_rows(fused, 3, 4, 1, {1, 2}, "qkv"),
            (std::vector<float>{2, 3, 6, 7, 10, 11}));
}

TEST(Slices, RefuseSizesTheGroupDoesNotDivideNamingTheTensor) {
  const std::vector<float> ten(10 * 2);
  expect_refused(
      [&] {
        (void)zero::slice_rows(ten, 10, 2, {0, 3}, "the embedding table");
      },
      "the embedding table (10) does not divide into 3 tensor-parallel slices");
  expect_refused(
      [&] {
        (void)zero::slice_columns(ten, 2, 10, {1, 4}, "the output projection");
      },
      "the output projection (10) does not divide into 4");
  expect_refused(
      [&] {
        (void)zero::slice_fused_rows(ten, 2, 5, 2, {0, 2}, "the qkv projection");
      },
      "the qkv projection (5) does not divide into 2");
  expect_refused(
      [&] {
        (void)zero::slice_rows(ten, 4, 4, {0, 2}, "W1");
      },
      "W1: 20 elements, not 4 x 4");
  const std::vector<std::vector<float>> uneven{std::vector<float>(4), std::vector<float>(3)};
  expect_refused([&] { (void)zero::join_rows(uneven, 2, 2, "W1"); }, "W1: 3 elements, not 2 x 2");
}

// ---------------------------------------------------------------------------------------------
// Attention's fused query|key|value projection [3 C, C]: each rank must get whole heads.

constexpr std::size_t heads = 12, head_width = 2, width = heads * head_width;

TEST(FusedAttention, EachRankHoldsItsHeadsOfQueryKeyAndValue) {
  std::vector<float> qkv(3 * width * width); // each element its own index
  for (std::size_t i = 0; i < qkv.size(); ++i)
    qkv[i] = float(i);
  for (int t = 1; t <= 4; ++t)
    for (int r = 0; r < t; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(t));
      const std::vector<float> mine = zero::slice_fused_rows(qkv, 3, width, width, {r, t}, "qkv");
      const std::size_t local_heads = heads / std::size_t(t), local_width = width / std::size_t(t);
      ASSERT_EQ(mine.size(), 3 * local_width * width);
      for (std::size_t block = 0; block < 3; ++block) // query, key, value
        for (std::size_t j = 0; j < local_heads; ++j)
          for (std::size_t d = 0; d < head_width; ++d) {
            const std::size_t head = std::size_t(r) * local_heads + j; // within [r H/T, (r+1) H/T)
            const std::size_t local_row = block * local_width + j * head_width + d;
            const std::size_t whole_row = block * width + head * head_width + d;
            for (std::size_t c = 0; c < width; ++c)
              ASSERT_EQ(mine[local_row * width + c], float(whole_row * width + c))
                  << "block " << block << ", local head " << j;
          }
    }
}

// The projection through a column-parallel layer with the fused slice: this rank's q, k and v
// columns are those of its heads in the whole projection.
TEST(FusedAttention, ColumnParallelProjectionGivesEachRankItsHeads) {
  const std::vector<float> x = random_values(batch * width, 9);
  const std::vector<float> w = random_values(3 * width * width, 10, 0.5f);
  const std::vector<float> b = random_values(3 * width, 11);
  std::vector<double> whole(batch * 3 * width);
  for (std::size_t r = 0; r < batch; ++r)
    for (std::size_t o = 0; o < 3 * width; ++o) {
      double sum = b[o];
      for (std::size_t i = 0; i < width; ++i)
        sum += double(x[r * width + i]) * w[o * width + i];
      whole[r * 3 * width + o] = sum;
    }
  over_every_tensor_group([&](auto& tensor, int) {
    const TensorSlice slice{tensor.rank(), tensor.size()};
    zero::ColumnParallelLinear qkv(tensor, width, 3 * width, NaiveProduct{});
    const std::vector<float> local_w = zero::slice_fused_rows(w, 3, width, width, slice, "qkv");
    const std::vector<float> local_b = zero::slice_fused_rows(b, 3, width, 1, slice, "qkv bias");
    const std::size_t local_width = width / std::size_t(tensor.size());
    ASSERT_EQ(qkv.local_out(), 3 * local_width);
    std::vector<float> y(batch * qkv.local_out());
    qkv.forward(x.data(), local_w.data(), local_b.data(), y.data(), batch);
    std::vector<double> expected;
    for (std::size_t r = 0; r < batch; ++r)
      for (std::size_t block = 0; block < 3; ++block)
        for (std::size_t c = 0; c < local_width; ++c)
          expected.push_back(
              whole[r * 3 * width + block * width + std::size_t(slice.rank) * local_width + c]);
    expect_close(y, expected, 1e-5, "q|k|v");
  });
}

// ---------------------------------------------------------------------------------------------
// The vocabulary-parallel embedding: vocabulary 10 pads to 12 over 3 or 4 ranks.

constexpr std::size_t vocab = 10, embedding_width = 4;

// The rows [first, first + rows) of the padded vocabulary that rank `rank` of `t` holds, `real`
// of them tokens and the rest padding: worked out here, not taken from the VocabularySlice under
// test.
struct HeldRows {
  std::size_t padded, first, rows, real;
};

HeldRows held_rows(int rank, int t) {
  const std::size_t padded = t == 3 || t == 4 ? 12 : 10, rows = padded / std::size_t(t);
  const std::size_t first = std::size_t(rank) * rows;
  return {padded, first, rows, first >= vocab ? 0 : std::min(rows, vocab - first)};
}

void expect_slice(const zero::VocabularySlice& slice, const HeldRows& held) {
  EXPECT_EQ(slice.vocab, vocab);
  EXPECT_EQ(slice.padded_vocab, held.padded);
  EXPECT_EQ(slice.first, held.first);
  EXPECT_EQ(slice.rows, held.rows);
  EXPECT_EQ(slice.real_rows(), held.real);
}

template <class Comm>
void check_embedding(Comm& tensor) {
  zero::VocabParallelEmbedding embedding(tensor, vocab, embedding_width);
  const HeldRows held = held_rows(tensor.rank(), tensor.size());
  expect_slice(embedding.slice(), held);
  const std::size_t w = embedding_width;

  // This rank's rows of the whole table, its padding rows NaN: never to be read.
  const std::vector<float> whole = random_values(vocab * w, 12);
  std::vector<float> table(held.rows * w, std::numeric_limits<float>::quiet_NaN());
  std::copy_n(whole.begin() + std::ptrdiff_t(held.first * w), held.real * w, table.begin());

  const std::vector<int> tokens{3, 9, 0, 3, 5, 9, 9, 7};
  std::vector<float> out(tokens.size() * w), looked_up;
  embedding.forward(tokens.data(), tokens.size(), table.data(), out.data());
  for (int token : tokens)
    looked_up.insert(looked_up.end(), whole.begin() + std::ptrdiff_t(std::size_t(token) * w),
                     whole.begin() + std::ptrdiff_t(std::size_t(token + 1) * w));
  EXPECT_TRUE(same_bits(out, looked_up));

  // Backward adds into what the table's gradient holds: whole, the tokens in order.
  const std::vector<float> dout = random_values(tokens.size() * w, 13);
  const std::vector<float> before = random_values(held.padded * w, 14);
  std::vector<float> expected_whole = before;
  for (std::size_t r = 0; r < tokens.size(); ++r)
    for (std::size_t c = 0; c < w; ++c)
      expected_whole[std::size_t(tokens[r]) * w + c] += dout[r * w + c];
  const auto local_rows = [&](const std::vector<float>& v) {
    return std::vector<float>(v.begin() + std::ptrdiff_t(held.first * w),
                              v.begin() + std::ptrdiff_t((held.first + held.rows) * w));
  };
  std::vector<float> d_table = local_rows(before);
  embedding.backward(tokens.data(), tokens.size(), dout.data(), d_table.data());
  EXPECT_TRUE(same_bits(d_table, local_rows(expected_whole))); // padding rows as they were

  expect_refused(
      [&] {
        const std::vector<int> outside{1, 10};
        embedding.forward(outside.data(), outside.size(), table.data(), out.data());
      },
      "token 10 at position 1 is outside the vocabulary of 10");
  expect_refused(
      [&] {
        const std::vector<int> negative{-1};
        embedding.forward(negative.data(), negative.size(), table.data(), out.data());
      },
      "token -1 at position 0 is outside the vocabulary");
  expect_refused(
      [&] {
        const std::vector<int> padding{11};
        embedding.backward(padding.data(), padding.size(), dout.data(), d_table.data());
      },
      "token 11 at position 0 is outside the vocabulary");
}

TEST(VocabParallelEmbedding, LooksUpAndAccumulatesLikeTheWholeTable) {
  over_every_tensor_group([](auto& tensor, int) { check_embedding(tensor); });
}

// ---------------------------------------------------------------------------------------------
// The vocabulary-parallel cross-entropy against the whole softmax cross-entropy in double.

struct WholeCrossEntropy {
  std::vector<double> losses, dlogits;
};

WholeCrossEntropy whole_cross_entropy(const std::vector<float>& logits,
                                      const std::vector<int>& targets, double scale) {
  WholeCrossEntropy o;
  for (std::size_t r = 0; r < targets.size(); ++r) {
    const float* row = logits.data() + r * vocab;
    const double top = *std::max_element(row, row + vocab);
    double sum = 0.0;
    for (std::size_t c = 0; c < vocab; ++c)
      sum += std::exp(row[c] - top);
    o.losses.push_back(std::log(sum) - (row[targets[r]] - top));
    for (std::size_t c = 0; c < vocab; ++c)
      o.dlogits.push_back((std::exp(row[c] - top) / sum - (int(c) == targets[r])) * scale);
  }
  return o;
}

template <class Comm>
void check_cross_entropy(Comm& tensor, float magnitude) {
  const std::vector<int> targets{0, 9, 4, 9, 5};
  const std::size_t rows = targets.size();
  const float scale = 1.0f / float(rows);
  const std::vector<float> whole = random_values(rows * vocab, 15, magnitude);
  const WholeCrossEntropy expected = whole_cross_entropy(whole, targets, scale);

  const zero::VocabularySlice slice(vocab, {tensor.rank(), tensor.size()});
  const HeldRows held = held_rows(tensor.rank(), tensor.size());
  expect_slice(slice, held);
  const std::size_t columns = held.rows, real = held.real;
  // This rank's columns, the padding ones large enough to take over the softmax if let in.
  std::vector<float> logits(rows * columns, 1e3f * magnitude);
  std::vector<double> expected_d(rows * columns, 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < real; ++c) {
      logits[r * columns + c] = whole[r * vocab + held.first + c];
      expected_d[r * columns + c] = expected.dlogits[r * vocab + held.first + c];
    }

  std::vector<double> losses(rows);
  std::vector<float> dlogits(logits.size(), std::numeric_limits<float>::quiet_NaN());
  zero::vocab_parallel_cross_entropy(tensor, slice, logits.data(), targets.data(), rows,
                                     losses.data(), dlogits.data(), scale);
  for (std::size_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(std::isfinite(losses[r])) << "row " << r;
    EXPECT_LE(std::abs(losses[r] - expected.losses[r]), 1e-12 * expected.losses[r])
        << "row " << r << ": " << losses[r] << " against " << expected.losses[r];
  }
  EXPECT_TRUE(same_on_every_rank(tensor, losses));
  for (std::size_t i = 0; i < dlogits.size(); ++i) {
    if (i % columns >= real) {
      EXPECT_EQ(dlogits[i], 0.0f) << "padding column " << i % columns;
      continue;
    }
    // Relative, down to float's smallest normal number: the softmax of logits thousands apart
    // underflows in float where double still holds it.
    const double bound =
        std::max(1e-6 * std::abs(expected_d[i]), double(std::numeric_limits<float>::min()));
    EXPECT_LE(std::abs(dlogits[i] - expected_d[i]), bound)
        << "row " << i / columns << ", column " << i % columns << ": " << dlogits[i] << " against "
        << expected_d[i];
  }

  // The gradient written over the logits: the same bits.
  std::vector<float> in_place = logits;
  std::vector<double> losses_in_place(rows);
  zero::vocab_parallel_cross_entropy(tensor, slice, in_place.data(), targets.data(), rows,
                                     losses_in_place.data(), in_place.data(), scale);
  EXPECT_TRUE(same_bits(in_place, dlogits));
  EXPECT_TRUE(same_bits(losses_in_place, losses));

  for (int target : {int(vocab), -1}) {
    const std::vector<int> outside{1, 2, target};
    expect_refused(
        [&] {
          zero::vocab_parallel_cross_entropy(tensor, slice, logits.data(), outside.data(), 3,
                                             losses.data(), dlogits.data(), scale);
        },
        "target " + std::to_string(target) + " at row 2 is outside the vocabulary of 10");
  }
}

TEST(VocabParallelCrossEntropy, MatchesTheWholeSoftmaxCrossEntropy) {
  over_every_tensor_group([](auto& tensor, int) { check_cross_entropy(tensor, 3.0f); });
}

TEST(VocabParallelCrossEntropy, StaysFiniteWithLogitsOfLargeMagnitude) {
  over_every_tensor_group([](auto& tensor, int) { check_cross_entropy(tensor, 1e4f); });
}

// ---------------------------------------------------------------------------------------------
// The conjugates f and g: one is the identity where the other sums over the group.

TEST(Conjugates, EachSumsOverTheGroupWhereTheOtherLeavesTheData) {
  over_every_tensor_group([](auto& tensor, int first_world_rank) {
    // Element i is (world rank + 1) * (i + 1): the sum tells which ranks took part.
    const std::vector<float> mine = [] {
      std::vector<float> v(6);
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = float(world().rank() + 1) * float(i + 1);
      return v;
    }();
    std::vector<float> summed(mine.size());
    const int group_ranks = (first_world_rank + 1 + first_world_rank + tensor.size()) *
                            tensor.size() / 2; // the sum of (world rank + 1) over the group
    for (std::size_t i = 0; i < summed.size(); ++i)
      summed[i] = float(group_ranks) * float(i + 1);

    std::vector<float> v = mine;
    zero::EnterTensorParallel::forward(tensor, HostView(v));
    EXPECT_TRUE(same_bits(v, mine)) << "f forward";
    zero::EnterTensorParallel::backward(tensor, HostView(v));
    EXPECT_EQ(v, summed) << "f backward";
    v = mine;
    zero::LeaveTensorParallel::forward(tensor, HostView(v));
    EXPECT_EQ(v, summed) << "g forward";
    v = mine;
    zero::LeaveTensorParallel::backward(tensor, HostView(v));
    EXPECT_TRUE(same_bits(v, mine)) << "g backward";
  });
}

} // namespace

// Over a communicator of stream-space memory (the GPU engine's StagedCommunicator, here over the
// host stream space), with the host communicator agreeing on the size: the same groups, and a sum
// over the tensor group in the stream space's memory. (NcclCommunicator splits with ncclCommSplit
// the same way; it needs one GPU per rank.)
TEST(TensorParallelGroups, SplitAStagedCommunicatorAgreeingOverTheHostOne) {
  using Staged = zero::StagedCommunicator<zero::HostStreamSpace, zero::MpiCommunicator>;
  zero::HostStream caller{"caller"}, transfer{"transfer"};
  Staged staged{world().split(0, world().rank()), zero::HostStreamSpace(caller),
                zero::HostStreamSpace(transfer)};
  const int w = world().rank(), size = world().size();
  for (int t = 1; t <= size; ++t) {
    if (size % t != 0) continue;
    SCOPED_TRACE("tensor groups of " + std::to_string(t));
    zero::TensorParallelGroups<Staged> groups(staged, t, world());
    EXPECT_EQ(groups.tensor_rank(), w % t);
    EXPECT_EQ(groups.data_rank(), w / t);
    std::vector<float> value{float(w)};
    zero::sum_over_tensor_group(
        groups.tensor(), zero::View<float, Staged::memory_space>(value.data(), value.size()));
    float expected = 0;
    for (int i = 0; i < t; ++i)
      expected += float(w / t * t + i);
    EXPECT_EQ(value[0], expected);
  }
  if (size > 1)
    expect_refused([&] { zero::TensorParallelGroups<Staged> groups(staged, size + 1, world()); },
                   "do not split into groups of");
}

// join_split, what a checkpoint's consolidation joins slices by, inverts each way of cutting:
// rows, columns, whole heads of a fused projection, and a padded vocabulary (its padding dropped).
TEST(Slices, JoinSplitInvertsEveryCut) {
  const std::size_t rows = 18, cols = 6;
  std::vector<float> whole(rows * cols);
  for (std::size_t i = 0; i < whole.size(); ++i)
    whole[i] = float(i);
  for (int size : {1, 2, 3}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const auto cut = [&](auto slice_one) {
      std::vector<std::vector<float>> slices;
      for (int r = 0; r < size; ++r)
        slices.push_back(slice_one(TensorSlice{r, size}));
      return slices;
    };
    const auto by_rows =
        cut([&](TensorSlice s) { return zero::slice_rows(whole, rows, cols, s, "w"); });
    EXPECT_EQ(zero::join_split(by_rows, {rows / std::size_t(size), cols}, {.dimension = 0}, "w"),
              whole);
    const auto by_columns =
        cut([&](TensorSlice s) { return zero::slice_columns(whole, rows, cols, s, "w"); });
    EXPECT_EQ(zero::join_split(by_columns, {rows, cols / std::size_t(size)}, {.dimension = 1}, "w"),
              whole);
    const auto by_heads = cut(
        [&](TensorSlice s) { return zero::slice_fused_rows(whole, 3, rows / 3, cols, s, "w"); });
    EXPECT_EQ(zero::join_split(by_heads, {rows / std::size_t(size), cols},
                               {.dimension = 0, .blocks = 3}, "w"),
              whole);
    // A vocabulary of 10 rows padded to a multiple of the group size.
    const std::size_t vocab = 10, padded = zero::padded_to_multiple(vocab, size);
    std::vector<float> table(whole.begin(), whole.begin() + std::ptrdiff_t(vocab * cols));
    std::vector<float> padded_table = table;
    padded_table.resize(padded * cols, -1.0f);
    const auto by_vocabulary =
        cut([&](TensorSlice s) { return zero::slice_rows(padded_table, padded, cols, s, "wte"); });
    EXPECT_EQ(zero::join_split(by_vocabulary, {padded / std::size_t(size), cols},
                               {.dimension = 0, .whole_extent = vocab}, "wte"),
              table);
    EXPECT_EQ(zero::whole_shape({padded / std::size_t(size), cols}, 0,
                                {.dimension = 0, .whole_extent = vocab}, size, "wte"),
              (std::vector<std::size_t>{vocab, cols}));
  }
  expect_refused(
      [&] {
        (void)zero::whole_shape({4, 6}, 24, {.dimension = 2}, 2, "w");
      },
      "w: a slice of shape");
}
