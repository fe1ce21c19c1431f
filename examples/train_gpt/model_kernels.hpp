#pragma once
// The GPT's element-wise and per-row work, written once for every execution space: each kernel is
// an object whose call operator handles one index (an element, a row, a strip of columns), run by
// zero::for_each_index over HostThreads (the host model, gpt_kernels.hpp), over a host stream
// space (DeviceTwinSpace: the device model's arithmetic on the CPU, in CI) and over
// CudaStreamSpace (device_kernels.cu, with zero/core/cuda_for_each.cuh). The matrix products are
// not here: OpenBLAS on the host, cuBLAS on a device.
//
// Summation orders, which every space follows, so that the spaces give the same sums:
// - Along a row (LayerNorm's statistics and its backward's two sums, the softmax's denominator and
//   its backward's dot product, the cross-entropy's log-sum-exp): lane order. Element c goes to
//   lane c mod 32, each lane adds its elements in increasing c, and the 32 lanes are then added
//   pairwise by halving (lane j += lane j + 16 for j < 16, then j + 8, ..., 1). That is a CUDA
//   warp's order when lane j of the warp reads elements j, j + 32, ... and the lanes combine with
//   __shfl_xor_sync over 16, 8, 4, 2, 1 (float addition commutes exactly, so every lane ends with
//   the same sum), and a host loop over 32 accumulators vectorises it.
// - Down a column (bias gradients, LayerNorm's weight and bias gradients, the embeddings'
//   gradients): the rows in increasing order, one column per call on a device (a warp then reads
//   32 neighbouring columns of a row at once), a strip of 16 per call on the host (one cache line
//   of a row at a time). Each column's sum is the same either way.
// - The loss: the rows' losses (double) in lane order.
//
// Where the host compiler or nvcc fuses a multiply and an add (-march=native on the host, nvcc's
// default --fmad=true), the last bits can differ between a CPU and a GPU; the host space and the
// twin share one compiler and agree bit for bit.

#include <zero/core/bit_cast.hpp>
#include <zero/core/execution_space.hpp>
#include <zero/core/host_stream_space.hpp>
#include <zero/core/platform.hpp>

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>

namespace gpt::kernels {

// --- Sums in lane order ---------------------------------------------------------------------

inline constexpr std::size_t lanes = 32;

// The sum of term(c) for c in [0, n), in lane order (above).
template <class T, class Term>
ZERO_HOST_DEVICE T lane_sum(std::size_t n, const Term& term) {
  T lane[lanes] = {};
  std::size_t c = 0;
  for (; c + lanes <= n; c += lanes)
    for (std::size_t j = 0; j < lanes; ++j)
      lane[j] += term(c + j);
  for (std::size_t j = 0; c + j < n; ++j)
    lane[j] += term(c + j);
  for (std::size_t width = lanes / 2; width > 0; width /= 2)
    for (std::size_t j = 0; j < width; ++j)
      lane[j] += lane[j + width];
  return lane[0];
}

// --- Element-wise math ---------------------------------------------------------------------

// e^x in float, in a form the host compiler turns into SIMD code (glibc's expf is a scalar call)
// and a device runs as it is: Cephes' expf, within 2 ulp of e^x. The range is clamped so that 2^n
// stays a normal float (e^-87 stands for anything smaller); NaN stays NaN, so that overflow
// checks downstream still see it.
ZERO_HOST_DEVICE inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  // n = round(x / ln 2): adding 1.5 * 2^23 leaves n, as an integer, in the low mantissa bits.
  constexpr float round_shift = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + round_shift;
  const float n = shifted - round_shift;
  const std::int32_t n_bits = zero::detail::bit_cast<std::int32_t>(shifted) -
                              zero::detail::bit_cast<std::int32_t>(round_shift);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f; // x - n ln 2, in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * zero::detail::bit_cast<float>((n_bits + 127) << 23); // p * 2^n
}

// GELU's tanh approximation (torch's approximate='tanh'): 0.5 z (1 + tanh(u)) with
// u = k (z + 0.044715 z^3), computed as z * sigmoid(2u), which is the same function.
inline constexpr float gelu_k = 0.7978845608028654f; // sqrt(2 / pi)
inline constexpr float gelu_cubic = 0.044715f;

// a = GELU(z).
struct GeluForward {
  static constexpr bool elementwise = true;
  const float* z;
  float* a;
  ZERO_HOST_DEVICE void operator()(std::size_t i) const {
    const float u = gelu_k * (z[i] + gelu_cubic * z[i] * z[i] * z[i]);
    a[i] = z[i] / (1.0f + fast_exp(-2.0f * u));
  }
};

// dz = da * GELU'(z); dz may be da. With s = sigmoid(2u) = 0.5 (1 + tanh(u)):
// GELU' = s + z * 2 s (1 - s) * du/dz.
struct GeluBackward {
  static constexpr bool elementwise = true;
  const float* z;
  const float* da;
  float* dz;
  ZERO_HOST_DEVICE void operator()(std::size_t i) const {
    const float x = z[i];
    const float s = 1.0f / (1.0f + fast_exp(-2.0f * gelu_k * (x + gelu_cubic * x * x * x)));
    const float du = gelu_k * (1.0f + 3.0f * gelu_cubic * x * x);
    dz[i] = da[i] * (s + 2.0f * x * s * (1.0f - s) * du);
  }
};

// to[i] += from[i]: the residual stream.
struct AddInto {
  static constexpr bool elementwise = true;
  const float* from;
  float* to;
  ZERO_HOST_DEVICE void operator()(std::size_t i) const { to[i] += from[i]; }
};

// Row r of y ([rows, cols]) = b: a linear layer's bias, before the product adds x W^T to it.
struct BroadcastRows {
  static constexpr bool elementwise = true;
  const float* b;
  float* y;
  std::size_t cols;
  ZERO_HOST_DEVICE void operator()(std::size_t i) const { y[i] = b[i % cols]; }
};

// --- Embeddings ----------------------------------------------------------------------------

// Row r of x ([rows, cols]) = wte[tokens[r]] + wpe[r mod seq]. The tokens were checked against
// the vocabulary where they were read.
struct EmbedRow {
  const float* wte;
  const float* wpe;
  const std::uint8_t* tokens;
  float* x;
  std::size_t cols, seq;
  ZERO_HOST_DEVICE void operator()(std::size_t r) const {
    const float* token = wte + std::size_t(tokens[r]) * cols;
    const float* position = wpe + (r % seq) * cols;
    for (std::size_t c = 0; c < cols; ++c)
      x[r * cols + c] = token[c] + position[c];
  }
};

// Column strip s of dwte: each token's row of dx added into its row of dwte (which the tied head
// wrote first), the rows of dx in order.
template <std::size_t Width>
struct EmbeddingBackwardStrip {
  const std::uint8_t* tokens;
  const float* dx;
  float* dwte;
  std::size_t rows, cols;
  ZERO_HOST_DEVICE void operator()(std::size_t s) const {
    const std::size_t begin = s * Width, end = begin + Width < cols ? begin + Width : cols;
    for (std::size_t r = 0; r < rows; ++r) {
      float* row = dwte + std::size_t(tokens[r]) * cols;
      for (std::size_t c = begin; c < end; ++c)
        row[c] += dx[r * cols + c];
    }
  }
};

// dwpe[t, c] = the sum over sequences b, in order, of dx[b, t, c]: one element per call.
struct PositionBackward {
  static constexpr bool elementwise = true;
  const float* dx;
  float* dwpe;
  std::size_t batch, seq, cols;
  ZERO_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t t = i / cols, c = i % cols;
    float sum = 0.0f;
    for (std::size_t b = 0; b < batch; ++b)
      sum += dx[(b * seq + t) * cols + c];
    dwpe[i] = sum;
  }
};

// --- Column sums ---------------------------------------------------------------------------

// sums[c] = the sum over rows, in order, of m[r, c], for the columns of strip s.
template <std::size_t Width>
struct ColumnSumsStrip {
  const float* m;
  float* sums;
  std::size_t rows, cols;
  ZERO_HOST_DEVICE void operator()(std::size_t s) const {
    const std::size_t begin = s * Width, end = begin + Width < cols ? begin + Width : cols;
    float strip[Width] = {};
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = begin; c < end; ++c)
        strip[c - begin] += m[r * cols + c];
    for (std::size_t c = begin; c < end; ++c)
      sums[c] = strip[c - begin];
  }
};

// --- LayerNorm -----------------------------------------------------------------------------

inline constexpr double layernorm_eps = 1e-5;

// Row r: y = (x - mean) / sqrt(var + eps) * w + b; keeps mean and 1/sqrt(var + eps) for the
// backward pass. The statistics are taken in double so that they do not drift from torch's with
// the width.
struct LayerNormForwardRow {
  const float* x;
  const float* w;
  const float* b;
  float* y;
  float* mean;
  float* rstd;
  std::size_t cols;
  ZERO_HOST_DEVICE void operator()(std::size_t r) const {
    const float* xr = x + r * cols;
    const double m =
        lane_sum<double>(cols, [xr](std::size_t c) { return double(xr[c]); }) / double(cols);
    const double squares = lane_sum<double>(cols, [xr, m](std::size_t c) {
      const double d = double(xr[c]) - m;
      return d * d;
    });
    const double s = 1.0 / std::sqrt(squares / double(cols) + layernorm_eps);
    const float mf = float(m), sf = float(s);
    float* yr = y + r * cols;
    for (std::size_t c = 0; c < cols; ++c)
      yr[c] = (xr[c] - mf) * sf * w[c] + b[c];
    mean[r] = mf;
    rstd[r] = sf;
  }
};

// Row r of dx = residual (when not null; it may be dx's own row) + the gradient through the
// normalisation. With xhat the normalised row and g = dy * w:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
struct LayerNormBackwardRow {
  const float* x;
  const float* w;
  const float* mean;
  const float* rstd;
  const float* dy;
  const float* residual;
  float* dx;
  std::size_t cols;
  ZERO_HOST_DEVICE void operator()(std::size_t r) const {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    const float mr = mean[r], sr = rstd[r];
    const float g_sum = lane_sum<float>(cols, [=, this](std::size_t c) { return dyr[c] * w[c]; });
    const float gx_sum = lane_sum<float>(
        cols, [=, this](std::size_t c) { return dyr[c] * w[c] * ((xr[c] - mr) * sr); });
    const float g_mean = g_sum / float(cols), gx_mean = gx_sum / float(cols);
    float* dxr = dx + r * cols;
    for (std::size_t c = 0; c < cols; ++c) {
      const float normalised = (xr[c] - mr) * sr;
      const float through = sr * (dyr[c] * w[c] - g_mean - normalised * gx_mean);
      dxr[c] = (residual ? residual[r * cols + c] : 0.0f) + through;
    }
  }
};

// Strip s of dw and db: dw[c] = sum over rows of dy * xhat, db[c] = sum over rows of dy.
template <std::size_t Width>
struct LayerNormBackwardStrip {
  const float* x;
  const float* mean;
  const float* rstd;
  const float* dy;
  float* dw;
  float* db;
  std::size_t rows, cols;
  ZERO_HOST_DEVICE void operator()(std::size_t s) const {
    const std::size_t begin = s * Width, end = begin + Width < cols ? begin + Width : cols;
    float w_strip[Width] = {}, b_strip[Width] = {};
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = begin; c < end; ++c) {
        w_strip[c - begin] += dy[r * cols + c] * ((x[r * cols + c] - mean[r]) * rstd[r]);
        b_strip[c - begin] += dy[r * cols + c];
      }
    for (std::size_t c = begin; c < end; ++c) {
      dw[c] = w_strip[c - begin];
      db[c] = b_strip[c - begin];
    }
  }
};

// --- Causal softmax ------------------------------------------------------------------------

// Row r of the attention scores p ([groups, seq, seq], a group per sequence and head): position
// i = r mod seq attends to 0..i. Softmax over those, zeros above the diagonal.
struct CausalSoftmaxRow {
  float* p;
  std::size_t seq;
  ZERO_HOST_DEVICE void operator()(std::size_t r) const {
    const std::size_t i = r % seq;
    float* pi = p + r * seq;
    float top = pi[0];
    for (std::size_t j = 1; j <= i; ++j)
      top = top < pi[j] ? pi[j] : top;
    for (std::size_t j = 0; j <= i; ++j)
      pi[j] = fast_exp(pi[j] - top);
    const float sum = lane_sum<float>(i + 1, [pi](std::size_t j) { return pi[j]; });
    const float inverse = 1.0f / sum;
    for (std::size_t j = 0; j <= i; ++j)
      pi[j] *= inverse;
    for (std::size_t j = i + 1; j < seq; ++j)
      pi[j] = 0.0f;
  }
};

// Row r through the softmax: ds_ij = p_ij (dp_ij - sum_j' p_ij' dp_ij'), in place of dp; zero
// where p is masked.
struct CausalSoftmaxBackwardRow {
  const float* p;
  float* dp;
  std::size_t seq;
  ZERO_HOST_DEVICE void operator()(std::size_t r) const {
    const std::size_t i = r % seq;
    const float* pi = p + r * seq;
    float* di = dp + r * seq;
    const float dot = lane_sum<float>(i + 1, [pi, di](std::size_t j) { return pi[j] * di[j]; });
    for (std::size_t j = 0; j <= i; ++j)
      di[j] = pi[j] * (di[j] - dot);
    for (std::size_t j = i + 1; j < seq; ++j)
      di[j] = 0.0f;
  }
};

// --- The loss ------------------------------------------------------------------------------

// Row r of the logits ([rows, classes]) against its target class: writes the row's loss and,
// when dlogits is not null, (softmax - one-hot) * gradient_scale, which may overwrite the logits.
struct CrossEntropyRow {
  const float* logits;
  const std::uint8_t* targets;
  double* losses;
  float* dlogits;
  std::size_t classes;
  float gradient_scale;
  ZERO_HOST_DEVICE void operator()(std::size_t r) const {
    const float* lr = logits + r * classes;
    float top = lr[0];
    for (std::size_t c = 1; c < classes; ++c)
      top = top < lr[c] ? lr[c] : top;
    const double sum = lane_sum<double>(
        classes, [lr, top](std::size_t c) { return double(fast_exp(lr[c] - top)); });
    const std::size_t target = targets[r];
    const float target_logit = lr[target];
    losses[r] = std::log(sum) - double(target_logit - top);
    if (!dlogits) return;
    const float inverse = float(1.0 / sum);
    float* dr = dlogits + r * classes;
    for (std::size_t c = 0; c < classes; ++c)
      dr[c] = fast_exp(lr[c] - top) * inverse * gradient_scale;
    dr[target] = (fast_exp(target_logit - top) * inverse - 1.0f) * gradient_scale;
  }
};

// *sum = the rows' losses added in lane order: one call (a device's single thread; the loss is
// one number per step).
struct LossSum {
  const double* losses;
  std::size_t rows;
  double* sum;
  ZERO_HOST_DEVICE void operator()(std::size_t) const {
    *sum = lane_sum<double>(rows, [this](std::size_t r) { return losses[r]; });
  }
};

// --- Launches over an execution space --------------------------------------------------------

// Columns per call of a strip kernel: a cache line on the host, one column on a device.
template <class Exec>
inline constexpr std::size_t strip_width =
    std::same_as<Exec, zero::HostThreads> || zero::HostStreamBased<Exec> ? 16 : 1;

template <class Exec>
std::size_t strips(std::size_t cols) {
  return (cols + strip_width<Exec> - 1) / strip_width<Exec>;
}

} // namespace gpt::kernels
