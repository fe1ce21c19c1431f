#pragma once
// How much of a sweep over element types and reductions a test covers: all of it by default;
// with ZERO_TEST_SWEEP=ends only the first and the last of each list (float32 and bfloat16, whose
// reductions accumulate in a float scratch buffer; sum and min). The ThreadSanitizer preset sets
// it: the threads, queues and hand-offs of a collective do not depend on the element type or the
// reduction beyond that (the other builds sweep every one), while under TSan each combination
// costs oversubscribed MPI rounds of tens of milliseconds: the communicator suite at 3 ranks took
// 67 s, most of it in the sweeps.

#include <zero/core/error.hpp>

#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

namespace zero::testing {

inline bool sweep_ends_only() {
  static const bool ends = [] {
    const char* value = std::getenv("ZERO_TEST_SWEEP");
    const std::string v = value ? value : "all";
    if (v != "all" && v != "ends")
      fail(ErrorKind::invalid_argument,
           "ZERO_TEST_SWEEP=" + v + ": expected all (the default) or ends");
    return v == "ends";
  }();
  return ends;
}

// `all`, or its first and last elements under ZERO_TEST_SWEEP=ends.
template <class T, std::size_t N>
std::vector<T> swept(const T (&all)[N]) {
  if (!sweep_ends_only() || N <= 2) return std::vector<T>(all, all + N);
  return {all[0], all[N - 1]};
}

} // namespace zero::testing
