#pragma once
// DynamicMap: the 256 values an 8-bit optimizer state can take, as a fraction of its block's
// absolute maximum: the dynamic quantization of Dettmers et al., "8-bit Optimizers via Block-wise
// Quantization" (arXiv 2110.02861), whose bitsandbytes library calls it create_dynamic_map. Each
// decimal exponent 1e-6, 1e-5, ..., 1 (a decade) holds a run of linearly spaced fractions in
// [0.1, 1] (the midpoints of equal steps), more of them for larger exponents, so that small values
// keep their relative precision as floating point does while large ones get the finer steps:
//   signed (the first moment)     2^i fractions at exponent 1e-6 x 10^i, i = 0..6, each with
//                                 both signs: 2 x 127 values, and 0 and 1;
//   unsigned (the second moment)  2^(i + 1) fractions, the sign bit spent as one more fraction
//                                 bit: 254 values, and 0 and 1.
// The values are computed in double and rounded to float once; sorted ascending, so that a code
// orders as its value does.
//
// quantize() gives each value the code of the nearest map value, ties to the smaller one. The
// decision boundaries between neighbouring values are floats fixed once: within a decade the
// equal steps' edges, lo + j x step computed with one fused multiply-add; between decades, next
// to 0 and next to 1 the midpoint of the two values. A code is the number of boundaries below x
// (for x < 0: the number at or above it, taken from the middle code). That count is computed, not
// searched: the decade by comparing |x| with the six boundaries between decades, the step within
// it by one division estimate corrected against its two neighbouring boundaries; no table lookup,
// so eight values at a time on AVX2 lanes (a table of 256 needs gathers, which cost more than the
// arithmetic here). The lanes and the scalar path compute the same floats in the same order, so
// they give the same codes: checked on every one of the 2^32 floats for both maps when the lanes
// were last changed, and on the boundaries and their neighbours in the tests.
//
// The scalar path is DynamicMapTables::nearest, plain data and one function that CUDA compiles
// too: the device's 8-bit step (src/cuda/quantized_step.cu) runs the host's code on the host's
// constants, so its codes are the host's.

#include "zero/core/bit_cast.hpp"
#include "zero/core/platform.hpp"
#include "zero/core/simd.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>

namespace zero {

// A map's values and decision boundaries as plain data (what a CUDA kernel takes as its argument),
// and the map's scalar quantizer over them.
struct DynamicMapTables {
  static constexpr int decades = 7;

  float values[256];
  // Per decade (8 entries for one AVX2 register; the last unused): where its steps start, their
  // size and its inverse, the last step's index, and the boundaries above 0 before the decade's
  // first (those of the decades below).
  float lo[8], step[8], inverse_step[8];
  int last_step[8], before[8];
  float between[decades - 1]; // between decade d and d + 1
  float first, top;           // next to 0, next to 1
  int negative_count;         // the code of 0: values below it

  // The edge between steps j - 1 and j of a decade (j = 1 .. last_step): one rounding, on every
  // path.
  ZERO_HOST_DEVICE float edge(int decade, int j) const noexcept {
    return fmaf(step[decade], static_cast<float>(j), lo[decade]);
  }

  // The code of the map value nearest to x, a fraction of the block's absolute maximum ([-1, 1],
  // or [0, 1] unsigned: what lies outside maps to the ends).
  ZERO_HOST_DEVICE unsigned char nearest(float x) const noexcept {
    const unsigned bits = detail::bit_cast<unsigned>(x);
    const bool negative = (bits >> 31) != 0;
    const float magnitude = detail::bit_cast<float>(bits & 0x7fffffffu);
    const float a = magnitude < 2.0f ? magnitude : 2.0f; // NaN and beyond: 2, as on the lanes
    // x >= 0 counts the boundaries below a; x < 0 those at or below a (so that ties go down): below
    // the next float above a, which no boundary lies between.
    const float bound = negative ? detail::bit_cast<float>(detail::bit_cast<unsigned>(a) + 1u)
                                 : a; // a is in [0, 2]
    int decade = 0;
    for (int d = 0; d < decades - 1; ++d)
      decade += between[d] < bound ? 1 : 0;
    int j = static_cast<int>((a - lo[decade]) * inverse_step[decade]); // an estimate
    const int last = last_step[decade];
    j = j < 0 ? 0 : (j > last ? last : j);
    if (j < last && edge(decade, j + 1) < bound) ++j;
    if (j > 0 && !(edge(decade, j) < bound)) --j;
    const int is_top = !negative && top < bound ? 1 : 0; // the negative side has no -1
    const int count = first < bound ? 1 + before[decade] + j + is_top : 0;
    const int code = negative ? negative_count - count : negative_count + count;
    return static_cast<unsigned char>(code < 0 ? 0 : (code > 255 ? 255 : code));
  }
};

ZERO_SIMD_BEGIN
class DynamicMap {
 public:
  static constexpr std::size_t size = 256;
  static constexpr int decades = DynamicMapTables::decades;

  explicit DynamicMap(bool is_signed) : signed_(is_signed) {
    DynamicMapTables& t = tables_;
    std::size_t at = 0;
    for (int d = 0; d < decades; ++d) {
      const double scale = std::pow(10.0, d - 6);
      const int fractions = is_signed ? 1 << d : 1 << (d + 1);
      const double step = 0.9 / fractions; // [0.1, 1] in `fractions` equal steps
      for (int j = 0; j < fractions; ++j) {
        const double mean = 0.1 + step * (j + 0.5);
        t.values[at++] = static_cast<float>(scale * mean);
        if (is_signed) t.values[at++] = static_cast<float>(-scale * mean);
      }
      t.lo[d] = static_cast<float>(scale * 0.1);
      t.step[d] = static_cast<float>(scale * step);
      t.inverse_step[d] = 1.0f / t.step[d];
      t.last_step[d] = fractions - 1;
      t.before[d] = d == 0 ? 0 : t.before[d - 1] + t.last_step[d - 1] + 1;
    }
    t.values[at++] = 0.0f;
    t.values[at++] = 1.0f;
    std::sort(std::begin(t.values), std::end(t.values));
    t.negative_count = is_signed ? 127 : 0;
    // The boundaries that are midpoints of two values: next to 0, between decades, next to 1.
    const auto midpoint = [&](std::size_t code) {
      return t.values[code] + (t.values[code + 1] - t.values[code]) / 2.0f;
    };
    const auto zero_code = static_cast<std::size_t>(t.negative_count);
    t.first = midpoint(zero_code);
    for (int d = 1; d < decades; ++d)
      t.between[d - 1] = midpoint(zero_code + static_cast<std::size_t>(t.before[d]));
    t.top = midpoint(size - 2);
  }

  bool is_signed() const noexcept { return signed_; }
  float operator[](std::uint8_t code) const noexcept { return tables_.values[code]; }
  std::span<const float, size> values() const noexcept { return tables_.values; }
  // The values and boundaries as plain data: what the CUDA step takes.
  const DynamicMapTables& tables() const noexcept { return tables_; }

  // The decision boundary between code c and c + 1: x above it is nearer to c + 1's value.
  float boundary(std::uint8_t code) const noexcept {
    const int c = code;
    const int z = tables_.negative_count;
    if (c >= z) return boundary_above(c - z);
    return -boundary_above(z - 1 - c);
  }

  // The code of the map value nearest to x, a fraction of the block's absolute maximum ([-1, 1],
  // or [0, 1] unsigned: what lies outside maps to the ends).
  std::uint8_t nearest(float x) const noexcept { return tables_.nearest(x); }

  // codes[i] = nearest(values[i] x scale) for i < n.
  void quantize(const float* values, std::size_t n, float scale,
                std::uint8_t* codes) const noexcept {
    std::size_t i = 0;
#if defined(ZERO_SIMD_AVX2) || defined(ZERO_SIMD_AVX512)
    const Lanes lanes(tables_);
    const __m256 times = _mm256_set1_ps(scale);
    const auto codes_of = [&](std::size_t at) {
      return lanes.nearest(_mm256_mul_ps(_mm256_loadu_ps(values + at), times));
    };
    // 32 at a time: four registers of codes packed into one store. The packs saturate, which
    // clamps the codes to [0, 255] as code_of() does; they interleave the 128-bit halves, which the
    // permutation puts back in order.
    for (; i + 32 <= n; i += 32) {
      const __m256i low = _mm256_packus_epi32(codes_of(i), codes_of(i + 8));
      const __m256i high = _mm256_packus_epi32(codes_of(i + 16), codes_of(i + 24));
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(low, high),
                                                        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), bytes);
    }
    for (; i + 8 <= n; i += 8) {
      const __m256i code = codes_of(i);
      const __m256i words = _mm256_packus_epi32(code, code); // per 128-bit half: c0..c3 twice
      const __m256i bytes = _mm256_packus_epi16(words, words);
      const auto lo = static_cast<std::uint32_t>(_mm256_extract_epi32(bytes, 0));
      const auto hi = static_cast<std::uint32_t>(_mm256_extract_epi32(bytes, 4));
      const std::uint64_t eight = std::uint64_t{lo} | std::uint64_t{hi} << 32;
      std::memcpy(codes + i, &eight, sizeof eight);
    }
#endif
    for (; i < n; ++i)
      codes[i] = nearest(values[i] * scale);
  }

  // values[i] = map[codes[i]] x scale for i < n.
  void dequantize(const std::uint8_t* codes, std::size_t n, float scale,
                  float* values) const noexcept {
    std::size_t i = 0;
#if defined(ZERO_SIMD_AVX2) || defined(ZERO_SIMD_AVX512)
    const __m256 times = _mm256_set1_ps(scale);
    for (; i + 8 <= n; i += 8) {
      std::int64_t eight;
      std::memcpy(&eight, codes + i, sizeof eight);
      const __m256i index = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(eight));
      _mm256_storeu_ps(values + i,
                       _mm256_mul_ps(_mm256_i32gather_ps(tables_.values, index, 4), times));
    }
#endif
    for (; i < n; ++i)
      values[i] = tables_.values[codes[i]] * scale;
  }

  // The two maps, built once.
  static const DynamicMap& signed_map() {
    static const DynamicMap map(true);
    return map;
  }
  static const DynamicMap& unsigned_map() {
    static const DynamicMap map(false);
    return map;
  }

 private:
  // Boundary k above 0 (k = 0: next to 0), in ascending order.
  float boundary_above(int k) const noexcept {
    const DynamicMapTables& t = tables_;
    if (k == 0) return t.first;
    --k;
    for (int d = 0; d < decades; ++d) {
      if (k < t.last_step[d]) return t.edge(d, k + 1);
      k -= t.last_step[d];
      if (d + 1 < decades) {
        if (k == 0) return t.between[d];
        --k;
      }
    }
    return t.top;
  }

#if defined(ZERO_SIMD_AVX2) || defined(ZERO_SIMD_AVX512)
  // nearest() on eight lanes, with the map's constants in registers: held in a local object, since
  // the codes the caller stores (bytes, which may alias anything) would otherwise make the
  // compiler reload each constant from the map after every store.
  struct Lanes {
    __m256 between[decades - 1];
    __m256 lo, step, inverse_step, first, top;
    __m256i last_step, before, middle;

    explicit Lanes(const DynamicMapTables& t)
        : lo(_mm256_loadu_ps(t.lo)), step(_mm256_loadu_ps(t.step)),
          inverse_step(_mm256_loadu_ps(t.inverse_step)), first(_mm256_set1_ps(t.first)),
          top(_mm256_set1_ps(t.top)),
          last_step(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.last_step))),
          before(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.before))),
          middle(_mm256_set1_epi32(t.negative_count)) {
      for (std::size_t d = 0; d < decades - 1; ++d)
        between[d] = _mm256_set1_ps(t.between[d]);
    }

    // The codes, one per 32-bit lane, not yet clamped below 0 (the caller's packs saturate).
    __m256i nearest(__m256 x) const noexcept {
      const __m256i bits = _mm256_castps_si256(x);
      const __m256 negative = _mm256_castsi256_ps(_mm256_srai_epi32(bits, 31)); // sign: all ones
      const __m256 a = _mm256_min_ps( // NaN and beyond: 2 (minps gives its second operand for NaN)
          _mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff))),
          _mm256_set1_ps(2.0f));
      // As nearest(): boundaries below a for x >= 0, at or below it for x < 0 (below the next
      // float above a). below(b) is all ones where b is counted.
      const __m256 bound = _mm256_castsi256_ps(
          _mm256_sub_epi32(_mm256_castps_si256(a), _mm256_castps_si256(negative)));
      const auto below = [&](__m256 b) { return _mm256_cmp_ps(b, bound, _CMP_LT_OQ); };
      __m256i decade = _mm256_setzero_si256();
      for (const __m256 b : between) // a true lane is -1
        decade = _mm256_sub_epi32(decade, _mm256_castps_si256(below(b)));
      const auto pick = [&](__m256 table) { return _mm256_permutevar8x32_ps(table, decade); };
      const auto pick_int = [&](__m256i table) {
        return _mm256_permutevar8x32_epi32(table, decade);
      };
      const __m256 lo_d = pick(lo), step_d = pick(step);
      const __m256i last = pick_int(last_step);
      __m256i j = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_sub_ps(a, lo_d), pick(inverse_step)));
      j = _mm256_min_epi32(_mm256_max_epi32(j, _mm256_setzero_si256()), last);
      const auto edge_at = [&](__m256i k) {
        return _mm256_fmadd_ps(step_d, _mm256_cvtepi32_ps(k), lo_d);
      };
      const __m256i one = _mm256_set1_epi32(1);
      const __m256i up =
          _mm256_and_si256(_mm256_cmpgt_epi32(last, j),
                           _mm256_castps_si256(below(edge_at(_mm256_add_epi32(j, one)))));
      j = _mm256_sub_epi32(j, up);
      const __m256i down = _mm256_andnot_si256(_mm256_castps_si256(below(edge_at(j))),
                                               _mm256_cmpgt_epi32(j, _mm256_setzero_si256()));
      j = _mm256_add_epi32(j, down);
      const __m256i is_top =
          _mm256_andnot_si256(_mm256_castps_si256(negative), _mm256_castps_si256(below(top)));
      __m256i count =
          _mm256_sub_epi32(_mm256_add_epi32(_mm256_add_epi32(one, pick_int(before)), j), is_top);
      count = _mm256_and_si256(count, _mm256_castps_si256(below(first)));
      return _mm256_blendv_epi8(_mm256_add_epi32(middle, count), _mm256_sub_epi32(middle, count),
                                _mm256_castps_si256(negative));
    }
  };
#endif

  bool signed_;
  DynamicMapTables tables_{};
};
ZERO_SIMD_END

} // namespace zero
