#pragma once
// The CUDA units' one switch from a DType to the C++ type their kernels are instantiated with: a
// gradient's and a compute copy's (float, half or bfloat16; a copy may be none). Any other
// type is refused with an error that names the call.

#include "zero/core/bfloat16.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/half.hpp"

#include <string>

namespace zero::cuda_kernels {

// The compute copy's type in a call that writes none.
struct NoCopy {};

// f(T{}) for the T among Allowed that `type` names; any other type fails with "what: rule, not
// TYPE".
template <class... Allowed, class F>
void with_one_of(DType type, const char* what, const char* rule, F&& f) {
  const bool allowed = ((type == dtype_of<Allowed> && (f(Allowed{}), true)) || ...);
  if (!allowed)
    fail(ErrorKind::invalid_argument, std::string(what) + ": " + rule + ", not " + to_string(type));
}

// f(G{}), G the C++ type of gradients of type `type`; `what` names the call in the error.
template <class F>
void with_gradient_type(DType type, const char* what, F&& f) {
  with_one_of<float, half, bfloat16>(type, what, "gradients must be float, half or bfloat16", f);
}

// f(Out{}), Out the C++ type of a compute copy of type `type` (an fp32 run's copy is float), or
// NoCopy where the call writes none (`has_copy` false, whatever `type` says).
template <class F>
void with_copy_type(DType type, bool has_copy, const char* what, F&& f) {
  if (!has_copy) return f(NoCopy{});
  with_one_of<float, half, bfloat16>(type, what, "the compute copy must be float, half or bfloat16",
                                     f);
}

} // namespace zero::cuda_kernels
