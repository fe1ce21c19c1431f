#pragma once
// Gradient clipping by the global L2 norm: each rank sums the squares of its shard in fp64, one
// all-reduce adds the partial sums, and every rank derives the same norm and clipping coefficient.
//
// A NaN or infinite gradient makes the sum of squares NaN or infinite (squares are never
// negative, and finite fp32 squares cannot overflow fp64), so the norm doubles as an overflow
// check: when clipping is on, one pass and one all-reduce give both. The norm is returned as it
// is, NaN or infinite included, with `finite` saying so; nothing is clamped or hidden.

#include "zero/comm/communicator.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/parallel.hpp"
#include "zero/core/simd.hpp"
#include "zero/core/view.hpp"
#include "zero/precision/overflow.hpp"

#include <array>
#include <cmath>
#include <cstddef>
#include <functional>
#include <span>
#include <type_traits>
#include <vector>

namespace zero {

ZERO_SIMD_BEGIN
namespace detail {
template <class G>
double sum_of_squares_n(const G* data, std::size_t n) noexcept {
  std::size_t i = 0;
  double sum = 0.0;
#if defined(ZERO_SIMD_AVX512)
  using L = simd::Lanes<simd::vfloat>;
  // Four independent accumulators hide the FMA latency; the loop stays memory-bound.
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(),
                    _mm512_setzero_pd()};
  const auto accumulate = [&acc](__m512 x, int slot) {
    const __m512d low = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d high = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1));
    acc[slot] = _mm512_fmadd_pd(low, low, acc[slot]);
    acc[slot + 1] = _mm512_fmadd_pd(high, high, acc[slot + 1]);
  };
  for (; i + 32 <= n; i += 32) {
    accumulate(L::load(data + i).v, 0);
    accumulate(L::load(data + i + 16).v, 2);
  }
  if (i + 16 <= n) {
    accumulate(L::load(data + i).v, 0);
    i += 16;
  }
  if (i < n) {
    accumulate(L::load(data + i, L::first(n - i)).v, 2);
    i = n;
  }
  sum = _mm512_reduce_add_pd(
      _mm512_add_pd(_mm512_add_pd(acc[0], acc[1]), _mm512_add_pd(acc[2], acc[3])));
#elif defined(ZERO_SIMD_AVX2)
  using L = simd::Lanes<simd::vfloat>;
  __m256d acc[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};
  for (; i + 8 <= n; i += 8) {
    const __m256 x = L::load(data + i).v;
    const __m256d low = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    const __m256d high = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    acc[0] = _mm256_fmadd_pd(low, low, acc[0]);
    acc[1] = _mm256_fmadd_pd(high, high, acc[1]);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc[0], acc[1]));
  sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#endif
  for (; i < n; ++i) {
    const double x = static_cast<double>(simd::Lanes<float>::load(data + i));
    sum += x * x;
  }
  return sum;
}
} // namespace detail
ZERO_SIMD_END

// The sum of the squares of a gradient buffer, accumulated in fp64. NaN or infinite when any
// element is. Threads' partial sums are added in a fixed order, so a given thread count always
// gives the same bits.
template <class G, HostAccessibleSpace Space>
requires GradientElement<std::remove_const_t<G>>
[[nodiscard]] double sum_of_squares(View<G, Space> grads) {
  return detail::parallel_reduce(grads.data(), grads.size(), 0.0,
                                 detail::sum_of_squares_n<std::remove_const_t<G>>, std::plus<>{});
}

struct GradNorm {
  double norm = 0.0;  // the global L2 norm of the (unscaled) gradients; NaN or infinite on overflow
  bool finite = true; // false when norm is NaN or infinite
};

// The L2 norm of a sum of squares of gradients that are still multiplied by the loss scale:
// sqrt(sum) * |grad_multiplier| (grad_multiplier = 1 / loss scale).
[[nodiscard]] inline GradNorm grad_norm_from_sum_of_squares(double sum_of_squares,
                                                            double grad_multiplier = 1.0) {
  const double norm = std::sqrt(sum_of_squares) * std::fabs(grad_multiplier);
  return {norm, std::isfinite(norm)};
}

// The global norm over all ranks' shards: all-reduces (sum) each rank's local sum of squares.
// A collective: every rank must call it, and every rank gets the same result.
template <ReducingCommunicator Comm>
requires HostAccessibleSpace<typename Comm::memory_space>
[[nodiscard]] GradNorm global_grad_norm(Comm& comm, double local_sum_of_squares,
                                        double grad_multiplier = 1.0) {
  std::array<double, 1> sum{local_sum_of_squares};
  comm.all_reduce(sum, ReduceOp::sum).wait();
  return grad_norm_from_sum_of_squares(sum[0], grad_multiplier);
}

// The global norm under tensor parallelism: each rank's sum over its shard (the parameters every
// tensor rank holds whole counted by one of them only) is all-reduced over `shard`, the ranks
// holding the same slices, then the tensor-parallel group's sums are added in tensor-rank order on
// every rank alike (gathered, not all-reduced: the bits cannot depend on a reduction's order), so
// that every rank of the grid clips, skips and scales alike. A collective over both groups.
template <ReducingCommunicator Comm, GatheringCommunicator Tensor>
requires HostAccessibleSpace<typename Comm::memory_space> &&
    HostAccessibleSpace<typename Tensor::memory_space>
[[nodiscard]] GradNorm global_grad_norm(Comm& shard, Tensor& tensor, double local_sum_of_squares,
                                        double grad_multiplier = 1.0) {
  std::array<double, 1> sum{local_sum_of_squares};
  shard.all_reduce(sum, ReduceOp::sum).wait();
  std::vector<double> sums(static_cast<std::size_t>(tensor.size()));
  tensor.all_gather(std::span<const double>(sum), sums).wait();
  double total = 0.0;
  for (double s : sums)
    total += s;
  return grad_norm_from_sum_of_squares(total, grad_multiplier);
}

// torch.nn.utils.clip_grad_norm_'s coefficient: max_norm / (norm + 1e-6), at most 1. NaN when
// the norm is NaN or infinite (PyTorch gives 0 for an infinite norm, which would silently zero
// the gradients): clipping never turns an overflow into a valid-looking step.
// The optimizer step takes grad_multiplier = clip_coefficient(...) / loss scale.
[[nodiscard]] inline double clip_coefficient(const GradNorm& norm, double max_norm) {
  require(max_norm > 0.0 && std::isfinite(max_norm),
          "clip_coefficient: max_norm must be positive and finite");
  if (!norm.finite) return std::nan("");
  const double coefficient = max_norm / (norm.norm + 1e-6);
  return coefficient < 1.0 ? coefficient : 1.0;
}

} // namespace zero
