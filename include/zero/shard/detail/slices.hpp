#pragma once
// Copies between the logical tensor (parameters in registration order) and slices of a layout,
// driven by the layout's segments. A ShardedTensor's collectives move the "image": every slice
// padded to the largest one, slice after slice, which is what an all-gather of equal blocks
// produces. When the image holds the parameters in order (one layer, flat contiguous), logical
// buffers are images already and the copies are skipped.

#include "zero/shard/parameter.hpp"
#include "zero/shard/shard_layout.hpp"

#include <cstddef>
#include <cstring>

namespace zero::detail {

// memcpy of n elements; empty buffers may be null, which memcpy does not allow even for n == 0.
template <class T>
void copy_elements(T* destination, const T* source, std::size_t n) noexcept {
  if (n != 0) std::memcpy(destination, source, n * sizeof(T));
}

// Whether image position r * block + s is element e for every segment of every slice.
inline bool image_is_identity(const ShardLayout& layout, std::size_t block) {
  for (int r = 0; r < layout.world_size(); ++r)
    for (const Segment& s : layout.rank_segments(r))
      if (static_cast<std::size_t>(r) * block + s.shard_offset !=
          layout.element_range(s.parameter).begin + s.parameter_offset)
        return false;
  return true;
}

// slice[shard offset] = full[element] for slice r's segments; padding is left as it is.
template <class T>
void copy_to_slice(const ShardLayout& layout, int r, const T* full, T* slice) {
  for (const Segment& s : layout.rank_segments(r))
    copy_elements(slice + s.shard_offset,
                  full + layout.element_range(s.parameter).begin + s.parameter_offset, s.length);
}

// full[element] = slice[shard offset] for slice r's segments.
template <class T>
void copy_from_slice(const ShardLayout& layout, int r, const T* slice, T* full) {
  for (const Segment& s : layout.rank_segments(r))
    copy_elements(full + layout.element_range(s.parameter).begin + s.parameter_offset,
                  slice + s.shard_offset, s.length);
}

template <class T>
void pack_image(const ShardLayout& layout, std::size_t block, const T* full, T* image) {
  for (int r = 0; r < layout.world_size(); ++r)
    copy_to_slice(layout, r, full, image + static_cast<std::size_t>(r) * block);
}

template <class T>
void unpack_image(const ShardLayout& layout, std::size_t block, const T* image, T* full) {
  for (int r = 0; r < layout.world_size(); ++r)
    copy_from_slice(layout, r, image + static_cast<std::size_t>(r) * block, full);
}

} // namespace zero::detail
