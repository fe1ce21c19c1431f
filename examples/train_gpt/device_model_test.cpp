// The device model (device_model.hpp) against the host model (gpt.hpp): a block's forward and
// backward, the embeddings and the head, from the same weights and inputs. Built twice as
// model_kernels_test.cpp is: over DeviceTwinSpace in CI, where every output must be the host
// model's bits; over CudaStreamSpace from device_model_test.cu (tools/zero-gpu-check), within
// device_bound of the host model in relative L2 norm per tensor (cuBLAS's products sum in
// another order than OpenBLAS's). bf16 products: against the host's fp32 products of the rounded
// operands (the same bits on the twin, within device_bound on a GPU, whose tensor cores sum the
// exact products in fp32 in their own order), and the model with them near the host model's fp32.

#include "device_test_space.hpp"

#include "device_model.hpp"
#include "device_products.hpp"
#include "gpt.hpp"
#include "gpt_kernels.hpp"

#include <zero/core/bfloat16.hpp>

#include <gtest/gtest.h>

#include <cblas.h>

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

namespace {

using gpt::testing::Device;
using gpt::testing::expect_host_result;
using gpt::testing::random_floats;
using gpt::testing::random_tokens;
using gpt::testing::relative_l2;

// Sizes that leave partial lanes, strips and tiles: 3 sequences of 9 tokens, 2 heads of 12.
const gpt::Config config{.layers = 1, .heads = 2, .embd = 24, .seq = 9, .vocab = 256};
constexpr std::size_t batch = 3;

// A block's forward and backward from the same weights, input and output gradient, on the
// device model (with `products`) and on the host model: the output, the saved activations, the
// input gradient and the parameter gradients of each.
struct BlockOutputs {
  std::vector<float> y, saved, dx, dparams;
};
struct BlockRuns {
  BlockOutputs device, host;
};
BlockRuns run_block(gpt::ProductPrecision products) {
  Device device;
  const std::size_t n = batch * config.seq * config.embd;
  const std::size_t saved_floats = gpt::block_saved_floats(config, batch);
  const auto params = random_floats(gpt::block_parameters(config), 0.2f, 21);
  const auto x = random_floats(n, 1.0f, 22), dy = random_floats(n, 1.0f, 23);
  auto params_d = device.upload(params), x_d = device.upload(x), dy_d = device.upload(dy);
  zero::Buffer<float, gpt::testing::Memory> y_d(n), saved_d(saved_floats), dx_d(n),
      dparams_d(params.size());
  const gpt::DeviceModel model(device.space(), config, batch, products);
  model.block_forward(params_d.data(), x_d.data(), y_d.data(), saved_d.data(), batch);
  model.block_backward(params_d.data(), x_d.data(), saved_d.data(), dy_d.data(), dx_d.data(),
                       dparams_d.data(), batch);

  BlockOutputs host{std::vector<float>(n), std::vector<float>(saved_floats), std::vector<float>(n),
                    std::vector<float>(params.size())};
  gpt::block_forward(config, params.data(), x.data(), host.y.data(), host.saved.data(), batch);
  gpt::block_backward(config, params.data(), x.data(), host.saved.data(), dy.data(), host.dx.data(),
                      host.dparams.data(), batch);
  return {{device.download(y_d), device.download(saved_d), device.download(dx_d),
           device.download(dparams_d)},
          host};
}

TEST(DeviceModel, BlockMatchesTheHostModel) {
  const auto [device, host] = run_block(gpt::ProductPrecision::fp32);
  expect_host_result(device.y, host.y, "the block's output");
  expect_host_result(device.saved, host.saved, "the block's saved activations");
  expect_host_result(device.dx, host.dx, "the block's input gradient");
  expect_host_result(device.dparams, host.dparams, "the block's parameter gradients");
}

TEST(DeviceModel, EmbeddingsAndHeadMatchTheHostModel) {
  Device device;
  const std::size_t token_rows = batch * config.seq, c = config.embd;
  const auto wte = random_floats(config.vocab * c, 0.5f, 24),
             wpe = random_floats(config.seq * c, 0.5f, 25);
  const auto lnf = random_floats(2 * c, 1.0f, 26);
  const auto tokens = random_tokens(token_rows, config.vocab, 27),
             targets = random_tokens(token_rows, config.vocab, 28);
  auto wte_d = device.upload(wte), wpe_d = device.upload(wpe), lnf_d = device.upload(lnf);
  auto tokens_d = device.upload(tokens), targets_d = device.upload(targets);
  zero::Buffer<float, gpt::testing::Memory> x_d(token_rows * c), dx_d(token_rows * c),
      dlnf_d(2 * c), dwte_d(wte.size()), dwpe_d(wpe.size());
  const gpt::DeviceModel model(device.space(), config, batch);
  const double normalizer = double(token_rows);
  const float loss_scale = 8.0f, gradient_scale = float(double(loss_scale) / normalizer);
  model.embed_forward(wte_d.data(), wpe_d.data(), tokens_d.data(), x_d.data(), batch);
  model.head_forward_backward(lnf_d.data(), wte_d.data(), x_d.data(), targets_d.data(), dx_d.data(),
                              dlnf_d.data(), dwte_d.data(), batch, gradient_scale);
  const double loss_sum = device.download(model.loss_sum(), 1)[0];
  model.embed_backward(tokens_d.data(), dx_d.data(), dwte_d.data(), dwpe_d.data(), batch);
  model.head_loss(lnf_d.data(), wte_d.data(), x_d.data(), targets_d.data(), batch);
  const double evaluated_sum = device.download(model.loss_sum(), 1)[0];

  std::vector<float> x(token_rows * c), dx(token_rows * c), dlnf(2 * c), dwte(wte.size()),
      dwpe(wpe.size());
  gpt::embed_forward(config, wte.data(), wpe.data(), tokens.data(), x.data(), batch);
  const double loss = gpt::head_forward_backward(config, lnf.data(), wte.data(), x.data(),
                                                 targets.data(), dx.data(), dlnf.data(),
                                                 dwte.data(), batch, normalizer, loss_scale);
  gpt::embed_backward(config, tokens.data(), dx.data(), dwte.data(), dwpe.data(), batch);
  const double evaluated =
      gpt::head_loss(config, lnf.data(), wte.data(), x.data(), targets.data(), batch, normalizer);
  expect_host_result(device.download(x_d), x, "the embeddings");
  expect_host_result(device.download(dx_d), dx, "the head's input gradient");
  expect_host_result(device.download(dlnf_d), dlnf, "ln_f's gradient");
  expect_host_result(device.download(dwte_d), dwte, "the token embedding's gradient");
  expect_host_result(device.download(dwpe_d), dwpe, "the position embedding's gradient");
  expect_host_result(std::vector<double>{loss_sum / normalizer}, std::vector<double>{loss},
                     "the loss");
  expect_host_result(std::vector<double>{evaluated_sum / normalizer},
                     std::vector<double>{evaluated}, "the evaluated loss");
}

std::vector<float> rounded_to_bf16(std::vector<float> x) {
  for (float& v : x)
    v = float(zero::bfloat16(v));
  return x;
}

// One product and a batch of them (two sequences of three heads, as the attention's), transposed
// either way, with alpha and beta: the products of the bf16-rounded operands summed in fp32.
// Sizes that leave partial tiles, whose bf16 rows are not 16-byte aligned, and sizes that give a
// GPU's tensor-core kernels whole tiles (the path a real model's products take).
void expect_bf16_products(std::size_t m, std::size_t n, std::size_t k) {
  Device device;
  const std::size_t outer = 2, inner = 3, each = m * k;
  const auto a = random_floats(outer * inner * m * k, 1.0f, 31);
  const auto b = random_floats(outer * inner * k * n, 1.0f, 32);
  const auto c = random_floats(outer * inner * m * n, 1.0f, 33);
  auto a_d = device.upload(a), b_d = device.upload(b), c_d = device.upload(c),
       batch_d = device.upload(c);
  const gpt::Batch products_batch{outer,         inner, inner * each,  each,
                                  inner * k * n, k * n, inner * m * n, m * n};
  const std::string shape =
      std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k) + ": ";
  {
    const gpt::Products<gpt::testing::Space> products(device.space(), gpt::ProductPrecision::bf16,
                                                      {a.size(), b.size()});
    // a stored k x m (transposed), b n x k (transposed).
    products.gemm(true, true, m, n, k, 0.5f, a_d.data(), m, b_d.data(), k, 1.0f, c_d.data(), n);
    // a m x k, b k x n.
    products.gemm_batched(false, false, m, n, k, 0.5f, a_d.data(), k, b_d.data(), n, 1.0f,
                          batch_d.data(), n, products_batch);
    // An operand larger than the products were built for is refused, not overrun.
    EXPECT_THROW(products.gemm(false, false, m, n, 2 * a.size(), 1.0f, a_d.data(), 2 * a.size(),
                               b_d.data(), n, 0.0f, c_d.data(), n),
                 zero::Error);
    // An empty product reaches nothing, and is no error.
    products.gemm(false, false, 0, n, k, 1.0f, a_d.data(), k, b_d.data(), n, 0.0f, c_d.data(), n);
    device.space().fence();
  }

  const std::vector<float> a_bf16 = rounded_to_bf16(a), b_bf16 = rounded_to_bf16(b);
  std::vector<float> single = c, single_fp32 = c, batched = c;
  gpt::kernels::gemm(true, true, m, n, k, 0.5f, a_bf16.data(), m, b_bf16.data(), k, 1.0f,
                     single.data(), n);
  gpt::kernels::gemm(true, true, m, n, k, 0.5f, a.data(), m, b.data(), k, 1.0f, single_fp32.data(),
                     n);
  for (std::size_t p = 0; p < outer * inner; ++p)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 0.5f,
                a_bf16.data() + p * each, int(k), b_bf16.data() + p * k * n, int(n), 1.0f,
                batched.data() + p * m * n, int(n));
  expect_host_result(device.download(c_d), single, shape + "a bf16 product");
  expect_host_result(device.download(batch_d), batched, shape + "a batch of bf16 products");
  // Rounding the operands moves the result far beyond the bound the comparisons allow: a product
  // that forgot to round would fail them.
  const double rounding = relative_l2(single_fp32, single);
  std::cout << shape << "bf16 operands against fp32 ones: relative L2 distance " << rounding
            << "\n";
  EXPECT_GT(rounding, 100 * gpt::testing::gpu_bound) << shape;
}

TEST(DeviceProducts, Bf16RoundsTheOperandsAndSumsInFp32) {
  expect_bf16_products(37, 29, 45);
  expect_bf16_products(64, 32, 128);
}

// The whole model with bf16 products stays near the host model's fp32 (bf16's rounding, 2^-9
// relative, through a block's four products and the attention's), and is not its bits.
TEST(DeviceModel, Bf16ProductsStayNearTheHostModel) {
  const auto [device, host] = run_block(gpt::ProductPrecision::bf16);
  const auto expect_near = [](const std::vector<float>& got, const std::vector<float>& fp32,
                              const char* what) {
    const double distance = relative_l2(got, fp32);
    std::cout << what << " with bf16 products: relative L2 distance to fp32 " << distance << "\n";
    EXPECT_LT(distance, 1e-2) << what;
    EXPECT_GT(distance, 1e-4) << what << ": the products were not rounded";
  };
  expect_near(device.y, host.y, "the block's output");
  expect_near(device.dx, host.dx, "the block's input gradient");
  expect_near(device.dparams, host.dparams, "the block's parameter gradients");
}

TEST(DeviceModel, RefusesABatchLargerThanItWasBuiltFor) {
  Device device;
  const gpt::DeviceModel model(device.space(), config, 1);
  EXPECT_THROW(model.embed_forward(nullptr, nullptr, nullptr, nullptr, 2), zero::Error);
}

} // namespace
