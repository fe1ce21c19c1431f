#pragma once
// Reduction operators of the collectives. `avg` is the sum divided by the number of ranks
// (integer division for integer elements, as in NCCL).

#include "zero/core/error.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace zero {

enum class ReduceOp : std::uint8_t { sum, avg, max, min };

constexpr const char* to_string(ReduceOp op) noexcept {
  switch (op) {
  case ReduceOp::sum:
    return "sum";
  case ReduceOp::avg:
    return "avg";
  case ReduceOp::max:
    return "max";
  case ReduceOp::min:
    return "min";
  }
  return "?";
}

inline ReduceOp parse_reduce_op(std::string_view name) {
  if (name == "sum") return ReduceOp::sum;
  if (name == "avg") return ReduceOp::avg;
  if (name == "max") return ReduceOp::max;
  if (name == "min") return ReduceOp::min;
  fail(ErrorKind::invalid_argument,
       "unknown reduction '" + std::string(name) + "' (expected sum, avg, max or min)");
}

} // namespace zero
