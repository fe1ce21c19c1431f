#pragma once
// Four consecutive elements a thread loads and stores at once: one 16-byte access of fp32 values,
// one 8-byte access of half or bfloat16 ones (element 0 in the low half), as float lanes. The
// caller checks alignment (aligned_for_lanes) and takes the elements one by one where it fails.

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace zero::cuda_kernels {

inline constexpr std::size_t vector_lanes = 4;

template <class T>
__device__ bool aligned_for_lanes(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % (vector_lanes * sizeof(T)) == 0;
}

template <class T>
__device__ void load_lanes(const T* p, float (&out)[vector_lanes]) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x;
    out[1] = v.y;
    out[2] = v.z;
    out[3] = v.w;
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(p); // element 0 in the low half
    out[0] = static_cast<float>(T::from_bits(static_cast<std::uint16_t>(v.x & 0xffffu)));
    out[1] = static_cast<float>(T::from_bits(static_cast<std::uint16_t>(v.x >> 16)));
    out[2] = static_cast<float>(T::from_bits(static_cast<std::uint16_t>(v.y & 0xffffu)));
    out[3] = static_cast<float>(T::from_bits(static_cast<std::uint16_t>(v.y >> 16)));
  }
}

template <class T>
__device__ void store_lanes(T* p, const float (&in)[vector_lanes]) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(p) = make_float4(in[0], in[1], in[2], in[3]);
  } else {
    const auto bits = [&in](int k) { return static_cast<unsigned>(T(in[k]).bits); };
    *reinterpret_cast<uint2*>(p) = make_uint2(bits(0) | (bits(1) << 16), bits(2) | (bits(3) << 16));
  }
}

} // namespace zero::cuda_kernels
