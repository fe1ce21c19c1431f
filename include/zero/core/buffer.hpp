#pragma once
// Buffer<T, Space>: owning, aligned (buffer_alignment), movable and never copied implicitly
// (clone() copies on purpose). Elements are zero-initialised unless `uninitialized` is asked for,
// which large buffers about to be overwritten want.

#include "zero/core/memory_space.hpp"
#include "zero/core/view.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

namespace zero {

struct uninitialized_t {
  explicit uninitialized_t() = default;
};
inline constexpr uninitialized_t uninitialized{};

template <class T, MemorySpace Space = host>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T>, "zero::Buffer holds trivially copyable elements");
  static_assert(!std::is_const_v<T>, "zero::Buffer owns mutable elements; use View<const T>");

 public:
  using value_type = T;
  using element_type = T;
  using memory_space = Space;
  using size_type = std::size_t;
  using iterator = T*;
  using const_iterator = const T*;

  Buffer() noexcept = default;
  Buffer(std::size_t size, uninitialized_t)
      : data_(static_cast<T*>(Space::allocate(size * sizeof(T)))), size_(size) {}
  explicit Buffer(std::size_t size) : Buffer(size, uninitialized) { fill_zero(); }
  Buffer(std::size_t size, const T& value) requires(Space::host_accessible)
      : Buffer(size, uninitialized) {
    std::fill(begin(), end(), value);
  }

  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      release_storage();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~Buffer() { release_storage(); }

  // An explicit deep copy.
  Buffer clone() const requires(Space::host_accessible) {
    Buffer copy(size_, uninitialized);
    if (size_ != 0) std::memcpy(copy.data_, data_, size_ * sizeof(T));
    return copy;
  }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }

  T* begin() noexcept { return data_; }
  T* end() noexcept { return data_ + size_; }
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }

  T& operator[](std::size_t i) noexcept requires(Space::host_accessible) { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept requires(Space::host_accessible) {
    return data_[i];
  }

  View<T, Space> view() noexcept { return {data_, size_}; }
  View<const T, Space> view() const noexcept { return {data_, size_}; }
  operator View<T, Space>() noexcept { return view(); }
  operator View<const T, Space>() const noexcept { return view(); }

 private:
  void fill_zero() {
    if (size_ == 0) return;
    if constexpr (HostBackedSpace<Space>) {
      std::memset(static_cast<void*>(data_), 0, size_bytes());
    } else {
#if ZERO_HAS_CUDA
      // cudaMemset of device memory returns before it is done, on the default stream, which work
      // on a non-blocking stream does not wait for: the buffer is zero for every stream once
      // constructed only after this wait (construction is a cold path).
      ZERO_CHECK_CUDA(cudaMemset(data_, 0, size_bytes()));
      ZERO_CHECK_CUDA(cudaStreamSynchronize(nullptr));
#endif
    }
  }
  void release_storage() noexcept {
    if (data_ != nullptr) Space::deallocate(data_, size_bytes());
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

} // namespace zero
