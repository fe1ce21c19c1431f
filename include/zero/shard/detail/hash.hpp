#pragma once
// A 64-bit hash that is the same on every rank and every platform zero builds on: layouts are
// compared across ranks by hash, so it must not depend on std::hash or on pointer values.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zero::detail {

// FNV-1a of a string's bytes.
constexpr std::uint64_t text_hash(std::string_view text) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text)
    h = (h ^ c) * 0x100000001b3ull;
  return h;
}

class LayoutHasher {
 public:
  void add(std::uint64_t value) noexcept { state_ = mix(state_ ^ value); }
  void add(std::string_view text) noexcept {
    // FNV-1a over the bytes, then the length, so that "ab"+"c" and "a"+"bc" differ.
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : text)
      h = (h ^ c) * 0x100000001b3ull;
    add(h);
    add(static_cast<std::uint64_t>(text.size()));
  }
  std::uint64_t value() const noexcept { return mix(state_); }

 private:
  // splitmix64's finaliser: every input bit affects every output bit.
  static constexpr std::uint64_t mix(std::uint64_t x) noexcept {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }
  std::uint64_t state_ = 0x5a45524f4c41594full; // "ZEROLAYO"
};

} // namespace zero::detail
