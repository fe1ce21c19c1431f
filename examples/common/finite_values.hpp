#pragma once
// The examples' inputs must be finite: a NaN or infinity in the data overflows every step at any
// loss scale, and a run would only learn of it as skipped steps. Readers call this on what they
// read, so that such a file is refused by name, row and column.

#include <zero/core/error.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <string>

namespace examples {

// `values` is row-major with `columns` values per row (1 for a vector).
inline void require_finite(const std::string& path, std::span<const float> values,
                           std::size_t columns) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isfinite(values[i])) continue;
    const std::size_t c = columns == 0 ? 1 : columns;
    zero::fail(zero::ErrorKind::invalid_argument, path + ": row " + std::to_string(i / c) +
                                                      ", column " + std::to_string(i % c) + " is " +
                                                      (std::isnan(values[i]) ? "NaN"
                                                       : values[i] > 0       ? "+inf"
                                                                             : "-inf") +
                                                      "; every value must be finite");
  }
}

} // namespace examples
