#pragma once
// The GPT's element-wise and per-row work, written once for every execution space: each kernel is
// an object whose call operator handles one index (an element, a strip of columns), run by
// zero::for_each_index over HostThreads (the host model, gpt_kernels.hpp), over a host stream
// space (DeviceTwinSpace: the device model's arithmetic on the CPU, in CI) and over
// CudaStreamSpace (device_model.cu, with zero/core/cuda_for_each.cuh). A row kernel's call
// operator takes a row and its lanes (below), and for_each_row runs it: one thread plays the 32
// lanes in turn on the host and the twin, a warp's 32 threads are the lanes on a GPU
// (row_kernels.cuh), so that a warp reads 32 neighbouring elements of its row at once. The matrix
// products are not here: OpenBLAS on the host, cuBLAS on a device.
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
#include <zero/core/for_each.hpp>
#include <zero/core/host_stream_space.hpp>
#include <zero/core/memory_space.hpp>
#include <zero/core/platform.hpp>

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>

namespace gpt::kernels {

// --- Sums in lane order ---------------------------------------------------------------------

inline constexpr std::size_t lane_count = 32;

// The sum of term(c) for c in [0, n), in lane order (above).
template <class T, class Term>
ZERO_HOST_DEVICE T lane_sum(std::size_t n, const Term& term) {
  T lane[lane_count] = {};
  std::size_t c = 0;
  for (; c + lane_count <= n; c += lane_count)
    for (std::size_t j = 0; j < lane_count; ++j)
      lane[j] += term(c + j);
  for (std::size_t j = 0; c + j < n; ++j)
    lane[j] += term(c + j);
  for (std::size_t width = lane_count / 2; width > 0; width /= 2)
    for (std::size_t j = 0; j < width; ++j)
      lane[j] += lane[j + width];
  return lane[0];
}

// A row's 32 lanes, played in turn by one thread (the host, the twin): lane j takes the row's
// elements j, j + 32, ... A CUDA warp's lanes (WarpLanes, row_kernels.cuh) give the same sums and
// maxima. A row kernel reads in a sum, a maximum or for_each only the elements of its own lane, or
// calls sync() between reading another lane's elements and writing over them; the row's own
// scalars (its mean, its loss) are written by the leader.
struct SerialLanes {
  template <class T, class Term>
  ZERO_HOST_DEVICE T sum(std::size_t n, const Term& term) const {
    return lane_sum<T>(n, term);
  }
  // The largest term(c), c in [0, n), n > 0.
  template <class T, class Term>
  ZERO_HOST_DEVICE T max(std::size_t n, const Term& term) const {
    T top = term(0);
    for (std::size_t c = 1; c < n; ++c)
      top = top < term(c) ? term(c) : top;
    return top;
  }
  template <class F>
  ZERO_HOST_DEVICE void for_each(std::size_t n, const F& f) const {
    for (std::size_t c = 0; c < n; ++c)
      f(c);
  }
  ZERO_HOST_DEVICE bool leader() const { return true; }
  ZERO_HOST_DEVICE void sync() const {}
};

template <class K>
concept RowKernel = requires(const K& kernel, std::size_t r) {
  kernel(r, SerialLanes{});
};

// A row kernel as for_each_index runs it: a row per call, its lanes played in turn.
template <RowKernel K>
struct EachRow {
  K kernel;
  ZERO_HOST_DEVICE void operator()(std::size_t r) const { kernel(r, SerialLanes{}); }
};

// Runs kernel(r, lanes) for every row r < rows over `space`. A space of CUDA memory has its own, a
// warp per row (row_kernels.cuh): without that header this does not compile for it, rather than
// run a thread per row.
template <zero::ExecutionSpace Space, RowKernel K>
requires(!std::same_as<typename Space::memory_space, zero::cuda>) void for_each_row(
    const Space& space, std::size_t rows, const K& kernel) {
  zero::for_each_index(space, rows, EachRow<K>{kernel});
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
  template <class Lanes>
  ZERO_HOST_DEVICE void operator()(std::size_t r, const Lanes& lanes) const {
    const float* token = wte + std::size_t(tokens[r]) * cols;
    const float* position = wpe + (r % seq) * cols;
    float* xr = x + r * cols;
    lanes.for_each(cols, [=](std::size_t c) { xr[c] = token[c] + position[c]; });
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
  template <class Lanes>
  ZERO_HOST_DEVICE void operator()(std::size_t r, const Lanes& lanes) const {
    const float* xr = x + r * cols;
    const double m = lanes.template sum<double>(cols, [xr](std::size_t c) {
      return double(xr[c]);
    }) / double(cols);
    const double squares = lanes.template sum<double>(cols, [xr, m](std::size_t c) {
      const double d = double(xr[c]) - m;
      return d * d;
    });
    const double s = 1.0 / std::sqrt(squares / double(cols) + layernorm_eps);
    const float mf = float(m), sf = float(s);
    float* yr = y + r * cols;
    const float *wc = w, *bc = b;
    lanes.for_each(cols, [=](std::size_t c) { yr[c] = (xr[c] - mf) * sf * wc[c] + bc[c]; });
    if (lanes.leader()) {
      mean[r] = mf;
      rstd[r] = sf;
    }
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
  template <class Lanes>
  ZERO_HOST_DEVICE void operator()(std::size_t r, const Lanes& lanes) const {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    const float* wc = w;
    const float mr = mean[r], sr = rstd[r];
    const float g_sum =
        lanes.template sum<float>(cols, [=](std::size_t c) { return dyr[c] * wc[c]; });
    const float gx_sum = lanes.template sum<float>(
        cols, [=](std::size_t c) { return dyr[c] * wc[c] * ((xr[c] - mr) * sr); });
    const float g_mean = g_sum / float(cols), gx_mean = gx_sum / float(cols);
    float* dxr = dx + r * cols;
    const float* rr = residual ? residual + r * cols : nullptr;
    // Each lane rewrites only the elements its sums read (dx may be dy, or the residual).
    lanes.for_each(cols, [=](std::size_t c) {
      const float normalised = (xr[c] - mr) * sr;
      const float through = sr * (dyr[c] * wc[c] - g_mean - normalised * gx_mean);
      dxr[c] = (rr ? rr[c] : 0.0f) + through;
    });
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
  template <class Lanes>
  ZERO_HOST_DEVICE void operator()(std::size_t r, const Lanes& lanes) const {
    const std::size_t i = r % seq;
    float* pi = p + r * seq;
    const float top = lanes.template max<float>(i + 1, [pi](std::size_t j) { return pi[j]; });
    lanes.sync(); // every lane read element 0: now it may be overwritten
    lanes.for_each(i + 1, [=](std::size_t j) { pi[j] = fast_exp(pi[j] - top); });
    const float sum = lanes.template sum<float>(i + 1, [pi](std::size_t j) { return pi[j]; });
    const float inverse = 1.0f / sum;
    lanes.for_each(seq, [=](std::size_t j) { pi[j] = j <= i ? pi[j] * inverse : 0.0f; });
  }
};

// Row r through the softmax: ds_ij = p_ij (dp_ij - sum_j' p_ij' dp_ij'), in place of dp; zero
// where p is masked.
struct CausalSoftmaxBackwardRow {
  const float* p;
  float* dp;
  std::size_t seq;
  template <class Lanes>
  ZERO_HOST_DEVICE void operator()(std::size_t r, const Lanes& lanes) const {
    const std::size_t i = r % seq;
    const float* pi = p + r * seq;
    float* di = dp + r * seq;
    const float dot =
        lanes.template sum<float>(i + 1, [pi, di](std::size_t j) { return pi[j] * di[j]; });
    lanes.for_each(seq, [=](std::size_t j) { di[j] = j <= i ? pi[j] * (di[j] - dot) : 0.0f; });
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
  template <class Lanes>
  ZERO_HOST_DEVICE void operator()(std::size_t r, const Lanes& lanes) const {
    const float* lr = logits + r * classes;
    const float top = lanes.template max<float>(classes, [lr](std::size_t c) { return lr[c]; });
    const double sum = lanes.template sum<double>(
        classes, [lr, top](std::size_t c) { return double(fast_exp(lr[c] - top)); });
    const std::size_t target = targets[r];
    const float target_logit = lr[target];
    if (lanes.leader()) losses[r] = std::log(sum) - double(target_logit - top);
    if (!dlogits) return;
    lanes.sync(); // every lane read the target's logit and element 0: dlogits may overwrite them
    const float inverse = float(1.0 / sum), scale = gradient_scale;
    float* dr = dlogits + r * classes;
    lanes.for_each(classes, [=](std::size_t c) {
      const float softmax = fast_exp(lr[c] - top) * inverse;
      dr[c] = (c == target ? softmax - 1.0f : softmax) * scale;
    });
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
