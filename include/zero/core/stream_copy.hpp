#pragma once
// copy_bytes(dst, src, n, streaming): memcpy, or with `streaming` a copy whose stores bypass the
// cache (non-temporal). A large destination that nobody reads soon (the output of a big collective)
// then costs one write instead of a read-for-ownership plus a write, and does not evict the hot
// staging buffers.

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

namespace zero::detail {

inline void copy_bytes(void* dst, const void* src, std::size_t n,
                       [[maybe_unused]] bool streaming) noexcept {
  if (n == 0 || dst == src) return;
#if defined(__AVX512F__) || defined(__AVX__)
  if (streaming && n >= 4096) {
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    const std::size_t head = (64 - reinterpret_cast<std::uintptr_t>(d) % 64) % 64;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    std::size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 64 <= n; i += 64)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i),
                          _mm512_loadu_si512(reinterpret_cast<const void*>(s + i)));
#else
    for (; i + 32 <= n; i += 32)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
#endif
    _mm_sfence();
    std::memcpy(d + i, s + i, n - i);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

} // namespace zero::detail
