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
// Tensor parallelism (Megatron-LM's): with Config::tensor_parallel = T, each rank of a group of T
// holds a slice of every block (its T-th of the heads and of the MLP's width: attention's
// query|key|value and the first MLP layer column-parallel, their output projections row-parallel)
// and of the vocabulary (the token embedding and the tied head), and the LayerNorms, position
// embedding and row-parallel biases whole. The functions take the group (any of zero's host
// communicators; a one-rank group gives the model unsplit, computed as before) and work on this
// rank's slices. Per block: 2 all-reduces of [batch, seq, embd] in forward, 2 in backward.
//
// Threads: OpenMP's (OMP_NUM_THREADS, omp_set_num_threads). The first matrix product sets OpenBLAS
// to one thread for the whole process, since a second pool of spinning threads would fight
// OpenMP's; see kernels::gemm.

#include "gpt_kernels.hpp"

#include <zero/comm/self_communicator.hpp>
#include <zero/shard/parameter.hpp>
#include <zero/tensor_parallel/linear.hpp>
#include <zero/tensor_parallel/slices.hpp>
#include <zero/tensor_parallel/vocab_parallel.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpt {

struct Config {
  std::size_t layers = 4, heads = 4, embd = 64, seq = 64, vocab = 256;
  std::size_t tensor_parallel = 1; // ranks sharing each layer: heads must divide by it
  std::size_t head_size() const { return embd / heads; }
  // This rank's share under tensor parallelism: heads, attention width, MLP width, vocabulary.
  std::size_t local_heads() const { return heads / tensor_parallel; }
  std::size_t local_embd() const { return embd / tensor_parallel; }
  std::size_t local_hidden() const { return 4 * embd / tensor_parallel; }
  std::size_t padded_vocab() const { return zero::padded_to_multiple(vocab, int(tensor_parallel)); }
  std::size_t local_vocab() const { return padded_vocab() / tensor_parallel; }
};

// How a tensor is cut over the tensor-parallel group (zero/tensor_parallel/slices.hpp).
enum class Cut {
  whole,      // replicated: every rank holds it
  rows,       // column-parallel weight or bias: out / T rows each
  columns,    // row-parallel weight: in / T columns each
  qkv_rows,   // attention's fused query|key|value: whole heads of each of the three
  vocabulary, // the token embedding: rows of the vocabulary padded to a multiple of T
};

// One block's tensors, in the order they lie in its flat array.
template <class Float>
struct BlockTensors {
  Float *ln1_w, *ln1_b, *attn_w, *attn_b, *attn_proj_w, *attn_proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b,
      *fc_proj_w, *fc_proj_b;
};
using BlockWeights = BlockTensors<const float>;
using BlockGradients = BlockTensors<float>;

// Names (after "transformer.h.{i}.") and whole shapes, as torch, in flat-array order, with how
// each is cut over the tensor-parallel group.
struct BlockTensorSpec {
  const char* name;
  std::size_t rows, cols; // cols == 0: a vector of `rows`
  Cut cut;
};
inline std::vector<BlockTensorSpec> block_tensor_specs(const Config& config) {
  const std::size_t c = config.embd;
  return {{"ln_1.weight", c, 0, Cut::whole},
          {"ln_1.bias", c, 0, Cut::whole},
          {"attn.c_attn.weight", 3 * c, c, Cut::qkv_rows},
          {"attn.c_attn.bias", 3 * c, 0, Cut::qkv_rows},
          {"attn.c_proj.weight", c, c, Cut::columns},
          {"attn.c_proj.bias", c, 0, Cut::whole},
          {"ln_2.weight", c, 0, Cut::whole},
          {"ln_2.bias", c, 0, Cut::whole},
          {"mlp.c_fc.weight", 4 * c, c, Cut::rows},
          {"mlp.c_fc.bias", 4 * c, 0, Cut::rows},
          {"mlp.c_proj.weight", c, 4 * c, Cut::columns},
          {"mlp.c_proj.bias", c, 0, Cut::whole}};
}

// A whole tensor's shape [rows, cols] (cols 1 for a vector) and a rank's slice of it.
inline std::pair<std::size_t, std::size_t> local_shape(const Config& config, Cut cut,
                                                       std::size_t rows, std::size_t cols) {
  const std::size_t t = config.tensor_parallel;
  switch (cut) {
  case Cut::whole:
    return {rows, cols};
  case Cut::rows:
  case Cut::qkv_rows:
    return {rows / t, cols};
  case Cut::columns:
    return {rows, cols / t};
  case Cut::vocabulary:
    return {config.local_vocab(), cols};
  }
  return {rows, cols};
}

inline std::size_t block_parameters(const Config& config) {
  std::size_t n = 0;
  for (const BlockTensorSpec& spec : block_tensor_specs(config)) {
    const auto [rows, cols] = local_shape(config, spec.cut, spec.rows, spec.cols ? spec.cols : 1);
    n += rows * cols;
  }
  return n;
}

template <class Float>
BlockTensors<Float> block_view(const Config& config, Float* flat) {
  BlockTensors<Float> t;
  Float** members[] = {&t.ln1_w, &t.ln1_b, &t.attn_w, &t.attn_b, &t.attn_proj_w, &t.attn_proj_b,
                       &t.ln2_w, &t.ln2_b, &t.fc_w,   &t.fc_b,   &t.fc_proj_w,   &t.fc_proj_b};
  std::size_t offset = 0, i = 0;
  for (const BlockTensorSpec& spec : block_tensor_specs(config)) {
    *members[i++] = flat + offset;
    const auto [rows, cols] = local_shape(config, spec.cut, spec.rows, spec.cols ? spec.cols : 1);
    offset += rows * cols;
  }
  return t;
}
inline BlockWeights block_weights(const Config& config, const float* flat) {
  return block_view(config, flat);
}
inline BlockGradients block_gradients(const Config& config, float* flat) {
  return block_view(config, flat);
}

// Every whole tensor of the model, in the engine's order: the embeddings (layer 0), the blocks
// (1 + i), ln_f (layers + 1). The head reuses wte, so it has no tensor of its own.
struct TensorSpec {
  std::string name;
  std::size_t rows, cols; // cols == 0: a vector of `rows`
  Cut cut;
  int layer;
};
inline std::vector<TensorSpec> tensor_specs(const Config& config) {
  const std::size_t c = config.embd;
  std::vector<TensorSpec> all = {{"transformer.wte.weight", config.vocab, c, Cut::vocabulary, 0},
                                 {"transformer.wpe.weight", config.seq, c, Cut::whole, 0}};
  for (std::size_t i = 0; i < config.layers; ++i) {
    const std::string prefix = "transformer.h." + std::to_string(i) + ".";
    for (const BlockTensorSpec& spec : block_tensor_specs(config))
      all.push_back({prefix + spec.name, spec.rows, spec.cols, spec.cut, int(i) + 1});
  }
  const int last = int(config.layers) + 1;
  all.push_back({"transformer.ln_f.weight", c, 0, Cut::whole, last});
  all.push_back({"transformer.ln_f.bias", c, 0, Cut::whole, last});
  return all;
}

// How the slices of a tensor cut as `t.cut` join into the whole one (none for a whole tensor):
// what checkpoints record for consolidation.
inline std::optional<zero::TensorParallelSplit> split_of(const TensorSpec& t) {
  switch (t.cut) {
  case Cut::whole:
    return std::nullopt;
  case Cut::rows:
    return zero::TensorParallelSplit{.dimension = 0};
  case Cut::qkv_rows:
    return zero::TensorParallelSplit{.dimension = 0, .blocks = 3};
  case Cut::columns:
    return zero::TensorParallelSplit{.dimension = 1};
  case Cut::vocabulary:
    return zero::TensorParallelSplit{.dimension = 0, .whole_extent = t.rows};
  }
  return std::nullopt;
}

// Every parameter as the engine registers it: this rank's slice of each tensor (the whole tensor
// without tensor parallelism), named as the whole one; the replicated ones marked, so that the
// engine counts them once in the gradient norm.
inline std::vector<zero::ParameterSpec> specs(const Config& config) {
  std::vector<zero::ParameterSpec> all;
  for (const TensorSpec& t : tensor_specs(config)) {
    const auto [rows, cols] = local_shape(config, t.cut, t.rows, t.cols ? t.cols : 1);
    std::vector<std::size_t> shape = t.cols ? std::vector{rows, cols} : std::vector{rows};
    zero::ParameterSpec p{t.name, rows * cols, zero::DType::float32, t.layer, std::move(shape)};
    // The embeddings keep fp32 moments when the others are 8-bit (as bitsandbytes advises).
    p.fp32_moments = t.layer == 0;
    if (config.tensor_parallel > 1) {
      p.replicated_over_tensor_parallel = t.cut == Cut::whole;
      p.tensor_parallel_split = split_of(t);
    }
    all.push_back(std::move(p));
  }
  return all;
}

// Where block_forward leaves, inside `saved`, what block_backward reads: offsets in floats.
struct SavedLayout {
  std::size_t ln1, ln1_mean, ln1_rstd, qkv, att, heads, mid, ln2, ln2_mean, ln2_rstd, fc, gelu;
  std::size_t total;
};
inline SavedLayout saved_layout(const Config& config, std::size_t batch) {
  const std::size_t rows = batch * config.seq, c = config.embd, lc = config.local_embd();
  std::size_t at = 0;
  const auto take = [&at](std::size_t n) { return std::exchange(at, at + n); };
  SavedLayout s;
  s.ln1 = take(rows * c);
  s.ln1_mean = take(rows);
  s.ln1_rstd = take(rows);
  s.qkv = take(rows * 3 * lc);
  s.att = take(batch * config.local_heads() * config.seq * config.seq);
  s.heads = take(rows * lc);
  s.mid = take(rows * c); // x + attention: the residual stream between the two halves
  s.ln2 = take(rows * c);
  s.ln2_mean = take(rows);
  s.ln2_rstd = take(rows);
  s.fc = take(rows * config.local_hidden());
  s.gelu = take(rows * config.local_hidden());
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

// The matrix products of the tensor-parallel layers: OpenBLAS's, a share per thread.
struct Product {
  void operator()(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                  float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                  float beta, float* c, std::size_t ldc) const {
    kernels::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
};

// A block's four linear layers over the group.
template <class Tensor>
struct BlockLayers {
  BlockLayers(Tensor& tensor, const Config& config)
      : attn(tensor, config.embd, 3 * config.embd, Product{}, "--embd x 3 (c_attn's outputs)"),
        attn_proj(tensor, config.embd, config.embd, Product{}, "--embd (c_proj's inputs)"),
        fc(tensor, config.embd, 4 * config.embd, Product{}, "--embd x 4 (c_fc's outputs)"),
        fc_proj(tensor, 4 * config.embd, config.embd, Product{}, "--embd x 4 (c_proj's inputs)") {}
  zero::ColumnParallelLinear<Tensor, Product> attn;
  zero::RowParallelLinear<Tensor, Product> attn_proj;
  zero::ColumnParallelLinear<Tensor, Product> fc;
  zero::RowParallelLinear<Tensor, Product> fc_proj;
};

// The model unsplit: a group of one rank.
inline zero::SelfCommunicator& whole_model() {
  thread_local zero::SelfCommunicator self;
  return self;
}

// x, y: [batch, seq, embd], whole on every rank of the group. `saved` receives
// block_saved_floats() floats.
template <class Tensor>
void block_forward(const Config& config, Tensor& tensor, const float* params, const float* x,
                   float* y, float* saved, std::size_t batch) {
  const BlockWeights w = block_weights(config, params);
  const SavedLayout s = saved_layout(config, batch);
  const std::size_t rows = batch * config.seq, c = config.embd;
  BlockLayers<Tensor> layer(tensor, config);
  using namespace kernels;
  layernorm_forward(x, w.ln1_w, w.ln1_b, saved + s.ln1, saved + s.ln1_mean, saved + s.ln1_rstd,
                    rows, c);
  layer.attn.forward(saved + s.ln1, w.attn_w, w.attn_b, saved + s.qkv, rows);
  attention_forward(saved + s.qkv, saved + s.att, saved + s.heads, batch, config.seq,
                    config.local_embd(), config.local_heads());
  float* mid = saved + s.mid;
  layer.attn_proj.forward(saved + s.heads, w.attn_proj_w, w.attn_proj_b, mid, rows);
  zero::for_each_index(zero::HostThreads{}, rows * c, AddInto{x, mid});
  layernorm_forward(mid, w.ln2_w, w.ln2_b, saved + s.ln2, saved + s.ln2_mean, saved + s.ln2_rstd,
                    rows, c);
  layer.fc.forward(saved + s.ln2, w.fc_w, w.fc_b, saved + s.fc, rows);
  gelu_forward(saved + s.fc, saved + s.gelu, rows * config.local_hidden());
  layer.fc_proj.forward(saved + s.gelu, w.fc_proj_w, w.fc_proj_b, y, rows);
  zero::for_each_index(zero::HostThreads{}, rows * c, AddInto{mid, y});
}
inline void block_forward(const Config& config, const float* params, const float* x, float* y,
                          float* saved, std::size_t batch) {
  block_forward(config, whole_model(), params, x, y, saved, batch);
}

// dy: the gradient of the block's output. Writes dx and dparams (block_parameters() floats),
// both overwritten.
template <class Tensor>
void block_backward(const Config& config, Tensor& tensor, const float* params, const float* x,
                    const float* saved, const float* dy, float* dx, float* dparams,
                    std::size_t batch) {
  const BlockWeights w = block_weights(config, params);
  const BlockGradients g = block_gradients(config, dparams);
  const SavedLayout s = saved_layout(config, batch);
  const std::size_t rows = batch * config.seq, c = config.embd;
  const std::size_t att_floats = batch * config.local_heads() * config.seq * config.seq;
  BlockLayers<Tensor> layer(tensor, config);
  thread_local std::vector<float> buffer;
  float* wide = detail::scratch(buffer, rows * 4 * c + rows * c + att_floats); // 4C, then C
  float* narrow = wide + rows * 4 * c;
  float* att_scratch = narrow + rows * c;
  using namespace kernels;

  // MLP half: y = mid + c_proj(gelu(c_fc(ln_2(mid)))).
  layer.fc_proj.backward(saved + s.gelu, w.fc_proj_w, dy, g.fc_proj_w, g.fc_proj_b, wide, rows);
  gelu_backward(saved + s.fc, wide, wide, rows * config.local_hidden());
  layer.fc.backward(saved + s.ln2, w.fc_w, wide, g.fc_w, g.fc_b, narrow, rows);
  float* dmid = dx; // dx holds the gradient of mid until the attention half is done
  layernorm_backward(saved + s.mid, w.ln2_w, saved + s.ln2_mean, saved + s.ln2_rstd, narrow, dy,
                     dmid, g.ln2_w, g.ln2_b, rows, c);

  // Attention half: mid = x + c_proj(attention(c_attn(ln_1(x)))).
  float* dqkv = wide;
  layer.attn_proj.backward(saved + s.heads, w.attn_proj_w, dmid, g.attn_proj_w, g.attn_proj_b,
                           narrow, rows);
  attention_backward(saved + s.qkv, saved + s.att, narrow, dqkv, att_scratch, batch, config.seq,
                     config.local_embd(), config.local_heads());
  layer.attn.backward(saved + s.ln1, w.attn_w, dqkv, g.attn_w, g.attn_b, narrow, rows);
  layernorm_backward(x, w.ln1_w, saved + s.ln1_mean, saved + s.ln1_rstd, narrow, dmid, dx, g.ln1_w,
                     g.ln1_b, rows, c);
}
inline void block_backward(const Config& config, const float* params, const float* x,
                           const float* saved, const float* dy, float* dx, float* dparams,
                           std::size_t batch) {
  block_backward(config, whole_model(), params, x, saved, dy, dx, dparams, batch);
}

// x[b, t] = wte[tokens[b, t]] + wpe[t]; wte is this rank's rows of the vocabulary.
template <class Tensor>
void embed_forward(const Config& config, Tensor& tensor, const float* wte, const float* wpe,
                   const std::uint8_t* tokens, float* x, std::size_t batch) {
  const std::size_t c = config.embd, rows = batch * config.seq;
  zero::VocabParallelEmbedding<Tensor>(tensor, config.vocab, c).forward(tokens, rows, wte, x);
#pragma omp parallel for schedule(static)
  for (std::size_t r = 0; r < rows; ++r) {
    const float* position = wpe + (r % config.seq) * c;
    for (std::size_t i = 0; i < c; ++i)
      x[r * c + i] += position[i];
  }
}
inline void embed_forward(const Config& config, const float* wte, const float* wpe,
                          const std::uint8_t* tokens, float* x, std::size_t batch) {
  embed_forward(config, whole_model(), wte, wpe, tokens, x, batch);
}

// Adds each token's rows of dx into dwte (this rank's rows, which the tied head wrote first) and
// writes dwpe.
template <class Tensor>
void embed_backward(const Config& config, Tensor& tensor, const std::uint8_t* tokens,
                    const float* dx, float* dwte, float* dwpe, std::size_t batch) {
  const std::size_t c = config.embd, seq = config.seq;
  zero::VocabParallelEmbedding<Tensor>(tensor, config.vocab, c)
      .backward(tokens, batch * seq, dx, dwte);
  zero::for_each_index(zero::HostThreads{}, seq * c,
                       kernels::PositionBackward{dx, dwpe, batch, seq, c});
}
inline void embed_backward(const Config& config, const std::uint8_t* tokens, const float* dx,
                           float* dwte, float* dwpe, std::size_t batch) {
  embed_backward(config, whole_model(), tokens, dx, dwte, dwpe, batch);
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
  float* base = scratch(buffer, rows * (config.embd + 2 + config.local_vocab()));
  head.normalised = base;
  head.mean = base + rows * config.embd;
  head.rstd = head.mean + rows;
  head.logits = head.rstd + rows;
  head.losses.resize(rows);
  return head;
}
// ln_f and the logits of the tied head (this rank's columns of them); returns the sum of the
// token losses, and with `gradient` leaves the gradient of (sum * gradient_scale) in place of the
// logits. One rank takes the whole softmax in the fused kernel; a group, the vocabulary-parallel
// cross-entropy (three all-reduces of one value per row, the logits never gathered).
template <class Tensor>
double head_forward(const Config& config, Tensor& tensor, const float* lnf, const float* wte,
                    const float* x, const std::uint8_t* targets, Head& head, std::size_t batch,
                    bool gradient, float gradient_scale) {
  const std::size_t rows = batch * config.seq, c = config.embd, vocab = config.local_vocab();
  kernels::layernorm_forward(x, lnf, lnf + c, head.normalised, head.mean, head.rstd, rows, c);
  kernels::gemm(false, true, rows, vocab, c, 1.0f, head.normalised, c, wte, c, 0.0f, head.logits,
                vocab);
  if (tensor.size() == 1)
    kernels::cross_entropy(head.logits, targets, head.losses.data(),
                           gradient ? head.logits : nullptr, rows, vocab, gradient_scale);
  else
    zero::vocab_parallel_cross_entropy(
        tensor, zero::VocabularySlice(config.vocab, {tensor.rank(), tensor.size()}), head.logits,
        targets, rows, head.losses.data(), gradient ? head.logits : nullptr, gradient_scale);
  double sum = 0; // in lane order (model_kernels.hpp), whatever the threads
  kernels::LossSum{head.losses.data(), rows, &sum}(0);
  return sum;
}
} // namespace detail

// ln_f, the tied head and the cross-entropy against targets ([batch, seq]); returns the sum of the
// token losses over `normalizer`. Writes (overwrites) dx, dlnf (weight then bias) and dwte (this
// rank's rows), all gradients of that mean times loss_scale.
template <class Tensor>
double head_forward_backward(const Config& config, Tensor& tensor, const float* lnf,
                             const float* wte, const float* x, const std::uint8_t* targets,
                             float* dx, float* dlnf, float* dwte, std::size_t batch,
                             double normalizer, float loss_scale) {
  const std::size_t rows = batch * config.seq, c = config.embd, vocab = config.local_vocab();
  detail::Head& head = detail::head_scratch(config, batch);
  const double sum = detail::head_forward(config, tensor, lnf, wte, x, targets, head, batch, true,
                                          float(double(loss_scale) / normalizer));
  const float* dlogits = head.logits;
  kernels::gemm(true, false, vocab, c, rows, 1.0f, dlogits, vocab, head.normalised, c, 0.0f, dwte,
                c);
  float* dnormalised = head.normalised; // its last reader was the product above
  kernels::gemm(false, false, rows, c, vocab, 1.0f, dlogits, vocab, wte, c, 0.0f, dnormalised, c);
  // The head is column-parallel over the vocabulary: its input's gradient summed over the group.
  zero::EnterTensorParallel::backward(tensor, zero::View<float>(dnormalised, rows * c));
  kernels::layernorm_backward(x, lnf, head.mean, head.rstd, dnormalised, nullptr, dx, dlnf,
                              dlnf + c, rows, c);
  return sum / normalizer;
}
inline double head_forward_backward(const Config& config, const float* lnf, const float* wte,
                                    const float* x, const std::uint8_t* targets, float* dx,
                                    float* dlnf, float* dwte, std::size_t batch, double normalizer,
                                    float loss_scale) {
  return head_forward_backward(config, whole_model(), lnf, wte, x, targets, dx, dlnf, dwte, batch,
                               normalizer, loss_scale);
}

// The same loss, without gradients (evaluation).
template <class Tensor>
double head_loss(const Config& config, Tensor& tensor, const float* lnf, const float* wte,
                 const float* x, const std::uint8_t* targets, std::size_t batch,
                 double normalizer) {
  detail::Head& head = detail::head_scratch(config, batch);
  return detail::head_forward(config, tensor, lnf, wte, x, targets, head, batch, false, 1.0f) /
         normalizer;
}
inline double head_loss(const Config& config, const float* lnf, const float* wte, const float* x,
                        const std::uint8_t* targets, std::size_t batch, double normalizer) {
  return head_loss(config, whole_model(), lnf, wte, x, targets, batch, normalizer);
}

} // namespace gpt
