#pragma once
// LayerParameters: the full compute copy of one layer's parameters, in registration order, for as
// long as the handle lives. Under stage 3 the layer was all-gathered for it and is released when
// the handle goes; under stages 0-2 it is a view of the replicated weights. The values are in the
// memory of the store that handed them out: host memory, or the device memory of a store placed
// there (then values<T, zero::cuda>(), for kernels on the store's stream).

#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/view.hpp"
#include "zero/shard/shard_layout.hpp"

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace zero {

class LayerParameters {
 public:
  template <Element T, MemorySpace Space>
  LayerParameters(const ShardLayout& layout, std::size_t layer, View<const T, Space> values,
                  std::function<void(std::size_t)> on_release)
      : layout_(&layout), layer_(layer), data_(values.data()), dtype_(dtype_of<T>),
        memory_(Space::host_accessible ? host::name : Space::name),
        on_release_(std::move(on_release)) {}
  LayerParameters(LayerParameters&& other) noexcept
      : layout_(other.layout_), layer_(other.layer_), data_(other.data_), dtype_(other.dtype_),
        memory_(other.memory_), on_release_(std::exchange(other.on_release_, nullptr)) {}
  LayerParameters& operator=(LayerParameters&&) = delete;
  LayerParameters(const LayerParameters&) = delete;
  ~LayerParameters() {
    if (on_release_) on_release_(layer_);
  }

  std::size_t layer() const noexcept { return layer_; }
  DType dtype() const noexcept { return dtype_; }
  // The memory space the values are in ("host" for any host-accessible memory).
  const char* memory() const noexcept { return memory_; }
  std::size_t numel() const { return layout_->layer(layer_).numel; }

  // The layer's parameters end to end, in registration order, in memory space Space.
  template <Element T, MemorySpace Space = host>
  View<const T, Space> values() const {
    check<T, Space>();
    return {static_cast<const T*>(data_), numel()};
  }
  // The i-th parameter of the layer (in registration order).
  template <Element T, MemorySpace Space = host>
  View<const T, Space> parameter(std::size_t i) const {
    const auto members = layout_->layer_parameters(layer_);
    require(i < members.size(), "LayerParameters: layer " + std::to_string(layer_) + " has " +
                                    std::to_string(members.size()) + " parameters, not " +
                                    std::to_string(i + 1));
    std::size_t offset = 0;
    for (std::size_t k = 0; k < i; ++k)
      offset += layout_->parameter(members[k]).numel;
    return values<T, Space>().subview(offset, layout_->parameter(members[i]).numel);
  }

 private:
  template <class T, class Space>
  void check() const {
    if (dtype_of<T> != dtype_)
      fail(ErrorKind::invalid_argument, std::string("LayerParameters: layer ") +
                                            std::to_string(layer_) + " holds " + to_string(dtype_) +
                                            ", not " + to_string(dtype_of<T>));
    const std::string_view asked = Space::host_accessible ? host::name : Space::name;
    if (asked != memory_)
      fail(ErrorKind::invalid_argument, std::string("LayerParameters: layer ") +
                                            std::to_string(layer_) + " is in " + memory_ +
                                            " memory, not " + std::string(asked));
  }

  const ShardLayout* layout_;
  std::size_t layer_;
  const void* data_;
  DType dtype_;
  const char* memory_;
  std::function<void(std::size_t)> on_release_;
};

} // namespace zero
