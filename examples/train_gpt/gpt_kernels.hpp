#pragma once
// The pieces a GPT-2 block is made of, forward and backward, on row-major float matrices: Linear
// layers (OpenBLAS), LayerNorm, GELU (tanh approximation), causal multi-head attention and the
// softmax cross-entropy of the head. Rows are tokens. All threads are OpenMP's: loops over rows
// run on them, and so do matrix products, a share of the result per thread (see gemm).
//
// Every result is a pure function of the inputs: products are split by rows or columns of the
// result, never along the sum, and the element-wise and per-row work is model_kernels.hpp's, whose
// sums take one order whatever the threads (and whatever the execution space). No float sum
// depends on which thread finished first.

#include "model_kernels.hpp"

#include <zero/core/execution_space.hpp>
#include <zero/core/for_each.hpp>

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace gpt::kernels {

// c = alpha op(a) op(b) + beta c, row-major, with c's rows (or its columns, when it has more)
// split among the OpenMP threads and each share one OpenBLAS call on its thread. OpenBLAS's own
// threads would be a second pool, spinning against OpenMP's between calls (three times slower on
// two cores), so OpenBLAS is kept to one thread and the OpenMP threads are the only ones.
inline void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                 float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                 float beta, float* c, std::size_t ldc) {
  static const bool blas_on_one_thread = (openblas_set_num_threads(1), true);
  (void)blas_on_one_thread;
  const auto call = [&](std::size_t rows, std::size_t cols, const float* a_part,
                        const float* b_part, float* c_part) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, int(rows), int(cols), int(k), alpha, a_part,
                int(lda), b_part, int(ldb), beta, c_part, int(ldc));
  };
  const bool split_rows = m >= n;
  const std::size_t extent = split_rows ? m : n;
  const std::size_t parts = std::min<std::size_t>(std::size_t(omp_get_max_threads()),
                                                  std::max<std::size_t>(1, extent / 16));
  if (parts <= 1) {
    call(m, n, a, b, c);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(int(parts))
  for (std::size_t part = 0; part < parts; ++part) {
    // Shares of whole 16-row tiles, so that each call runs OpenBLAS's full-width kernels.
    const std::size_t tiles = (extent + 15) / 16;
    const std::size_t begin = std::min(extent, tiles * part / parts * 16);
    const std::size_t end = std::min(extent, tiles * (part + 1) / parts * 16);
    if (begin == end) continue;
    if (split_rows)
      call(end - begin, n, a + (trans_a ? begin : begin * lda), b, c + begin * ldc);
    else
      call(m, end - begin, a, b + (trans_b ? begin * ldb : begin), c + begin);
  }
}

// sums[c] = sum over rows of m[r, c].
inline void column_sums(const float* m, float* sums, std::size_t rows, std::size_t cols) {
  using zero::HostThreads;
  zero::for_each_index(HostThreads{}, strips<HostThreads>(cols),
                       ColumnSumsStrip<strip_width<HostThreads>>{m, sums, rows, cols});
}

// z = x W^T + b for `rows` rows; W is [out, in] as torch.nn.Linear's.
inline void linear_forward(const float* x, const float* w, const float* b, float* z,
                           std::size_t rows, std::size_t in, std::size_t out) {
#pragma omp parallel for schedule(static)
  for (std::size_t r = 0; r < rows; ++r)
    std::copy(b, b + out, z + r * out);
  gemm(false, true, rows, out, in, 1.0f, x, in, w, in, 1.0f, z, out);
}

// From dz ([rows, out]): dW = dz^T x and db = column sums of dz (both overwritten), and dx = dz W.
inline void linear_backward(const float* x, const float* w, const float* dz, float* dw, float* db,
                            float* dx, std::size_t rows, std::size_t in, std::size_t out) {
  column_sums(dz, db, rows, out);
  gemm(true, false, out, in, rows, 1.0f, dz, out, x, in, 0.0f, dw, in);
  gemm(false, false, rows, in, out, 1.0f, dz, out, w, in, 0.0f, dx, in);
}

// LayerNorm over each row of `cols` (model_kernels.hpp): y, and the mean and 1/sqrt(var + eps)
// the backward pass reads.
inline void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                              float* rstd, std::size_t rows, std::size_t cols) {
  for_each_row(zero::HostThreads{}, rows, LayerNormForwardRow{x, w, b, y, mean, rstd, cols});
}

// From dy: dx = `residual` + the gradient through the normalisation (residual may be dx's own
// values, or null for none), dw and db overwritten.
inline void layernorm_backward(const float* x, const float* w, const float* mean, const float* rstd,
                               const float* dy, const float* residual, float* dx, float* dw,
                               float* db, std::size_t rows, std::size_t cols) {
  for_each_row(zero::HostThreads{}, rows,
               LayerNormBackwardRow{x, w, mean, rstd, dy, residual, dx, cols});
  using zero::HostThreads;
  zero::for_each_index(
      HostThreads{}, strips<HostThreads>(cols),
      LayerNormBackwardStrip<strip_width<HostThreads>>{x, mean, rstd, dy, dw, db, rows, cols});
}

inline void gelu_forward(const float* z, float* a, std::size_t n) {
  zero::for_each_index(zero::HostThreads{}, n, GeluForward{z, a});
}

// dz = da * GELU'(z); dz may be da.
inline void gelu_backward(const float* z, const float* da, float* dz, std::size_t n) {
  zero::for_each_index(zero::HostThreads{}, n, GeluBackward{z, da, dz});
}

// Causal self-attention over `batch` sequences of `seq` tokens. qkv is [batch * seq, 3 * embd]:
// q, k and v side by side, head h in columns h * head_size onwards of each. Writes the softmax
// probabilities (att, [batch, heads, seq, seq], zero above the diagonal) and the heads' outputs
// side by side (out, [batch * seq, embd]).
//
// Each (sequence, head) pair is one thread's work, its products OpenBLAS calls on that thread.
inline void attention_forward(const float* qkv, float* att, float* out, std::size_t batch,
                              std::size_t seq, std::size_t embd, std::size_t heads) {
  const std::size_t head_size = embd / heads, row = 3 * embd;
  const float scale = 1.0f / std::sqrt(float(head_size));
#pragma omp parallel for schedule(static)
  for (std::size_t bh = 0; bh < batch * heads; ++bh) {
    const std::size_t b = bh / heads, h = bh % heads;
    const float* q = qkv + b * seq * row + h * head_size;
    const float* k = q + embd;
    const float* v = q + 2 * embd;
    float* p = att + bh * seq * seq;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(seq), int(seq), int(head_size), scale,
                q, int(row), k, int(row), 0.0f, p, int(seq));
    const CausalSoftmaxRow softmax{p, seq};
    for (std::size_t i = 0; i < seq; ++i)
      softmax(i, SerialLanes{});
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(seq), int(head_size), int(seq), 1.0f,
                p, int(seq), v, int(row), 0.0f, out + b * seq * embd + h * head_size, int(embd));
  }
}

// From dout ([batch * seq, embd]) writes dqkv ([batch * seq, 3 * embd]); `scratch` holds
// batch * heads * seq * seq floats.
inline void attention_backward(const float* qkv, const float* att, const float* dout, float* dqkv,
                               float* scratch, std::size_t batch, std::size_t seq, std::size_t embd,
                               std::size_t heads) {
  const std::size_t head_size = embd / heads, row = 3 * embd;
  const float scale = 1.0f / std::sqrt(float(head_size));
#pragma omp parallel for schedule(static)
  for (std::size_t bh = 0; bh < batch * heads; ++bh) {
    const std::size_t b = bh / heads, h = bh % heads;
    const std::size_t first = b * seq * row + h * head_size;
    const float* q = qkv + first;
    const float* k = q + embd;
    const float* v = q + 2 * embd;
    float* dq = dqkv + first;
    float* dk = dq + embd;
    float* dv = dq + 2 * embd;
    const float* p = att + bh * seq * seq;
    const float* dhead = dout + b * seq * embd + h * head_size;
    float* dp = scratch + bh * seq * seq;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(seq), int(seq), int(head_size), 1.0f,
                dhead, int(embd), v, int(row), 0.0f, dp, int(seq));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(seq), int(head_size), int(seq), 1.0f,
                p, int(seq), dhead, int(embd), 0.0f, dv, int(row));
    // Through the softmax, in place of dp.
    const CausalSoftmaxBackwardRow through_softmax{p, dp, seq};
    for (std::size_t i = 0; i < seq; ++i)
      through_softmax(i, SerialLanes{});
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(seq), int(head_size), int(seq),
                scale, dp, int(seq), k, int(row), 0.0f, dq, int(row));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(seq), int(head_size), int(seq), scale,
                dp, int(seq), q, int(row), 0.0f, dk, int(row));
  }
}

// Softmax cross-entropy of each row of logits ([rows, classes]) against its target class: writes
// each row's loss, and (when dlogits is given) (softmax - one-hot) * gradient_scale, which may
// overwrite the logits.
inline void cross_entropy(const float* logits, const std::uint8_t* targets, double* losses,
                          float* dlogits, std::size_t rows, std::size_t classes,
                          float gradient_scale) {
  for_each_row(zero::HostThreads{}, rows,
               CrossEntropyRow{logits, targets, losses, dlogits, classes, gradient_scale});
}

} // namespace gpt::kernels
