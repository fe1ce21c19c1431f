#pragma once
// The pieces a GPT-2 block is made of, forward and backward, on row-major float matrices: Linear
// layers (OpenBLAS), LayerNorm, GELU (tanh approximation), causal multi-head attention and the
// softmax cross-entropy of the head. Rows are tokens. All threads are OpenMP's: loops over rows
// run on them, and so do matrix products, a share of the result per thread (see gemm).
//
// Every result is a pure function of the inputs: products are split by rows or columns of the
// result, never along the sum, and sums over rows (bias and LayerNorm gradients, embedding
// gradients) give each column to one thread, which adds the rows in order. No float sum depends on
// which thread finished first.

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace gpt::kernels {

// Columns are summed in strips of this many floats (a 64-byte line), one strip per thread, so
// that the threads never write the same line and every sum adds the rows in the same order.
inline constexpr std::size_t column_strip = 16;

inline std::size_t strips(std::size_t cols) {
  return (cols + column_strip - 1) / column_strip;
}

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
#pragma omp parallel for schedule(static)
  for (std::size_t s = 0; s < strips(cols); ++s) {
    const std::size_t begin = s * column_strip, end = std::min(cols, begin + column_strip);
    float strip[column_strip] = {};
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = begin; c < end; ++c)
        strip[c - begin] += m[r * cols + c];
    std::copy(strip, strip + (end - begin), sums + begin);
  }
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

inline constexpr double layernorm_eps = 1e-5;

// y = (x - mean) / sqrt(var + eps) * w + b per row of `cols`; keeps mean and 1/sqrt(var + eps)
// for the backward pass. The statistics are taken in double so that they do not drift from
// torch's with the width.
inline void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                              float* rstd, std::size_t rows, std::size_t cols) {
#pragma omp parallel for schedule(static)
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::size_t c = 0; c < cols; ++c)
      sum += xr[c];
    const double m = sum / double(cols);
    double squares = 0;
#pragma omp simd reduction(+ : squares)
    for (std::size_t c = 0; c < cols; ++c)
      squares += (xr[c] - m) * (xr[c] - m);
    const double s = 1.0 / std::sqrt(squares / double(cols) + layernorm_eps);
    const float mf = float(m), sf = float(s);
    float* yr = y + r * cols;
    for (std::size_t c = 0; c < cols; ++c)
      yr[c] = (xr[c] - mf) * sf * w[c] + b[c];
    mean[r] = mf;
    rstd[r] = sf;
  }
}

// From dy: dx = `residual` + the gradient through the normalisation (residual may be dx's own
// values, or null for none), dw and db overwritten.
inline void layernorm_backward(const float* x, const float* w, const float* mean, const float* rstd,
                               const float* dy, const float* residual, float* dx, float* dw,
                               float* db, std::size_t rows, std::size_t cols) {
#pragma omp parallel for schedule(static)
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    // With xhat the normalised row and g = dy * w: dx = rstd * (g - mean(g) - xhat * mean(g *
    // xhat)).
    float g_sum = 0, gx_sum = 0;
#pragma omp simd reduction(+ : g_sum, gx_sum)
    for (std::size_t c = 0; c < cols; ++c) {
      const float g = dyr[c] * w[c];
      g_sum += g;
      gx_sum += g * (xr[c] - mean[r]) * rstd[r];
    }
    const float g_mean = g_sum / float(cols), gx_mean = gx_sum / float(cols);
    float* dxr = dx + r * cols;
    for (std::size_t c = 0; c < cols; ++c) {
      const float normalised = (xr[c] - mean[r]) * rstd[r];
      const float through = rstd[r] * (dyr[c] * w[c] - g_mean - normalised * gx_mean);
      dxr[c] = (residual ? residual[r * cols + c] : 0.0f) + through;
    }
  }
#pragma omp parallel for schedule(static)
  for (std::size_t s = 0; s < strips(cols); ++s) {
    const std::size_t begin = s * column_strip, end = std::min(cols, begin + column_strip);
    float w_strip[column_strip] = {}, b_strip[column_strip] = {};
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = begin; c < end; ++c) {
        w_strip[c - begin] += dy[r * cols + c] * (x[r * cols + c] - mean[r]) * rstd[r];
        b_strip[c - begin] += dy[r * cols + c];
      }
    std::copy(w_strip, w_strip + (end - begin), dw + begin);
    std::copy(b_strip, b_strip + (end - begin), db + begin);
  }
}

// e^x in float, in a form the compiler turns into SIMD code (glibc's expf and tanhf are scalar
// calls, and were most of a step's time): Cephes' expf, within 2 ulp of e^x. The range is
// clamped so that 2^n stays a normal float (e^-87 stands for anything smaller); NaN stays NaN, so
// that overflow checks downstream still see it.
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  // n = round(x / ln 2): adding 1.5 * 2^23 leaves n, as an integer, in the low mantissa bits.
  constexpr float round_shift = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + round_shift;
  const float n = shifted - round_shift;
  const std::int32_t n_bits =
      std::bit_cast<std::int32_t>(shifted) - std::bit_cast<std::int32_t>(round_shift);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f; // x - n ln 2, in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((n_bits + 127) << 23); // p * 2^n
}

// GELU's tanh approximation (torch's approximate='tanh'): 0.5 z (1 + tanh(u)) with
// u = k (z + 0.044715 z^3), computed as z * sigmoid(2u), which is the same function.
inline constexpr float gelu_k = 0.7978845608028654f; // sqrt(2 / pi)
inline constexpr float gelu_cubic = 0.044715f;

inline void gelu_forward(const float* z, float* a, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const float u = gelu_k * (z[i] + gelu_cubic * z[i] * z[i] * z[i]);
    a[i] = z[i] / (1.0f + fast_exp(-2.0f * u));
  }
}

// dz = da * GELU'(z); dz may be da. With s = sigmoid(2u) = 0.5 (1 + tanh(u)):
// GELU' = s + z * 2 s (1 - s) * du/dz.
inline void gelu_backward(const float* z, const float* da, float* dz, std::size_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const float x = z[i];
    const float s = 1.0f / (1.0f + fast_exp(-2.0f * gelu_k * (x + gelu_cubic * x * x * x)));
    const float du = gelu_k * (1.0f + 3.0f * gelu_cubic * x * x);
    dz[i] = da[i] * (s + 2.0f * x * s * (1.0f - s) * du);
  }
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
    for (std::size_t i = 0; i < seq; ++i) {
      float* pi = p + i * seq;
      float top = pi[0];
#pragma omp simd reduction(max : top)
      for (std::size_t j = 1; j <= i; ++j)
        top = std::max(top, pi[j]);
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (std::size_t j = 0; j <= i; ++j) {
        pi[j] = fast_exp(pi[j] - top);
        sum += pi[j];
      }
      const float inverse = 1.0f / sum;
      for (std::size_t j = 0; j <= i; ++j)
        pi[j] *= inverse;
      std::fill(pi + i + 1, pi + seq, 0.0f);
    }
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
    // Through the softmax: ds_ij = p_ij (dp_ij - sum_j' p_ij' dp_ij'); zero where p is masked.
    for (std::size_t i = 0; i < seq; ++i) {
      const float* pi = p + i * seq;
      float* di = dp + i * seq;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (std::size_t j = 0; j <= i; ++j)
        dot += pi[j] * di[j];
      for (std::size_t j = 0; j <= i; ++j)
        di[j] = pi[j] * (di[j] - dot);
      std::fill(di + i + 1, di + seq, 0.0f);
    }
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
#pragma omp parallel for schedule(static)
  for (std::size_t r = 0; r < rows; ++r) {
    const float* lr = logits + r * classes;
    float top = lr[0];
#pragma omp simd reduction(max : top)
    for (std::size_t c = 1; c < classes; ++c)
      top = std::max(top, lr[c]);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::size_t c = 0; c < classes; ++c)
      sum += double(fast_exp(lr[c] - top));
    const double log_sum = std::log(sum);
    losses[r] = log_sum - double(lr[targets[r]] - top);
    if (!dlogits) continue;
    const float inverse = float(1.0 / sum);
    const float target_logit = lr[targets[r]];
    float* dr = dlogits + r * classes;
    for (std::size_t c = 0; c < classes; ++c)
      dr[c] = fast_exp(lr[c] - top) * inverse * gradient_scale;
    dr[targets[r]] = (fast_exp(target_logit - top) * inverse - 1.0f) * gradient_scale;
  }
}

} // namespace gpt::kernels
