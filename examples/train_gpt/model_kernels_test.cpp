// The GPT's kernels written once (model_kernels.hpp), run by a device's execution space on buffers
// in its memory, against the host model (gpt_kernels.hpp and gpt.hpp, over HostThreads) and
// against plain double-precision formulas.
//
// Built twice: over DeviceTwinSpace in device_twin memory (in CI), where the results must be the
// host model's bits; and, from model_kernels_test.cu, over CudaStreamSpace (tools/zero-gpu-check),
// where each kernel must come within device_bound of the host model in relative L2 norm (nvcc
// and the host compiler fuse multiplies and adds in different places) and reports how far it is.
// Strips of columns are one column wide on a device and 16 on the host: the twin runs both widths,
// which must agree bit for bit, since each column adds its rows in the same order either way.

#include "device_test_space.hpp"

#if !ZERO_TEST_CUDA
#include "gpt.hpp"
#endif

#include "gpt_kernels.hpp"
#include "model_kernels.hpp"

#include <zero/core/buffer.hpp>
#include <zero/core/for_each.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

using namespace gpt::kernels;
using namespace gpt::testing;

// Shapes that leave partial lanes and strips: 37 columns, 5 rows per strip test, sequences of 7.
constexpr std::size_t rows = 70, cols = 37, seq = 7, classes = 53;

TEST(ModelKernels, LaneSumFollowsTheWarpOrder) {
  // 40 terms: lanes 0-7 take two, the rest one; then halving.
  std::vector<float> terms(40);
  for (std::size_t i = 0; i < terms.size(); ++i)
    terms[i] = 1.0f + float(i) * 1e-7f * float(i % 5);
  float lane[32] = {};
  for (std::size_t c = 0; c < terms.size(); ++c)
    lane[c % 32] += terms[c];
  for (std::size_t width = 16; width > 0; width /= 2)
    for (std::size_t j = 0; j < width; ++j)
      lane[j] += lane[j + width];
  const float got = lane_sum<float>(terms.size(), [&](std::size_t c) { return terms[c]; });
  EXPECT_EQ(got, lane[0]);
  EXPECT_EQ(lane_sum<float>(0, [](std::size_t) { return 1.0f; }), 0.0f);
}

TEST(ModelKernels, GeluMatchesTheHostModelAndTanhFormula) {
  Device device;
  const std::size_t n = rows * cols;
  const auto z = random_floats(n, 2.0f, 1), da = random_floats(n, 1.0f, 2);
  auto dz_buffer = device.upload(z), z_buffer = device.upload(z), da_buffer = device.upload(da);
  zero::Buffer<float, Memory> a_buffer(n), grad_buffer(n);
  device.run(n, GeluForward{z_buffer.data(), a_buffer.data()});
  device.run(n, GeluBackward{z_buffer.data(), da_buffer.data(), grad_buffer.data()});
  std::vector<float> a(n), dz(n);
  gelu_forward(z.data(), a.data(), n);
  gelu_backward(z.data(), da.data(), dz.data(), n);
  expect_host_result(device.download(a_buffer), a, "GELU");
  expect_host_result(device.download(grad_buffer), dz, "GELU's backward");
  for (std::size_t i = 0; i < n; ++i) {
    const double x = z[i];
    const double exact = 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    ASSERT_NEAR(a[i], exact, 1e-6 * (1 + std::abs(exact))) << x;
  }
}

TEST(ModelKernels, LayerNormMatchesTheHostModelAndTheFormula) {
  Device device;
  const auto x = random_floats(rows * cols, 3.0f, 3), w = random_floats(cols, 1.0f, 4),
             b = random_floats(cols, 1.0f, 5), dy = random_floats(rows * cols, 1.0f, 6),
             residual = random_floats(rows * cols, 1.0f, 7);
  auto xd = device.upload(x), wd = device.upload(w), bd = device.upload(b), dyd = device.upload(dy),
       dxd = device.upload(residual);
  zero::Buffer<float, Memory> yd(rows * cols), meand(rows), rstdd(rows), dwd(cols), dbd(cols);
  device.run(rows, LayerNormForwardRow{xd.data(), wd.data(), bd.data(), yd.data(), meand.data(),
                                       rstdd.data(), cols});
  // The residual is dx's own values, as the block's backward passes it.
  device.run(rows, LayerNormBackwardRow{xd.data(), wd.data(), meand.data(), rstdd.data(),
                                        dyd.data(), dxd.data(), dxd.data(), cols});
  device.run(strips<Space>(cols), LayerNormBackwardStrip<strip_width<Space>>{
                                      xd.data(), meand.data(), rstdd.data(), dyd.data(), dwd.data(),
                                      dbd.data(), rows, cols});

  std::vector<float> y(rows * cols), mean(rows), rstd(rows), dx = residual, dw(cols), db(cols);
  layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, cols);
  layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx.data(), dx.data(),
                     dw.data(), db.data(), rows, cols);
  expect_host_result(device.download(yd), y, "LayerNorm");
  expect_host_result(device.download(meand), mean, "LayerNorm's means");
  expect_host_result(device.download(rstdd), rstd, "LayerNorm's 1/std");
  expect_host_result(device.download(dxd), dx, "LayerNorm's input gradient");
  expect_host_result(device.download(dwd), dw, "LayerNorm's weight gradient");
  expect_host_result(device.download(dbd), db, "LayerNorm's bias gradient");

  for (std::size_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (std::size_t c = 0; c < cols; ++c)
      m += x[r * cols + c];
    m /= double(cols);
    for (std::size_t c = 0; c < cols; ++c)
      v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
    const double s = 1 / std::sqrt(v / double(cols) + layernorm_eps);
    for (std::size_t c = 0; c < cols; ++c) {
      const double exact = (x[r * cols + c] - m) * s * w[c] + b[c];
      ASSERT_NEAR(y[r * cols + c], exact, 1e-5 * (1 + std::abs(exact))) << r << ", " << c;
    }
  }
}

TEST(ModelKernels, CausalSoftmaxMatchesTheHostModelAndTheFormula) {
  Device device;
  const std::size_t groups = rows / seq;
  const auto scores = random_floats(groups * seq * seq, 4.0f, 8),
             dp = random_floats(groups * seq * seq, 1.0f, 9);
  auto pd = device.upload(scores), dpd = device.upload(dp);
  device.run(groups * seq, CausalSoftmaxRow{pd.data(), seq});
  device.run(groups * seq, CausalSoftmaxBackwardRow{pd.data(), dpd.data(), seq});

  // The host model's attention runs these rows inline, one sequence and head per thread.
  std::vector<float> p = scores, ds = dp;
  for (std::size_t g = 0; g < groups; ++g)
    for (std::size_t i = 0; i < seq; ++i) {
      CausalSoftmaxRow{p.data() + g * seq * seq, seq}(i, SerialLanes{});
      CausalSoftmaxBackwardRow{p.data() + g * seq * seq, ds.data() + g * seq * seq,
                               seq}(i, SerialLanes{});
    }
  expect_host_result(device.download(pd), p, "the causal softmax");
  expect_host_result(device.download(dpd), ds, "the causal softmax's backward");

  for (std::size_t r = 0; r < groups * seq; ++r) {
    const std::size_t i = r % seq;
    double top = scores[r * seq], sum = 0;
    for (std::size_t j = 0; j <= i; ++j)
      top = std::max<double>(top, scores[r * seq + j]);
    for (std::size_t j = 0; j <= i; ++j)
      sum += std::exp(scores[r * seq + j] - top);
    for (std::size_t j = 0; j < seq; ++j) {
      const double exact = j <= i ? std::exp(scores[r * seq + j] - top) / sum : 0.0;
      ASSERT_NEAR(p[r * seq + j], exact, 1e-6) << r << ", " << j;
    }
  }
}

TEST(ModelKernels, CrossEntropyAndItsSumMatchTheHostModel) {
  Device device;
  const auto logits = random_floats(rows * classes, 3.0f, 10);
  const auto targets = random_tokens(rows, classes, 11);
  const float scale = 0.25f;
  auto ld = device.upload(logits);
  auto td = device.upload(targets);
  zero::Buffer<double, Memory> lossd(rows), sumd(1);
  zero::Buffer<float, Memory> gd(rows * classes);
  device.run(rows, CrossEntropyRow{ld.data(), td.data(), lossd.data(), gd.data(), classes, scale});
  device.run(1, LossSum{lossd.data(), rows, sumd.data()});
  // Without a gradient, in place of the logits as the head does it.
  device.run(rows, CrossEntropyRow{ld.data(), td.data(), lossd.data(), ld.data(), classes, scale});

  std::vector<double> losses(rows);
  std::vector<float> gradient(rows * classes), in_place = logits;
  cross_entropy(logits.data(), targets.data(), losses.data(), gradient.data(), rows, classes,
                scale);
  cross_entropy(in_place.data(), targets.data(), losses.data(), in_place.data(), rows, classes,
                scale);
  double sum = 0;
  LossSum{losses.data(), rows, &sum}(0);
  expect_host_result(device.download(lossd), losses, "the rows' losses");
  expect_host_result(device.download(gd), gradient, "the logits' gradient");
  expect_host_result(device.download(ld), in_place, "the logits' gradient in place");
  expect_host_result(device.download(sumd), std::vector<double>{sum}, "the loss's sum");

  double exact_sum = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    double log_sum = 0;
    for (std::size_t c = 0; c < classes; ++c)
      log_sum += std::exp(double(logits[r * classes + c]));
    exact_sum += std::log(log_sum) - double(logits[r * classes + targets[r]]);
  }
  EXPECT_NEAR(sum, exact_sum, 1e-6 * exact_sum);
}

TEST(ModelKernels, ColumnSumsAndResidualsMatchTheHostModel) {
  Device device;
  const auto m = random_floats(rows * cols, 1.0f, 12), other = random_floats(rows * cols, 1.0f, 13);
  auto md = device.upload(m), od = device.upload(other);
  zero::Buffer<float, Memory> sums_device(cols), sums_one(cols);
  device.run(strips<Space>(cols),
             ColumnSumsStrip<strip_width<Space>>{md.data(), sums_device.data(), rows, cols});
  device.run(cols, ColumnSumsStrip<1>{md.data(), sums_one.data(), rows, cols});
  device.run(rows * cols, AddInto{od.data(), md.data()});

  std::vector<float> sums(cols), added = m;
  column_sums(m.data(), sums.data(), rows, cols);
  for (std::size_t i = 0; i < added.size(); ++i)
    added[i] += other[i];
  expect_host_result(device.download(sums_device), sums, "the column sums");
  expect_host_result(device.download(sums_one), sums, "the column sums one column at a time");
  expect_host_result(device.download(md), added, "the residual add");
}

TEST(ModelKernels, EmbeddingsMatchTheHostModel) {
  Device device;
  const std::size_t vocab = 19, batch = rows / seq;
  const auto wte = random_floats(vocab * cols, 1.0f, 14), wpe = random_floats(seq * cols, 1.0f, 15),
             dx = random_floats(rows * cols, 1.0f, 16),
             dwte_first = random_floats(vocab * cols, 1.0f, 17);
  const auto tokens = random_tokens(rows, vocab, 18);
  auto wted = device.upload(wte), wped = device.upload(wpe), dxd = device.upload(dx),
       dwted = device.upload(dwte_first), dwte_one = device.upload(dwte_first);
  auto tokd = device.upload(tokens);
  zero::Buffer<float, Memory> xd(rows * cols), dwped(seq * cols);
  device.run(rows, EmbedRow{wted.data(), wped.data(), tokd.data(), xd.data(), cols, seq});
  device.run(strips<Space>(cols), EmbeddingBackwardStrip<strip_width<Space>>{
                                      tokd.data(), dxd.data(), dwted.data(), rows, cols});
  device.run(cols, EmbeddingBackwardStrip<1>{tokd.data(), dxd.data(), dwte_one.data(), rows, cols});
  device.run(seq * cols, PositionBackward{dxd.data(), dwped.data(), batch, seq, cols});

#if ZERO_TEST_CUDA
  // The host model's kernels, on the host.
  std::vector<float> x(rows * cols), dwte = dwte_first, dwpe(seq * cols);
  for_each_row(zero::HostThreads{}, rows,
               EmbedRow{wte.data(), wpe.data(), tokens.data(), x.data(), cols, seq});
  zero::for_each_index(zero::HostThreads{}, strips<zero::HostThreads>(cols),
                       EmbeddingBackwardStrip<strip_width<zero::HostThreads>>{
                           tokens.data(), dx.data(), dwte.data(), rows, cols});
  zero::for_each_index(zero::HostThreads{}, seq * cols,
                       PositionBackward{dx.data(), dwpe.data(), batch, seq, cols});
#else
  // The host model's own path (zero::VocabParallelEmbedding over a group of one): other code, the
  // same order of every sum.
  const gpt::Config config{.layers = 1, .heads = 1, .embd = cols, .seq = seq, .vocab = vocab};
  std::vector<float> x(rows * cols), dwte = dwte_first, dwpe(seq * cols);
  gpt::embed_forward(config, wte.data(), wpe.data(), tokens.data(), x.data(), batch);
  gpt::embed_backward(config, tokens.data(), dx.data(), dwte.data(), dwpe.data(), batch);
#endif
  expect_host_result(device.download(xd), x, "the embeddings");
  expect_host_result(device.download(dwted), dwte, "the token embedding's gradient");
  expect_host_result(device.download(dwte_one), dwte,
                     "the token embedding's gradient one column at a time");
  expect_host_result(device.download(dwped), dwpe, "the position embedding's gradient");
}

} // namespace
