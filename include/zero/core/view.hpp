#pragma once
// View<T, Space>: a non-owning (pointer, size) pair that knows its memory space, so that a device
// pointer is never handed to a host loop by mistake. Host views convert from any contiguous range.

#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"

#include <cstddef>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>

namespace zero {

template <class T, MemorySpace Space = host>
class View {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using memory_space = Space;
  using size_type = std::size_t;
  using pointer = T*;
  using iterator = T*;

  constexpr View() noexcept = default;
  constexpr View(T* data, std::size_t size) noexcept : data_(data), size_(size) {}

  // A View of mutable elements is also a View of const elements.
  template <class U>
  requires(!std::is_same_v<U, T> &&
           std::is_convertible_v<U (*)[], T (*)[]>) constexpr View(View<U, Space> other) noexcept
      : data_(other.data()), size_(other.size()) {}

  // Host memory: vectors, arrays, spans and Buffers are views of themselves. The constraint
  // excludes View, so this hides neither the copy nor the move constructor (clang-tidy 14's check
  // sees only enable_if, not requires-clauses).
  // NOLINTBEGIN(bugprone-forwarding-reference-overload)
  template <std::ranges::contiguous_range R>
  requires(Space::host_accessible && !std::is_same_v<std::remove_cvref_t<R>, View> &&
           std::ranges::sized_range<R> &&
           std::is_convertible_v<std::remove_reference_t<std::ranges::range_reference_t<R>> (*)[],
                                 T (*)[]> &&
           std::is_same_v<memory_space_of<R>, Space>) constexpr View(R&& range) noexcept
      : data_(std::ranges::data(range)), size_(std::ranges::size(range)) {}
  // NOLINTEND(bugprone-forwarding-reference-overload)

  constexpr T* data() const noexcept { return data_; }
  constexpr std::size_t size() const noexcept { return size_; }
  constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + size_; }

  constexpr T& operator[](std::size_t i) const noexcept requires(Space::host_accessible) {
    return data_[i];
  }

  // Elements [offset, offset + count); throws when the range does not fit.
  constexpr View subview(std::size_t offset, std::size_t count) const {
    if (offset > size_ || count > size_ - offset)
      fail(ErrorKind::invalid_argument, "subview [" + std::to_string(offset) + ", " +
                                            std::to_string(offset + count) + ") out of a view of " +
                                            std::to_string(size_));
    return View(data_ + offset, count);
  }
  constexpr View first(std::size_t count) const { return subview(0, count); }

  std::span<T> span() const noexcept requires(Space::host_accessible) { return {data_, size_}; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

template <std::ranges::contiguous_range R>
View(R&&) -> View<std::remove_reference_t<std::ranges::range_reference_t<R>>, memory_space_of<R>>;

// view(x): the View of anything contiguous, in its own memory space.
template <std::ranges::contiguous_range R>
constexpr auto view(R&& range) noexcept {
  using T = std::remove_reference_t<std::ranges::range_reference_t<R>>;
  return View<T, memory_space_of<R>>(std::ranges::data(range), std::ranges::size(range));
}

template <class T, class Space>
constexpr View<const T, Space> as_const(View<T, Space> v) noexcept {
  return v;
}

// The memory of the views a store hands out for states it keeps in Space: plain host views of any
// host-accessible memory (host, pinned_host: their users index them), else views in Space itself
// (device memory: only that space's kernels and copies take them).
template <MemorySpace Space>
using HandedOutMemory = std::conditional_t<Space::host_accessible, host, Space>;

template <class T, class Space>
constexpr View<T, HandedOutMemory<Space>> handed_out(View<T, Space> v) noexcept {
  return {v.data(), v.size()};
}

// The bytes behind a view of trivially copyable elements, in the same memory (to copy them as they
// are: a snapshot).
template <class T, class Space>
requires std::is_trivially_copyable_v<T> View<std::byte, Space> writable_bytes(View<T, Space> v)
noexcept {
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): any object's bytes may be accessed
  return {reinterpret_cast<std::byte*>(v.data()), v.size_bytes()};
}

} // namespace zero

template <class T, class Space>
inline constexpr bool std::ranges::enable_borrowed_range<zero::View<T, Space>> = true;
template <class T, class Space>
inline constexpr bool std::ranges::enable_view<zero::View<T, Space>> = true;
