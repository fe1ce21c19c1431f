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
// (for x < 0: the number at or above it, taken from the middle code). The scalar path computes
// that count: the decade by comparing |x| with the six boundaries between decades, the step within
// it by one division estimate corrected against its two neighbouring boundaries. The AVX2 lanes
// look it up: a float's sign, exponent and top 7 mantissa bits name a cell (its 16 upper bits),
// and no cell of either map holds two boundaries (the constructor checks it), so a table of the
// boundaries below each cell and the low 16 bits of the one inside it gives the count with one
// gather and one compare, eight values at a time (0.50 ns a value against 0.89 for the same count
// computed on the lanes, one Zen 3 core). The lanes and the scalar path gave the same codes on
// every one of the 2^32 floats for both maps when the lanes were last changed; the tests check
// the boundaries and their neighbours.
//
// dequantize() looks the values up: with AVX-512's byte permutations (VBMI) in tables held in
// registers, 64 codes at a time and no gather (0.18 against 0.38 ns a value with AVX2's gather,
// one Zen 4 core); else eight at a time with a gather. Either gives map[code] x scale exactly.
//
// The scalar path is DynamicMapTables::nearest, plain data and one function that CUDA compiles
// too: the device's 8-bit step (src/cuda/quantized_step.cu) runs the host's code on the host's
// constants, so its codes are the host's.

#include "zero/core/bit_cast.hpp"
#include "zero/core/platform.hpp"
#include "zero/core/simd.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>
#include <stdexcept>

namespace zero {

// A map's values and decision boundaries as plain data (what a CUDA kernel takes as its argument),
// and the map's scalar quantizer over them.
struct DynamicMapTables {
  static constexpr int decades = 7;

  float values[256];
  // Per decade (8 entries, the last unused): where its steps start, their size and its inverse,
  // the last step's index, and the boundaries above 0 before the decade's first (those of the
  // decades below).
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
    build_cells();
    build_value_bytes();
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
    const Lanes lanes(*this);
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
#if defined(ZERO_SIMD_AVX512_VBMI)
    const ValueLanes lanes(*this);
    const __m512 times16 = _mm512_set1_ps(scale);
    for (; i + 64 <= n; i += 64) {
      __m512 sixteen[4];
      lanes.values(_mm512_loadu_si512(codes + i), sixteen);
      for (std::size_t r = 0; r < 4; ++r)
        _mm512_storeu_ps(values + i + 16 * r, _mm512_mul_ps(sixteen[r], times16));
    }
#endif
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

#if defined(ZERO_SIMD_AVX512_VBMI)
  // The values of 64 codes without a gather: byte b of the 256 values is a table of 256 bytes in
  // four registers, and vpermi2b looks 64 codes up in two of them at once (a code's low 7 bits
  // index 128 bytes), so four tables of bytes give the four bytes of each value, which unpacking
  // interleaves into floats. Unpacking works within each 128-bit quarter, so the codes are first
  // put in the order that makes the floats come out in the codes' order.
  struct ValueLanes {
    // Output register r, quarter l, float k holds code 16r + 4l + k; unpacking takes it from
    // byte 16l + 4r + k of the codes.
    static constexpr std::array<std::uint8_t, 64> unpack_order = [] {
      std::array<std::uint8_t, 64> from{};
      for (std::size_t l = 0; l < 4; ++l)
        for (std::size_t r = 0; r < 4; ++r)
          for (std::size_t k = 0; k < 4; ++k)
            from[16 * l + 4 * r + k] = static_cast<std::uint8_t>(16 * r + 4 * l + k);
      return from;
    }();

    __m512i bytes[4][4]; // bytes[b][q]: byte b (0: the lowest) of values 64q .. 64q + 63
    __m512i order = _mm512_loadu_si512(unpack_order.data());

    explicit ValueLanes(const DynamicMap& map) noexcept {
      for (std::size_t b = 0; b < 4; ++b)
        for (std::size_t q = 0; q < 4; ++q)
          bytes[b][q] = _mm512_load_si512(map.value_bytes_.data() + size * b + 64 * q);
    }

    // out[r] = the values of codes 16r .. 16r + 15.
    void values(__m512i codes, __m512 out[4]) const noexcept {
      const __m512i c = _mm512_permutexvar_epi8(order, codes);
      const __mmask64 upper_half = _mm512_movepi8_mask(c); // codes 128 and above
      __m512i byte[4];
      for (std::size_t b = 0; b < 4; ++b)
        byte[b] = _mm512_mask_blend_epi8(upper_half,
                                         _mm512_permutex2var_epi8(bytes[b][0], c, bytes[b][1]),
                                         _mm512_permutex2var_epi8(bytes[b][2], c, bytes[b][3]));
      // The values' low and high 16 bits, of the first and the last eight codes of each quarter.
      const __m512i low_first = _mm512_unpacklo_epi8(byte[0], byte[1]);
      const __m512i low_last = _mm512_unpackhi_epi8(byte[0], byte[1]);
      const __m512i high_first = _mm512_unpacklo_epi8(byte[2], byte[3]);
      const __m512i high_last = _mm512_unpackhi_epi8(byte[2], byte[3]);
      out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(low_first, high_first));
      out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(low_first, high_first));
      out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(low_last, high_last));
      out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(low_last, high_last));
    }
  };
#endif

#if defined(ZERO_SIMD_AVX2) || defined(ZERO_SIMD_AVX512)
  // nearest() on eight lanes, from the cell table, with the constants in registers: held in a local
  // object, since the codes the caller stores (bytes, which may alias anything) would otherwise
  // make the compiler reload each constant from the map after every store.
  struct Lanes {
    const std::uint32_t* cells;
    __m256 top;
    __m256i middle;

    explicit Lanes(const DynamicMap& map)
        : cells(map.cells_.data()), top(_mm256_set1_ps(map.tables_.top)),
          middle(_mm256_set1_epi32(map.tables_.negative_count)) {}

    // The codes, one per 32-bit lane, not yet clamped below 0 (the caller's packs saturate).
    __m256i nearest(__m256 x) const noexcept {
      const __m256i bits = _mm256_castps_si256(x);
      const __m256i negative = _mm256_srai_epi32(bits, 31); // all ones
      const __m256 a = _mm256_min_ps( // NaN and beyond: 2 (minps gives its second operand for NaN)
          _mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff))),
          _mm256_set1_ps(2.0f));
      // As nearest(): boundaries below a for x >= 0, at or below it for x < 0 (below the next
      // float above a).
      const __m256i bound = _mm256_sub_epi32(_mm256_castps_si256(a), negative);
      const __m256i cell = _mm256_max_epi32(
          _mm256_sub_epi32(_mm256_srli_epi32(bound, 16), _mm256_set1_epi32(first_cell)),
          _mm256_setzero_si256());
      const __m256i entry = _mm256_i32gather_epi32(reinterpret_cast<const int*>(cells), cell, 4);
      const __m256i above =
          _mm256_cmpgt_epi32(_mm256_and_si256(bound, _mm256_set1_epi32(0xffff)),
                             _mm256_and_si256(entry, _mm256_set1_epi32(no_boundary)));
      __m256i count = _mm256_sub_epi32(_mm256_srli_epi32(entry, 17), above); // a true lane is -1
      // The negative side has no -1: the boundary next to 1 is not counted there.
      const __m256i past_top = _mm256_and_si256(
          negative,
          _mm256_castps_si256(_mm256_cmp_ps(top, _mm256_castsi256_ps(bound), _CMP_LT_OQ)));
      count = _mm256_add_epi32(count, past_top);
      return _mm256_blendv_epi8(_mm256_add_epi32(middle, count), _mm256_sub_epi32(middle, count),
                                negative);
    }
  };
#endif

  // The lanes' table: a non-negative float's 16 upper bits (sign, exponent, top 7 mantissa bits)
  // name its cell; cells from first_cell (2^-27, below every boundary) to 2.0's. An entry holds
  // the number of boundaries below its cell (bits 17 up) and the low 16 bits of the boundary
  // inside it (no_boundary: none).
  static constexpr int first_cell = 100 << 7;
  static constexpr int cell_count = (0x40000000 >> 16) - first_cell + 1;
  static constexpr std::uint32_t no_boundary = 0x1ffff;

  void build_cells() {
    std::size_t below = 0; // boundaries above 0 below the current cell
    const auto bits_of = [this](std::size_t k) {
      return std::bit_cast<std::uint32_t>(boundary(
          static_cast<std::uint8_t>(static_cast<std::size_t>(tables_.negative_count) + k)));
    };
    const std::size_t above_zero = size - 1 - static_cast<std::size_t>(tables_.negative_count);
    for (std::size_t cell = 0; cell < cells_.size(); ++cell) {
      const std::uint32_t upper = static_cast<std::uint32_t>(cell) + first_cell;
      while (below < above_zero && (bits_of(below) >> 16) < upper)
        ++below;
      std::uint32_t low = no_boundary;
      if (below < above_zero && (bits_of(below) >> 16) == upper) {
        low = bits_of(below) & 0xffff;
        // One boundary a cell at most: the lookup compares with one.
        if (below + 1 < above_zero && (bits_of(below + 1) >> 16) == upper)
          throw std::logic_error("DynamicMap: two boundaries in one cell of the lookup table");
      }
      cells_[cell] = static_cast<std::uint32_t>(below) << 17 | low;
    }
  }

  // Byte b of value v at [256 b + v]: ValueLanes' tables.
  void build_value_bytes() noexcept {
    for (std::size_t v = 0; v < size; ++v) {
      const auto bits = std::bit_cast<std::uint32_t>(tables_.values[v]);
      for (std::size_t b = 0; b < 4; ++b)
        value_bytes_[size * b + v] = static_cast<std::uint8_t>(bits >> (8 * b));
    }
  }

  bool signed_;
  DynamicMapTables tables_{};
  alignas(64) std::array<std::uint8_t, 4 * size> value_bytes_{};
  std::array<std::uint32_t, cell_count> cells_{};
};
ZERO_SIMD_END

} // namespace zero
