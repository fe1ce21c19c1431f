#pragma once
// What the fuzz targets share: the exception a reader documents for bad input is expected and
// dropped (printed when ZERO_FUZZ_SHOW_ERRORS is set, to read what a user would be told:
// ZERO_FUZZ_SHOW_ERRORS=1 zero_fuzz_NAME FILE), and a promise about what a reader accepted that
// does not hold aborts, which libFuzzer reports as a crash.

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace zero_fuzz {

inline void expected(const std::exception& error) {
  static const bool show = std::getenv("ZERO_FUZZ_SHOW_ERRORS") != nullptr;
  if (show) std::fprintf(stderr, "expected error: %s\n", error.what());
}

inline void promise(bool holds, const char* what) {
  if (holds) return;
  std::fprintf(stderr, "fuzz: a reader accepted input that breaks its promise: %s\n", what);
  std::abort();
}

} // namespace zero_fuzz
