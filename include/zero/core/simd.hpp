#pragma once
// Lanes of float that zero's element-wise functors run on: `float` (host loops' remainders, CUDA
// threads) and, on the host, `vfloat` (16 lanes with AVX-512, 8 with AVX2 + FMA + F16C). A functor
// is written once as a template over the lane type and computes with the operators and the
// functions here, so every lane type rounds the same way:
//  - fma, div and sqrt are correctly rounded on every lane type (no fast-math variants on device);
//  - mul_rounded is a product rounded before it is used. Compilers contract `a * b + c` into one
//    FMA by default (GCC and nvcc do), which rounds once instead of twice; a formula that must
//    match PyTorch bit for bit marks such products so that no build can fuse them.
// Lanes<V> loads and stores float, half and bfloat16 with the rounding of zero::half / bfloat16.

#include "zero/core/bit_cast.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/platform.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

#if !ZERO_DEVICE_CODE && (defined(__AVX512F__) || defined(__AVX2__))
#include <immintrin.h>
#endif

// GCC 12 warns that its own AVX-512 intrinsics read an uninitialised pass-through operand once
// they are inlined (GCC bug 105593). Code that calls intrinsics sits between these two macros.
#if defined(__GNUC__) && !defined(__clang__)
#define ZERO_SIMD_BEGIN                                                                            \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")             \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define ZERO_SIMD_END _Pragma("GCC diagnostic pop")
#else
#define ZERO_SIMD_BEGIN
#define ZERO_SIMD_END
#endif

ZERO_SIMD_BEGIN

#if !ZERO_DEVICE_CODE && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__)
#define ZERO_SIMD_AVX512 1
#elif !ZERO_DEVICE_CODE && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define ZERO_SIMD_AVX2 1
#endif
// AVX-512's byte permutations (VBMI): the 8-bit moments' table lookups without gathers.
#if defined(ZERO_SIMD_AVX512) && defined(__AVX512VBMI__)
#define ZERO_SIMD_AVX512_VBMI 1
#endif

namespace zero::simd {

// ---- float: CUDA threads and the host loops' remainders ----------------------------------------

ZERO_HOST_DEVICE inline float fma(float a, float b, float c) noexcept {
#if ZERO_DEVICE_CODE
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

ZERO_HOST_DEVICE inline float div(float a, float b) noexcept {
#if ZERO_DEVICE_CODE
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

ZERO_HOST_DEVICE inline float sqrt(float a) noexcept {
#if ZERO_DEVICE_CODE
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

ZERO_HOST_DEVICE inline float mul_rounded(float a, float b) noexcept {
#if ZERO_DEVICE_CODE
  return __fmul_rn(a, b);
#else
  float product = a * b;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+x"(product)); // the compiler no longer sees a product it could fuse
#elif defined(__GNUC__) && defined(__aarch64__)
  asm("" : "+w"(product));
#else
  volatile float opaque = product;
  product = opaque;
#endif
  return product;
#endif
}

// NaN or infinity: the exponent bits are all ones. A bit test, so that -ffinite-math-only in a
// consumer's build cannot fold it away.
ZERO_HOST_DEVICE inline bool is_nonfinite(float x) noexcept {
  return (zero::detail::bit_cast<std::uint32_t>(x) & 0x7f800000u) == 0x7f800000u;
}

template <class V>
struct Lanes;

template <>
struct Lanes<float> {
  static constexpr std::size_t width = 1;
  template <class T>
  ZERO_HOST_DEVICE static float load(const T* p) noexcept {
    return convert<float>(*p);
  }
  template <class T>
  ZERO_HOST_DEVICE static void store(T* p, float x) noexcept {
    *p = convert<T>(x);
  }
};

// ---- host vectors ------------------------------------------------------------------------------

#if defined(ZERO_SIMD_AVX512)

struct vfloat {
  __m512 v;
  vfloat() = default;
  vfloat(__m512 x) noexcept : v(x) {}
  explicit vfloat(float x) noexcept : v(_mm512_set1_ps(x)) {}
  friend vfloat operator+(vfloat a, vfloat b) noexcept { return _mm512_add_ps(a.v, b.v); }
  friend vfloat operator-(vfloat a, vfloat b) noexcept { return _mm512_sub_ps(a.v, b.v); }
  friend vfloat operator*(vfloat a, vfloat b) noexcept { return _mm512_mul_ps(a.v, b.v); }
  friend vfloat operator-(vfloat a) noexcept {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(a.v), _mm512_set1_epi32(INT32_MIN)));
  }
};
inline vfloat fma(vfloat a, vfloat b, vfloat c) noexcept {
  return _mm512_fmadd_ps(a.v, b.v, c.v);
}
inline vfloat div(vfloat a, vfloat b) noexcept {
  return _mm512_div_ps(a.v, b.v);
}
inline vfloat sqrt(vfloat a) noexcept {
  return _mm512_sqrt_ps(a.v);
}
// The embedded-rounding form is a builtin the compiler does not contract.
inline vfloat mul_rounded(vfloat a, vfloat b) noexcept {
  return _mm512_mul_round_ps(a.v, b.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// Lanes (among those of `active`) holding NaN or infinity.
inline __mmask16 nonfinite_lanes(vfloat a) noexcept {
  return _mm512_fpclass_ps_mask(a.v, 0x01 | 0x08 | 0x10 | 0x80); // QNaN, +Inf, -Inf, SNaN
}

using lane_mask = __mmask16;

namespace detail {
inline __m512i bfloat16_round_bits(__m512 x) noexcept { // the formula of zero::bfloat16(float)
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_fpclass_ps_mask(x, 0x01 | 0x80);
  return _mm512_mask_mov_epi32(rounded, nan, quiet_nan);
}
} // namespace detail

template <>
struct Lanes<vfloat> {
  static constexpr std::size_t width = 16;
  static lane_mask first(std::size_t count) noexcept {
    return static_cast<lane_mask>((1u << count) - 1u); // count < 16
  }

  static vfloat load(const float* p) noexcept { return _mm512_loadu_ps(p); }
  static vfloat load(const half* p) noexcept {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static vfloat load(const bfloat16* p) noexcept {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static vfloat load(const float* p, lane_mask m) noexcept { return _mm512_maskz_loadu_ps(m, p); }
  static vfloat load(const half* p, lane_mask m) noexcept {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
  static vfloat load(const bfloat16* p, lane_mask m) noexcept {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }

  static void store(float* p, vfloat x) noexcept { _mm512_storeu_ps(p, x.v); }
  static void store(half* p, vfloat x) noexcept {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(p, x));
  }
  static void store(bfloat16* p, vfloat x) noexcept {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(p, x));
  }
  static void store(float* p, vfloat x, lane_mask m) noexcept { _mm512_mask_storeu_ps(p, m, x.v); }
  static void store(half* p, vfloat x, lane_mask m) noexcept {
    _mm256_mask_storeu_epi16(p, m, narrow(p, x));
  }
  static void store(bfloat16* p, vfloat x, lane_mask m) noexcept {
    _mm256_mask_storeu_epi16(p, m, narrow(p, x));
  }

  // A non-temporal store of 16 half or bfloat16 values to a 32-byte aligned p: for a large output
  // that nothing reads soon, it saves the read of the line a normal store would first make.
  // Needs an _mm_sfence() before other threads may read the data.
  template <class T>
  static void stream(T* p, vfloat x) noexcept {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), narrow(p, x));
  }

 private:
  static __m256i narrow(const half*, vfloat x) noexcept {
    return _mm512_cvtps_ph(x.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static __m256i narrow(const bfloat16*, vfloat x) noexcept {
    return _mm512_cvtepi32_epi16(detail::bfloat16_round_bits(x.v));
  }
};

#elif defined(ZERO_SIMD_AVX2)

struct vfloat {
  __m256 v;
  vfloat() = default;
  vfloat(__m256 x) noexcept : v(x) {}
  explicit vfloat(float x) noexcept : v(_mm256_set1_ps(x)) {}
  friend vfloat operator+(vfloat a, vfloat b) noexcept { return _mm256_add_ps(a.v, b.v); }
  friend vfloat operator-(vfloat a, vfloat b) noexcept { return _mm256_sub_ps(a.v, b.v); }
  friend vfloat operator*(vfloat a, vfloat b) noexcept { return _mm256_mul_ps(a.v, b.v); }
  friend vfloat operator-(vfloat a) noexcept { return _mm256_xor_ps(a.v, _mm256_set1_ps(-0.0f)); }
};
inline vfloat fma(vfloat a, vfloat b, vfloat c) noexcept {
  return _mm256_fmadd_ps(a.v, b.v, c.v);
}
inline vfloat div(vfloat a, vfloat b) noexcept {
  return _mm256_div_ps(a.v, b.v);
}
inline vfloat sqrt(vfloat a) noexcept {
  return _mm256_sqrt_ps(a.v);
}
inline vfloat mul_rounded(vfloat a, vfloat b) noexcept {
  __m256 product = _mm256_mul_ps(a.v, b.v);
  asm("" : "+x"(product));
  return product;
}
inline unsigned nonfinite_lanes(vfloat a) noexcept {
  const __m256i exponent = _mm256_set1_epi32(0x7f800000);
  const __m256i bits = _mm256_and_si256(_mm256_castps_si256(a.v), exponent);
  return static_cast<unsigned>(
      _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(bits, exponent))));
}

template <>
struct Lanes<vfloat> {
  static constexpr std::size_t width = 8;

  static vfloat load(const float* p) noexcept { return _mm256_loadu_ps(p); }
  static vfloat load(const half* p) noexcept {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static vfloat load(const bfloat16* p) noexcept {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }

  static void store(float* p, vfloat x) noexcept { _mm256_storeu_ps(p, x.v); }
  static void store(half* p, vfloat x) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(x.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static void store(bfloat16* p, vfloat x) noexcept { // zero::bfloat16(float), lane by lane
    const __m256i bits = _mm256_castps_si256(x.v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    const __m256i result = _mm256_blendv_epi8(rounded, quiet_nan, nan);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(result, result), 0xd8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
};

#endif

#if defined(ZERO_SIMD_AVX512) || defined(ZERO_SIMD_AVX2)
inline constexpr bool has_vector_lanes = true;
#else
inline constexpr bool has_vector_lanes = false;
#endif

} // namespace zero::simd

ZERO_SIMD_END
