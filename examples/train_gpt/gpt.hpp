#pragma once
// A GPT-2 style transformer over bytes, forward and backward in float on the CPU: token and
// position embeddings, pre-LayerNorm blocks (causal multi-head attention and a GELU MLP, biases
// everywhere, no dropout), a final LayerNorm and a head tied to the token embedding. The math is
// nanoGPT's model.py, and reference.py is its PyTorch twin, with the same parameter names.
//
// The engine gathers parameters a layer at a time, so the model is cut the same way: engine layer
// 0 holds the embeddings, layer 1 + i block i, and the last one ln_f. Each function takes one
// layer's flat array (its parameters end to end, in spec order) and the activations of a batch of
// sequences, [batch, seq, embd] row-major.
//
// Threads: OpenMP's (OMP_NUM_THREADS, omp_set_num_threads). The first matrix product sets OpenBLAS
// to one thread for the whole process, since a second pool of spinning threads would fight
// OpenMP's; see kernels::gemm.

#include "gpt_kernels.hpp"

#include <zero/shard/parameter.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpt {

struct Config {
  std::size_t layers = 4, heads = 4, embd = 64, seq = 64, vocab = 256;
  std::size_t head_size() const { return embd / heads; }
};

// One block's tensors, in the order they lie in its flat array.
template <class Float>
struct BlockTensors {
  Float *ln1_w, *ln1_b, *attn_w, *attn_b, *attn_proj_w, *attn_proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b,
      *fc_proj_w, *fc_proj_b;
};
using BlockWeights = BlockTensors<const float>;
using BlockGradients = BlockTensors<float>;

// Names (after "transformer.h.{i}.") and shapes, as torch, in flat-array order.
struct BlockTensorSpec {
  const char* name;
  std::size_t rows, cols; // cols == 0: a vector of `rows`
};
inline std::vector<BlockTensorSpec> block_tensor_specs(const Config& config) {
  const std::size_t c = config.embd;
  return {{"ln_1.weight", c, 0},
          {"ln_1.bias", c, 0},
          {"attn.c_attn.weight", 3 * c, c},
          {"attn.c_attn.bias", 3 * c, 0},
          {"attn.c_proj.weight", c, c},
          {"attn.c_proj.bias", c, 0},
          {"ln_2.weight", c, 0},
          {"ln_2.bias", c, 0},
          {"mlp.c_fc.weight", 4 * c, c},
          {"mlp.c_fc.bias", 4 * c, 0},
          {"mlp.c_proj.weight", c, 4 * c},
          {"mlp.c_proj.bias", c, 0}};
}

inline std::size_t block_parameters(const Config& config) {
  const std::size_t c = config.embd;
  return 12 * c * c + 13 * c;
}

template <class Float>
BlockTensors<Float> block_view(const Config& config, Float* flat) {
  BlockTensors<Float> t;
  Float** members[] = {&t.ln1_w, &t.ln1_b, &t.attn_w, &t.attn_b, &t.attn_proj_w, &t.attn_proj_b,
                       &t.ln2_w, &t.ln2_b, &t.fc_w,   &t.fc_b,   &t.fc_proj_w,   &t.fc_proj_b};
  std::size_t offset = 0, i = 0;
  for (const BlockTensorSpec& spec : block_tensor_specs(config)) {
    *members[i++] = flat + offset;
    offset += spec.rows * (spec.cols ? spec.cols : 1);
  }
  return t;
}
inline BlockWeights block_weights(const Config& config, const float* flat) {
  return block_view(config, flat);
}
inline BlockGradients block_gradients(const Config& config, float* flat) {
  return block_view(config, flat);
}

// Every parameter as the engine registers it: the embeddings (layer 0), the blocks (1 + i), ln_f
// (layers + 1). The head reuses wte, so it has no tensor of its own.
inline std::vector<zero::ParameterSpec> specs(const Config& config) {
  const std::size_t c = config.embd;
  const auto matrix_spec = [](std::string name, std::size_t rows, std::size_t cols, int layer) {
    return zero::ParameterSpec{
        std::move(name), rows * cols, zero::DType::float32, layer, {rows, cols}};
  };
  const auto vector_spec = [](std::string name, std::size_t n, int layer) {
    return zero::ParameterSpec{std::move(name), n, zero::DType::float32, layer, {n}};
  };
  std::vector<zero::ParameterSpec> all = {matrix_spec("transformer.wte.weight", config.vocab, c, 0),
                                          matrix_spec("transformer.wpe.weight", config.seq, c, 0)};
  for (std::size_t i = 0; i < config.layers; ++i) {
    const int layer = int(i) + 1;
    const std::string prefix = "transformer.h." + std::to_string(i) + ".";
    for (const BlockTensorSpec& spec : block_tensor_specs(config))
      all.push_back(spec.cols ? matrix_spec(prefix + spec.name, spec.rows, spec.cols, layer)
                              : vector_spec(prefix + spec.name, spec.rows, layer));
  }
  const int last = int(config.layers) + 1;
  all.push_back(vector_spec("transformer.ln_f.weight", c, last));
  all.push_back(vector_spec("transformer.ln_f.bias", c, last));
  return all;
}

// Where block_forward leaves, inside `saved`, what block_backward reads: offsets in floats.
struct SavedLayout {
  std::size_t ln1, ln1_mean, ln1_rstd, qkv, att, heads, mid, ln2, ln2_mean, ln2_rstd, fc, gelu;
  std::size_t total;
};
inline SavedLayout saved_layout(const Config& config, std::size_t batch) {
  const std::size_t rows = batch * config.seq, c = config.embd;
  std::size_t at = 0;
  const auto take = [&at](std::size_t n) { return std::exchange(at, at + n); };
  SavedLayout s;
  s.ln1 = take(rows * c);
  s.ln1_mean = take(rows);
  s.ln1_rstd = take(rows);
  s.qkv = take(rows * 3 * c);
  s.att = take(batch * config.heads * config.seq * config.seq);
  s.heads = take(rows * c);
  s.mid = take(rows * c); // x + attention: the residual stream between the two halves
  s.ln2 = take(rows * c);
  s.ln2_mean = take(rows);
  s.ln2_rstd = take(rows);
  s.fc = take(rows * 4 * c);
  s.gelu = take(rows * 4 * c);
  s.total = at;
  return s;
}
inline std::size_t block_saved_floats(const Config& config, std::size_t batch) {
  return saved_layout(config, batch).total;
}

namespace detail {
// Scratch that outlives a call, so that steps after the first allocate nothing.
inline float* scratch(std::vector<float>& buffer, std::size_t floats) {
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}
} // namespace detail

// x, y: [batch, seq, embd]. `saved` receives block_saved_floats() floats.
inline void block_forward(const Config& config, const float* params, const float* x, float* y,
                          float* saved, std::size_t batch) {
  const BlockWeights w = block_weights(config, params);
  const SavedLayout s = saved_layout(config, batch);
  const std::size_t rows = batch * config.seq, c = config.embd;
  using namespace kernels;
  layernorm_forward(x, w.ln1_w, w.ln1_b, saved + s.ln1, saved + s.ln1_mean, saved + s.ln1_rstd,
                    rows, c);
  linear_forward(saved + s.ln1, w.attn_w, w.attn_b, saved + s.qkv, rows, c, 3 * c);
  attention_forward(saved + s.qkv, saved + s.att, saved + s.heads, batch, config.seq, c,
                    config.heads);
  float* mid = saved + s.mid;
  linear_forward(saved + s.heads, w.attn_proj_w, w.attn_proj_b, mid, rows, c, c);
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < rows * c; ++i)
    mid[i] += x[i];
  layernorm_forward(mid, w.ln2_w, w.ln2_b, saved + s.ln2, saved + s.ln2_mean, saved + s.ln2_rstd,
                    rows, c);
  linear_forward(saved + s.ln2, w.fc_w, w.fc_b, saved + s.fc, rows, c, 4 * c);
  gelu_forward(saved + s.fc, saved + s.gelu, rows * 4 * c);
  linear_forward(saved + s.gelu, w.fc_proj_w, w.fc_proj_b, y, rows, 4 * c, c);
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < rows * c; ++i)
    y[i] += mid[i];
}

// dy: the gradient of the block's output. Writes dx and dparams (block_parameters() floats),
// both overwritten.
inline void block_backward(const Config& config, const float* params, const float* x,
                           const float* saved, const float* dy, float* dx, float* dparams,
                           std::size_t batch) {
  const BlockWeights w = block_weights(config, params);
  const BlockGradients g = block_gradients(config, dparams);
  const SavedLayout s = saved_layout(config, batch);
  const std::size_t rows = batch * config.seq, c = config.embd;
  const std::size_t att_floats = batch * config.heads * config.seq * config.seq;
  thread_local std::vector<float> buffer;
  float* wide = detail::scratch(buffer, rows * 4 * c + rows * c + att_floats); // 4C, then C
  float* narrow = wide + rows * 4 * c;
  float* att_scratch = narrow + rows * c;
  using namespace kernels;

  // MLP half: y = mid + c_proj(gelu(c_fc(ln_2(mid)))).
  linear_backward(saved + s.gelu, w.fc_proj_w, dy, g.fc_proj_w, g.fc_proj_b, wide, rows, 4 * c, c);
  gelu_backward(saved + s.fc, wide, wide, rows * 4 * c);
  linear_backward(saved + s.ln2, w.fc_w, wide, g.fc_w, g.fc_b, narrow, rows, c, 4 * c);
  float* dmid = dx; // dx holds the gradient of mid until the attention half is done
  layernorm_backward(saved + s.mid, w.ln2_w, saved + s.ln2_mean, saved + s.ln2_rstd, narrow, dy,
                     dmid, g.ln2_w, g.ln2_b, rows, c);

  // Attention half: mid = x + c_proj(attention(c_attn(ln_1(x)))).
  float* dqkv = wide;
  linear_backward(saved + s.heads, w.attn_proj_w, dmid, g.attn_proj_w, g.attn_proj_b, narrow, rows,
                  c, c);
  attention_backward(saved + s.qkv, saved + s.att, narrow, dqkv, att_scratch, batch, config.seq, c,
                     config.heads);
  linear_backward(saved + s.ln1, w.attn_w, dqkv, g.attn_w, g.attn_b, narrow, rows, c, 3 * c);
  layernorm_backward(x, w.ln1_w, saved + s.ln1_mean, saved + s.ln1_rstd, narrow, dmid, dx, g.ln1_w,
                     g.ln1_b, rows, c);
}

// x[b, t] = wte[tokens[b, t]] + wpe[t].
inline void embed_forward(const Config& config, const float* wte, const float* wpe,
                          const std::uint8_t* tokens, float* x, std::size_t batch) {
  const std::size_t c = config.embd;
#pragma omp parallel for schedule(static)
  for (std::size_t r = 0; r < batch * config.seq; ++r) {
    const float* token = wte + std::size_t(tokens[r]) * c;
    const float* position = wpe + (r % config.seq) * c;
    for (std::size_t i = 0; i < c; ++i)
      x[r * c + i] = token[i] + position[i];
  }
}

// Adds each token's rows of dx into dwte (which the tied head wrote first) and writes dwpe.
inline void embed_backward(const Config& config, const std::uint8_t* tokens, const float* dx,
                           float* dwte, float* dwpe, std::size_t batch) {
  const std::size_t c = config.embd, seq = config.seq;
  using kernels::column_strip;
  // A strip of columns per thread: the same token's rows then always add up in the same order.
#pragma omp parallel for schedule(static)
  for (std::size_t strip = 0; strip < kernels::strips(c); ++strip) {
    const std::size_t begin = strip * column_strip, end = std::min(c, begin + column_strip);
    for (std::size_t r = 0; r < batch * seq; ++r)
      for (std::size_t i = begin; i < end; ++i)
        dwte[std::size_t(tokens[r]) * c + i] += dx[r * c + i];
  }
#pragma omp parallel for schedule(static)
  for (std::size_t t = 0; t < seq; ++t) {
    float* row = dwpe + t * c;
    std::fill(row, row + c, 0.0f);
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t i = 0; i < c; ++i)
        row[i] += dx[(b * seq + t) * c + i];
  }
}

namespace detail {
// The head's intermediates for one batch.
struct Head {
  float *normalised, *mean, *rstd, *logits;
  std::vector<double> losses;
};
inline Head& head_scratch(const Config& config, std::size_t batch) {
  const std::size_t rows = batch * config.seq;
  thread_local std::vector<float> buffer;
  thread_local Head head;
  float* base = scratch(buffer, rows * (config.embd + 2 + config.vocab));
  head.normalised = base;
  head.mean = base + rows * config.embd;
  head.rstd = head.mean + rows;
  head.logits = head.rstd + rows;
  head.losses.resize(rows);
  return head;
}
// ln_f and the logits of the tied head; returns the sum of the token losses, and with `gradient`
// leaves the gradient of (sum * gradient_scale) in place of the logits.
inline double head_forward(const Config& config, const float* lnf, const float* wte, const float* x,
                           const std::uint8_t* targets, Head& head, std::size_t batch,
                           bool gradient, float gradient_scale) {
  const std::size_t rows = batch * config.seq, c = config.embd;
  kernels::layernorm_forward(x, lnf, lnf + c, head.normalised, head.mean, head.rstd, rows, c);
  kernels::gemm(false, true, rows, config.vocab, c, 1.0f, head.normalised, c, wte, c, 0.0f,
                head.logits, config.vocab);
  kernels::cross_entropy(head.logits, targets, head.losses.data(), gradient ? head.logits : nullptr,
                         rows, config.vocab, gradient_scale);
  double sum = 0; // in row order, whatever the threads
  for (double loss : head.losses)
    sum += loss;
  return sum;
}
} // namespace detail

// ln_f, the tied head and the cross-entropy against targets ([batch, seq]); returns the sum of the
// token losses over `normalizer`. Writes (overwrites) dx, dlnf (weight then bias) and dwte, all
// gradients of that mean times loss_scale.
inline double head_forward_backward(const Config& config, const float* lnf, const float* wte,
                                    const float* x, const std::uint8_t* targets, float* dx,
                                    float* dlnf, float* dwte, std::size_t batch, double normalizer,
                                    float loss_scale) {
  const std::size_t rows = batch * config.seq, c = config.embd, vocab = config.vocab;
  detail::Head& head = detail::head_scratch(config, batch);
  const double sum = detail::head_forward(config, lnf, wte, x, targets, head, batch, true,
                                          float(double(loss_scale) / normalizer));
  const float* dlogits = head.logits;
  kernels::gemm(true, false, vocab, c, rows, 1.0f, dlogits, vocab, head.normalised, c, 0.0f, dwte,
                c);
  float* dnormalised = head.normalised; // its last reader was the product above
  kernels::gemm(false, false, rows, c, vocab, 1.0f, dlogits, vocab, wte, c, 0.0f, dnormalised, c);
  kernels::layernorm_backward(x, lnf, head.mean, head.rstd, dnormalised, nullptr, dx, dlnf,
                              dlnf + c, rows, c);
  return sum / normalizer;
}

// The same loss, without gradients (evaluation).
inline double head_loss(const Config& config, const float* lnf, const float* wte, const float* x,
                        const std::uint8_t* targets, std::size_t batch, double normalizer) {
  detail::Head& head = detail::head_scratch(config, batch);
  return detail::head_forward(config, lnf, wte, x, targets, head, batch, false, 1.0f) / normalizer;
}

} // namespace gpt
