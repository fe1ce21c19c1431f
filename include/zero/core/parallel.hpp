#pragma once
// The host loops' threading: one contiguous range per OpenMP thread (a static schedule), so that
// each core streams through its own part of every buffer and the hardware prefetchers see long
// runs. Range boundaries fall on multiples of `grain` elements (a cache line of fp32), so two
// threads never write the same line. Small inputs, nested calls and builds without OpenMP run
// on the calling thread.

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace zero::detail {

// Below this many elements a parallel region costs more than it saves.
inline constexpr std::size_t parallel_threshold = std::size_t{1} << 15;

// Elements per thread boundary: 64 bytes of fp32.
inline constexpr std::size_t parallel_grain = 16;

// The most threads parallel_ranges can use (an upper bound for per-thread result slots).
inline int parallel_max_threads() noexcept {
#if defined(_OPENMP)
  return omp_in_parallel() ? 1 : std::max(1, omp_get_max_threads());
#else
  return 1;
#endif
}

// [begin, end) of thread `index` out of `threads` over n elements.
inline std::pair<std::size_t, std::size_t> thread_range(std::size_t n, int index,
                                                        int threads) noexcept {
  const std::size_t t = static_cast<std::size_t>(threads);
  std::size_t per_thread = (n + t - 1) / t;
  per_thread = (per_thread + parallel_grain - 1) / parallel_grain * parallel_grain;
  const std::size_t begin = std::min(n, per_thread * static_cast<std::size_t>(index));
  return {begin, std::min(n, begin + per_thread)};
}

// Calls body(begin, end, thread_index) once per thread; the ranges cover [0, n) in order of
// thread_index, and thread_index < parallel_max_threads(). body must not throw.
template <class Body>
void parallel_ranges(std::size_t n, Body&& body) {
#if defined(_OPENMP)
  if (n >= parallel_threshold && parallel_max_threads() > 1) {
#pragma omp parallel
    {
      const auto [begin, end] = thread_range(n, omp_get_thread_num(), omp_get_num_threads());
      body(begin, end, omp_get_thread_num());
    }
    return;
  }
#endif
  body(std::size_t{0}, n, 0);
}

// partial(data + begin, end - begin) on every thread's range of data[0, n), the results folded in
// thread order: combine(...combine(combine(init, r_0), r_1)..., r_last), init standing in for a
// thread without a range. A given thread count therefore always gives the same result, bit for
// bit for floating-point sums too. partial must not throw.
template <class T, class Element, class Partial, class Combine>
T parallel_reduce(Element* data, std::size_t n, T init, Partial&& partial, Combine&& combine) {
  struct Slot { // not std::vector<bool>, whose elements share words that threads would race on
    T value;
  };
  std::vector<Slot> partials(static_cast<std::size_t>(parallel_max_threads()), Slot{init});
  parallel_ranges(n, [&](std::size_t begin, std::size_t end, int thread) noexcept {
    partials[static_cast<std::size_t>(thread)].value = partial(data + begin, end - begin);
  });
  T result = init;
  for (const Slot& slot : partials)
    result = combine(result, slot.value);
  return result;
}

} // namespace zero::detail
