#pragma once
// How much of a sweep over element types and reductions a test covers, from ZERO_TEST_SWEEP:
//   all     every one (the default);
//   widths  of element types, the first of each width (1, 2, 4 and 8 bytes: the offsets and
//           lengths a transport computes depend on the width; collectives_test's list keeps
//           float32, float64, uint8 and float16); every reduction (avg and max have code of their
//           own in some transports);
//   ends    the first and the last of each list (float32 and bfloat16, whose reductions accumulate
//           in a float scratch buffer; sum and min).
// The sanitizer presets narrow the sweeps where what they check does not depend on the rest:
// ThreadSanitizer runs every communicator test with `ends` (threads, queues and hand-offs are the
// same for every type and reduction; each combination costs oversubscribed MPI rounds of tens of
// milliseconds there, and the suite at 3 ranks took 67 s, most of it in the sweeps), and
// AddressSanitizer runs the four transport variants of zero_test_collectives (Open MPI's
// algorithms, tiny chunks, the MPI transport, two nodes) with `widths`, after the default
// transports' full sweep at 1 and 3 ranks. The dev build sweeps everything everywhere.

#include <zero/core/dtype.hpp>
#include <zero/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

namespace zero::testing {

enum class Sweep { all, widths, ends };

// ZERO_TEST_SWEEP's value (null: unset, the full sweep); anything else is refused by name.
inline Sweep parse_sweep(const char* value) {
  const std::string v = value ? value : "all";
  if (v == "all") return Sweep::all;
  if (v == "widths") return Sweep::widths;
  if (v == "ends") return Sweep::ends;
  fail(ErrorKind::invalid_argument,
       "ZERO_TEST_SWEEP=" + v + ": expected all (the default), widths or ends");
}

inline Sweep sweep() {
  static const Sweep chosen = parse_sweep(std::getenv("ZERO_TEST_SWEEP"));
  return chosen;
}

// The part of `all` that sweep `s` covers (tests/support/sweep_test.cpp).
template <class T, std::size_t N>
std::vector<T> swept(const T (&all)[N], Sweep s) {
  if (s == Sweep::all || N <= 2) return std::vector<T>(all, all + N);
  if (s == Sweep::ends) return {all[0], all[N - 1]};
  if constexpr (std::is_same_v<T, DType>) {
    std::vector<DType> kept;
    for (DType d : all)
      if (std::ranges::none_of(kept, [&](DType k) { return size_of(k) == size_of(d); }))
        kept.push_back(d);
    return kept;
  } else {
    return std::vector<T>(all, all + N);
  }
}

// The part of `all` that this run's ZERO_TEST_SWEEP covers.
template <class T, std::size_t N>
std::vector<T> swept(const T (&all)[N]) {
  return swept(all, sweep());
}

} // namespace zero::testing
