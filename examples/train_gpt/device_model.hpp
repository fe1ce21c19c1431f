#pragma once
// The GPT's forward and backward on an execution space: every activation, weight and gradient in
// the space's memory, model_kernels.hpp's kernels and the space's matrix products
// (device_products.hpp) queued on its stream, in the host model's order of operations (gpt.hpp,
// whose layout of parameters and saved activations it shares). Unsplit: no tensor parallelism.
//
// Written once over the space. Over DeviceTwinSpace (device_twin memory) it computes the host
// model's bits, which zero_test_train_gpt_kernels checks; over CudaStreamSpace (device_model.cu
// instantiates it) the kernels are CUDA's and the products cuBLAS's. The products are fp32, or
// bf16 operands summed in fp32 (device_products.hpp); the activations and the kernels' arithmetic
// stay fp32 either way. Over the twin, bf16 products round the operands as a GPU does, so their
// results differ from a GPU's only in the order of the products' sums.
//
// Every call only queues work and returns; pointers are the space's memory, and must outlive the
// queued work. The loss of head_forward_backward lands in loss_sum(), one double in the space's
// memory, which the caller copies out after the stream reached it.

#include "device_products.hpp"
#include "gpt.hpp"
#include "model_kernels.hpp"

#include <zero/core/buffer.hpp>
#include <zero/core/error.hpp>
#include <zero/core/for_each.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace gpt {

// The device model's calls, whatever its space: what a training loop built by the host compiler
// holds when the model's kernels were compiled by nvcc (make_device_model below).
class AnyDeviceModel {
 public:
  virtual ~AnyDeviceModel() = default;
  // One double in the model's memory: the sum of the token losses of the last head call.
  virtual const double* loss_sum() const noexcept = 0;
  virtual void block_forward(const float* params, const float* x, float* y, float* saved,
                             std::size_t batch) const = 0;
  virtual void block_backward(const float* params, const float* x, const float* saved,
                              const float* dy, float* dx, float* dparams,
                              std::size_t batch) const = 0;
  virtual void embed_forward(const float* wte, const float* wpe, const std::uint8_t* tokens,
                             float* x, std::size_t batch) const = 0;
  virtual void embed_backward(const std::uint8_t* tokens, const float* dx, float* dwte, float* dwpe,
                              std::size_t batch) const = 0;
  virtual void head_forward_backward(const float* lnf, const float* wte, const float* x,
                                     const std::uint8_t* targets, float* dx, float* dlnf,
                                     float* dwte, std::size_t batch,
                                     float gradient_scale) const = 0;
  virtual void head_loss(const float* lnf, const float* wte, const float* x,
                         const std::uint8_t* targets, std::size_t batch) const = 0;
};

template <class Exec>
class DeviceModel final : public AnyDeviceModel {
  using Memory = typename Exec::memory_space;

 public:
  // `max_batch`: the most sequences a call is given (a micro-step's).
  DeviceModel(const Exec& exec, const Config& config, std::size_t max_batch,
              ProductPrecision precision = ProductPrecision::fp32)
      : exec_(exec), products_(exec, precision, largest_operands(config, max_batch)),
        config_(config), max_batch_(max_batch), wide_(rows(max_batch) * 4 * config.embd),
        narrow_(rows(max_batch) * config.embd),
        att_scratch_(max_batch * config.heads * config.seq * config.seq),
        normalised_(rows(max_batch) * config.embd), mean_(rows(max_batch)), rstd_(rows(max_batch)),
        logits_(rows(max_batch) * config.vocab), losses_(rows(max_batch)), loss_sum_(1) {
    if (config.tensor_parallel != 1)
      zero::fail(zero::ErrorKind::unsupported,
                 "the device model is unsplit: tensor parallelism runs on the host model only");
  }

  const double* loss_sum() const noexcept override { return loss_sum_.data(); }

  // x, y: [batch, seq, embd]; `saved` receives block_saved_floats() floats.
  void block_forward(const float* params, const float* x, float* y, float* saved,
                     std::size_t batch) const override {
    using namespace kernels;
    require_batch(batch);
    const BlockWeights w = block_weights(config_, params);
    const SavedLayout s = saved_layout(config_, batch);
    const std::size_t n = rows(batch), c = config_.embd;
    run(n, LayerNormForwardRow{x, w.ln1_w, w.ln1_b, saved + s.ln1, saved + s.ln1_mean,
                               saved + s.ln1_rstd, c});
    linear_forward(saved + s.ln1, w.attn_w, w.attn_b, saved + s.qkv, n, c, 3 * c);
    attention_forward(saved + s.qkv, saved + s.att, saved + s.heads, batch);
    float* mid = saved + s.mid;
    linear_forward(saved + s.heads, w.attn_proj_w, w.attn_proj_b, mid, n, c, c);
    run(n * c, AddInto{x, mid});
    run(n, LayerNormForwardRow{mid, w.ln2_w, w.ln2_b, saved + s.ln2, saved + s.ln2_mean,
                               saved + s.ln2_rstd, c});
    linear_forward(saved + s.ln2, w.fc_w, w.fc_b, saved + s.fc, n, c, 4 * c);
    run(n * 4 * c, GeluForward{saved + s.fc, saved + s.gelu});
    linear_forward(saved + s.gelu, w.fc_proj_w, w.fc_proj_b, y, n, 4 * c, c);
    run(n * c, AddInto{mid, y});
  }

  // dy: the gradient of the block's output. Writes dx and dparams, both overwritten.
  void block_backward(const float* params, const float* x, const float* saved, const float* dy,
                      float* dx, float* dparams, std::size_t batch) const override {
    using namespace kernels;
    require_batch(batch);
    const BlockWeights w = block_weights(config_, params);
    const BlockGradients g = block_gradients(config_, dparams);
    const SavedLayout s = saved_layout(config_, batch);
    const std::size_t n = rows(batch), c = config_.embd;
    float* wide = wide_.data();
    float* narrow = narrow_.data();

    // MLP half: y = mid + c_proj(gelu(c_fc(ln_2(mid)))).
    linear_backward(saved + s.gelu, w.fc_proj_w, dy, g.fc_proj_w, g.fc_proj_b, wide, n, 4 * c, c);
    run(n * 4 * c, GeluBackward{saved + s.fc, wide, wide});
    linear_backward(saved + s.ln2, w.fc_w, wide, g.fc_w, g.fc_b, narrow, n, c, 4 * c);
    float* dmid = dx; // dx holds the gradient of mid until the attention half is done
    layernorm_backward(saved + s.mid, w.ln2_w, saved + s.ln2_mean, saved + s.ln2_rstd, narrow, dy,
                       dmid, g.ln2_w, g.ln2_b, n);

    // Attention half: mid = x + c_proj(attention(c_attn(ln_1(x)))).
    float* dqkv = wide;
    linear_backward(saved + s.heads, w.attn_proj_w, dmid, g.attn_proj_w, g.attn_proj_b, narrow, n,
                    c, c);
    attention_backward(saved + s.qkv, saved + s.att, narrow, dqkv, batch);
    linear_backward(saved + s.ln1, w.attn_w, dqkv, g.attn_w, g.attn_b, narrow, n, c, 3 * c);
    layernorm_backward(x, w.ln1_w, saved + s.ln1_mean, saved + s.ln1_rstd, narrow, dmid, dx,
                       g.ln1_w, g.ln1_b, n);
  }

  // x[b, t] = wte[tokens[b, t]] + wpe[t]. The tokens were checked against the vocabulary where
  // they were read.
  void embed_forward(const float* wte, const float* wpe, const std::uint8_t* tokens, float* x,
                     std::size_t batch) const override {
    require_batch(batch);
    run(rows(batch), kernels::EmbedRow{wte, wpe, tokens, x, config_.embd, config_.seq});
  }

  // Adds each token's row of dx into dwte (which the tied head wrote first) and writes dwpe.
  void embed_backward(const std::uint8_t* tokens, const float* dx, float* dwte, float* dwpe,
                      std::size_t batch) const override {
    using namespace kernels;
    require_batch(batch);
    const std::size_t c = config_.embd;
    run(kernels::strips<Exec>(c),
        EmbeddingBackwardStrip<strip_width<Exec>>{tokens, dx, dwte, rows(batch), c});
    run(config_.seq * c, PositionBackward{dx, dwpe, batch, config_.seq, c});
  }

  // ln_f, the tied head and the cross-entropy against targets ([batch, seq]): the sum of the token
  // losses into loss_sum(), and the gradients of (that sum x gradient_scale): dx, dlnf (weight then
  // bias) and dwte, all overwritten.
  void head_forward_backward(const float* lnf, const float* wte, const float* x,
                             const std::uint8_t* targets, float* dx, float* dlnf, float* dwte,
                             std::size_t batch, float gradient_scale) const override {
    require_batch(batch);
    const std::size_t n = rows(batch), c = config_.embd, vocab = config_.vocab;
    head_forward(lnf, wte, x, targets, batch, logits_.data(), gradient_scale);
    const float* dlogits = logits_.data();
    products_.gemm(true, false, vocab, c, n, 1.0f, dlogits, vocab, normalised_.data(), c, 0.0f,
                   dwte, c);
    float* dnormalised = normalised_.data(); // its last reader was the product above
    products_.gemm(false, false, n, c, vocab, 1.0f, dlogits, vocab, wte, c, 0.0f, dnormalised, c);
    layernorm_backward(x, lnf, mean_.data(), rstd_.data(), dnormalised, nullptr, dx, dlnf, dlnf + c,
                       n);
  }

  // The same loss into loss_sum(), without gradients (evaluation).
  void head_loss(const float* lnf, const float* wte, const float* x, const std::uint8_t* targets,
                 std::size_t batch) const override {
    require_batch(batch);
    head_forward(lnf, wte, x, targets, batch, nullptr, 1.0f);
  }

 private:
  std::size_t rows(std::size_t batch) const noexcept { return batch * config_.seq; }

  // The most elements the products' operands span. First operands: activations and their
  // gradients (at most the MLP's, 4 n c; q, k and v span less than qkv's 3 n c), the logits'
  // gradient, the attention's probabilities. Second operands: the weights (the MLP's 4 c^2, the
  // token embedding's vocab c) and activations.
  static OperandSizes largest_operands(const Config& config, std::size_t max_batch) noexcept {
    const std::size_t n = max_batch * config.seq, c = config.embd;
    return {
        std::max({n * 4 * c, n * config.vocab, max_batch * config.heads * config.seq * config.seq}),
        std::max({4 * c * c, n * 4 * c, config.vocab * c})};
  }

  void require_batch(std::size_t batch) const {
    if (batch > max_batch_)
      zero::fail(zero::ErrorKind::invalid_argument,
                 "device model: a batch of " + std::to_string(batch) +
                     " sequences, more than the " + std::to_string(max_batch_) +
                     " it was built for");
  }

  // n indices of an element or strip kernel; n rows of a row kernel.
  template <class K>
  void run(std::size_t n, const K& kernel) const {
    if constexpr (kernels::RowKernel<K>)
      for_each_row(exec_, n, kernel); // CudaStreamSpace's: a warp per row (row_kernels.cuh)
    else
      zero::for_each_index(exec_, n, kernel);
  }

  // z = x W^T + b (W is [out, in]); as the host model's layers: the bias first, then the product
  // added to it.
  void linear_forward(const float* x, const float* w, const float* b, float* z, std::size_t n,
                      std::size_t in, std::size_t out) const {
    run(n * out, kernels::BroadcastRows{b, z, out});
    products_.gemm(false, true, n, out, in, 1.0f, x, in, w, in, 1.0f, z, out);
  }

  // dW = dz^T x, db = column sums of dz (both overwritten), dx = dz W.
  void linear_backward(const float* x, const float* w, const float* dz, float* dw, float* db,
                       float* dx, std::size_t n, std::size_t in, std::size_t out) const {
    using namespace kernels;
    run(kernels::strips<Exec>(out), ColumnSumsStrip<strip_width<Exec>>{dz, db, n, out});
    products_.gemm(true, false, out, in, n, 1.0f, dz, out, x, in, 0.0f, dw, in);
    products_.gemm(false, false, n, in, out, 1.0f, dz, out, w, in, 0.0f, dx, in);
  }

  void layernorm_backward(const float* x, const float* w, const float* mean, const float* rstd,
                          const float* dy, const float* residual, float* dx, float* dw, float* db,
                          std::size_t n) const {
    using namespace kernels;
    const std::size_t c = config_.embd;
    run(n, LayerNormBackwardRow{x, w, mean, rstd, dy, residual, dx, c});
    run(kernels::strips<Exec>(c),
        LayerNormBackwardStrip<strip_width<Exec>>{x, mean, rstd, dy, dw, db, n, c});
  }

  // The products of every (sequence, head) pair: q and k, v and the scores, as the host's
  // attention makes them one pair at a time.
  Batch heads_batch(std::size_t batch, std::size_t a_outer, std::size_t a_inner,
                    std::size_t b_outer, std::size_t b_inner, std::size_t c_outer,
                    std::size_t c_inner) const noexcept {
    return {batch, config_.heads, a_outer, a_inner, b_outer, b_inner, c_outer, c_inner};
  }

  void attention_forward(const float* qkv, float* att, float* out, std::size_t batch) const {
    const std::size_t seq = config_.seq, embd = config_.embd, heads = config_.heads;
    const std::size_t head_size = embd / heads, row = 3 * embd, square = seq * seq;
    const float scale = 1.0f / std::sqrt(float(head_size));
    // scores = scale q k^T, per (sequence, head).
    products_.gemm_batched(
        false, true, seq, seq, head_size, scale, qkv, row, qkv + embd, row, 0.0f, att, seq,
        heads_batch(batch, seq * row, head_size, seq * row, head_size, heads * square, square));
    run(batch * heads * seq, kernels::CausalSoftmaxRow{att, seq});
    products_.gemm_batched(
        false, false, seq, head_size, seq, 1.0f, att, seq, qkv + 2 * embd, row, 0.0f, out, embd,
        heads_batch(batch, heads * square, square, seq * row, head_size, seq * embd, head_size));
  }

  void attention_backward(const float* qkv, const float* att, const float* dout, float* dqkv,
                          std::size_t batch) const {
    const std::size_t seq = config_.seq, embd = config_.embd, heads = config_.heads;
    const std::size_t head_size = embd / heads, row = 3 * embd, square = seq * seq;
    const float scale = 1.0f / std::sqrt(float(head_size));
    const float* q = qkv;
    const float* k = qkv + embd;
    const float* v = qkv + 2 * embd;
    float* dq = dqkv;
    float* dk = dqkv + embd;
    float* dv = dqkv + 2 * embd;
    float* dp = att_scratch_.data();
    // dp = dout v^T; dv = p^T dout.
    products_.gemm_batched(
        false, true, seq, seq, head_size, 1.0f, dout, embd, v, row, 0.0f, dp, seq,
        heads_batch(batch, seq * embd, head_size, seq * row, head_size, heads * square, square));
    products_.gemm_batched(
        true, false, seq, head_size, seq, 1.0f, att, seq, dout, embd, 0.0f, dv, row,
        heads_batch(batch, heads * square, square, seq * embd, head_size, seq * row, head_size));
    run(batch * heads * seq, kernels::CausalSoftmaxBackwardRow{att, dp, seq});
    // dq = scale ds k; dk = scale ds^T q.
    products_.gemm_batched(
        false, false, seq, head_size, seq, scale, dp, seq, k, row, 0.0f, dq, row,
        heads_batch(batch, heads * square, square, seq * row, head_size, seq * row, head_size));
    products_.gemm_batched(
        true, false, seq, head_size, seq, scale, dp, seq, q, row, 0.0f, dk, row,
        heads_batch(batch, heads * square, square, seq * row, head_size, seq * row, head_size));
  }

  // ln_f, the logits (into `gradient`'s place when given) and the losses and their sum.
  void head_forward(const float* lnf, const float* wte, const float* x, const std::uint8_t* targets,
                    std::size_t batch, float* gradient, float gradient_scale) const {
    using namespace kernels;
    const std::size_t n = rows(batch), c = config_.embd, vocab = config_.vocab;
    run(n, LayerNormForwardRow{x, lnf, lnf + c, normalised_.data(), mean_.data(), rstd_.data(), c});
    products_.gemm(false, true, n, vocab, c, 1.0f, normalised_.data(), c, wte, c, 0.0f,
                   logits_.data(), vocab);
    run(n,
        CrossEntropyRow{logits_.data(), targets, losses_.data(), gradient, vocab, gradient_scale});
    run(1, LossSum{losses_.data(), n, loss_sum_.data()});
  }

  Exec exec_;
  Products<Exec> products_;
  Config config_;
  std::size_t max_batch_;
  // Scratch in the space's memory, written by queued work only (hence mutable behind const
  // calls, as a stream's buffers are).
  mutable zero::Buffer<float, Memory> wide_, narrow_, att_scratch_;
  mutable zero::Buffer<float, Memory> normalised_, mean_, rstd_, logits_;
  mutable zero::Buffer<double, Memory> losses_, loss_sum_;
};

// The model on a host stream space (the CPU twin of a device), compiled where it is named.
template <zero::HostStreamBased S>
std::unique_ptr<AnyDeviceModel> make_device_model(const S& space, const Config& config,
                                                  std::size_t max_batch,
                                                  ProductPrecision precision) {
  return std::make_unique<DeviceModel<S>>(space, config, max_batch, precision);
}

#if ZERO_HAS_CUDA
// On a GPU: the model with its kernels compiled by nvcc (device_model.cu), so that code the host
// compiler builds never instantiates a CUDA launch.
std::unique_ptr<AnyDeviceModel> make_device_model(const zero::CudaStreamSpace& space,
                                                  const Config& config, std::size_t max_batch,
                                                  ProductPrecision precision);
#endif

} // namespace gpt
