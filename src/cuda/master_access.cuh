#pragma once
// Where a step kernel's master weights come from and go: an fp32 array (and the compute copy it
// is rounded into, where the call writes one), or split masters (optim/split_master_rule.hpp),
// read from the compute copy and a residual array and split back into both. The step kernels
// load and store masters through Masters<Out, R> only, so that one kernel body serves both
// representations, a thread's four consecutive elements at once (16-byte fp32, 8-byte half and
// bfloat16, 4- or 8-byte residual accesses) or one by one.

#include "dtype_dispatch.cuh"
#include "vector_lanes.cuh"

#include "zero/optim/split_master_rule.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace zero::cuda_kernels {

// The residual type of a call over fp32 masters.
struct NoResidual {};

// Four consecutive elements of T as one aligned access.
template <class T>
struct alignas(vector_lanes * sizeof(T)) FourOf {
  T at[vector_lanes];
};

template <class Out, class R>
struct Masters;

// fp32 masters, and the compute copy (Out; NoCopy: none) written from them.
template <class Out>
struct Masters<Out, NoResidual> {
  static constexpr bool copy = !std::is_same_v<Out, NoCopy>;
  float* master;
  Out* out;

  __device__ Masters(float* m, void* compute, void*, std::size_t begin)
      : master(m + begin), out(copy ? static_cast<Out*>(compute) + begin : nullptr) {}
  __device__ bool aligned() const {
    if constexpr (copy) return aligned_for_lanes<float>(master) && aligned_for_lanes<Out>(out);
    return aligned_for_lanes<float>(master);
  }
  __device__ void load(std::size_t i, float (&param)[vector_lanes]) const {
    load_lanes(master + i, param);
  }
  __device__ void store(std::size_t i, const float (&param)[vector_lanes]) const {
    store_lanes(master + i, param);
    if constexpr (copy) store_lanes(out + i, param);
  }
  __device__ float load(std::size_t i) const { return master[i]; }
  __device__ void store(std::size_t i, float param) const {
    master[i] = param;
    if constexpr (copy) out[i] = Out(param);
  }
};

// Split masters: the compute copy (Out, read and written) and residuals of R.
template <class Out, SplitResidual R>
struct Masters<Out, R> {
  static_assert(SplitComputeType<Out>, "split masters need a half or bfloat16 compute copy");
  Out* weights;
  R* residuals;

  __device__ Masters(float*, void* compute, void* r, std::size_t begin)
      : weights(static_cast<Out*>(compute) + begin), residuals(static_cast<R*>(r) + begin) {}
  __device__ bool aligned() const {
    return aligned_for_lanes<Out>(weights) && aligned_for_lanes<R>(residuals);
  }
  __device__ void load(std::size_t i, float (&param)[vector_lanes]) const {
    const FourOf<Out> w = *reinterpret_cast<const FourOf<Out>*>(weights + i);
    const FourOf<R> r = *reinterpret_cast<const FourOf<R>*>(residuals + i);
#pragma unroll
    for (std::size_t lane = 0; lane < vector_lanes; ++lane)
      param[lane] = reconstruct_master(w.at[lane], r.at[lane]);
  }
  __device__ void store(std::size_t i, const float (&param)[vector_lanes]) const {
    FourOf<Out> w;
    FourOf<R> r;
#pragma unroll
    for (std::size_t lane = 0; lane < vector_lanes; ++lane)
      split_master(param[lane], w.at[lane], r.at[lane]);
    *reinterpret_cast<FourOf<Out>*>(weights + i) = w;
    *reinterpret_cast<FourOf<R>*>(residuals + i) = r;
  }
  __device__ float load(std::size_t i) const {
    return reconstruct_master(weights[i], residuals[i]);
  }
  __device__ void store(std::size_t i, float param) const {
    split_master(param, weights[i], residuals[i]);
  }
};

// f(R{}): the residual type of `bits` (0: fp32 masters, NoResidual); `what` names the call.
template <class F>
void with_residual_type(int bits, const char* what, F&& f) {
  if (bits == 0) return f(NoResidual{});
  if (bits == 8) return f(std::int8_t{});
  if (bits == 16) return f(std::int16_t{});
  fail(ErrorKind::invalid_argument,
       std::string(what) + ": residuals have 8 or 16 bits, not " + std::to_string(bits));
}

// Whether a step kernel over gradients G, compute copy Out and residuals R exists. Split masters
// keep a half or bfloat16 compute copy; a float one is an fp32 run's, whose gradients are float,
// so its other pairings are left uncompiled (each would be a kernel nothing calls).
template <class G, class Out, class R>
inline constexpr bool step_kernel_exists = (std::is_same_v<R, NoResidual> ||
                                            SplitComputeType<Out>)&&(!std::is_same_v<Out, float> ||
                                                                     std::is_same_v<G, float>);

// Refuses, naming the call, the pairings step_kernel_exists leaves out.
template <class G, class Out, class R>
void require_step_kernel(const char* what) {
  if constexpr (!std::is_same_v<R, NoResidual> && !SplitComputeType<Out>)
    fail(ErrorKind::invalid_argument,
         std::string(what) + ": split masters need a half or bfloat16 compute copy");
  else if constexpr (!step_kernel_exists<G, Out, R>)
    fail(ErrorKind::invalid_argument,
         std::string(what) + ": a float compute copy is written from float gradients only");
}

} // namespace zero::cuda_kernels
