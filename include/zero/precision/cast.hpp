#pragma once
// Master-weight casts on the host: the fp32 master weights to their half/bfloat16 compute copy
// (when training starts or after loading a checkpoint; each step writes the copy itself, see
// optim/fused_step.hpp), and low-precision values back to fp32. The conversions are core's
// convert_n (F16C for half, round to nearest even, subnormals kept), one range per thread.

#include "zero/core/convert.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/parallel.hpp"
#include "zero/core/view.hpp"

#include <cstddef>
#include <string>
#include <type_traits>

namespace zero {

// dst[i] = convert<To>(src[i]) for every element; src and dst have the same size.
template <class From, class To, HostAccessibleSpace Space>
requires Element<std::remove_const_t<From>> && Element<To>
void cast_copy(View<From, Space> src, View<To, Space> dst) {
  if (src.size() != dst.size())
    fail(ErrorKind::invalid_argument, "cast_copy: the source has " + std::to_string(src.size()) +
                                          " elements, the destination " +
                                          std::to_string(dst.size()));
  const auto* in = src.data();
  auto* out = dst.data();
  detail::parallel_ranges(src.size(), [in, out](std::size_t begin, std::size_t end, int) noexcept {
    convert_n(in + begin, out + begin, end - begin);
  });
}

} // namespace zero
