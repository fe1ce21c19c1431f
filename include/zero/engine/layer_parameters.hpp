#pragma once
// LayerParameters: the full compute copy of one layer's parameters, for as long as the handle
// lives. Under stage 3 the layer was all-gathered for it and is released when the handle goes;
// under stages 0-2 it is a view of the replicated weights.

#include "zero/core/any_buffer.hpp"
#include "zero/shard/shard_layout.hpp"

#include <cstddef>
#include <functional>
#include <utility>

namespace zero {

class LayerParameters {
 public:
  LayerParameters(const ShardLayout& layout, std::size_t layer, const AnyBuffer& storage,
                  std::size_t offset, std::function<void(std::size_t)> on_release)
      : layout_(&layout), layer_(layer), storage_(&storage), offset_(offset),
        on_release_(std::move(on_release)) {}
  LayerParameters(LayerParameters&& other) noexcept
      : layout_(other.layout_), layer_(other.layer_), storage_(other.storage_),
        offset_(other.offset_), on_release_(std::exchange(other.on_release_, nullptr)) {}
  LayerParameters& operator=(LayerParameters&&) = delete;
  LayerParameters(const LayerParameters&) = delete;
  ~LayerParameters() {
    if (on_release_) on_release_(layer_);
  }

  std::size_t layer() const noexcept { return layer_; }
  DType dtype() const noexcept { return storage_->dtype(); }
  std::size_t numel() const { return layout_->layer(layer_).numel; }

  // The layer's parameters end to end, in registration order.
  template <Element T>
  View<const T> values() const {
    return storage_->as<T>().subview(offset_, numel());
  }
  // The i-th parameter of the layer (in registration order).
  template <Element T>
  View<const T> parameter(std::size_t i) const {
    const auto members = layout_->layer_parameters(layer_);
    require(i < members.size(), "LayerParameters: layer " + std::to_string(layer_) + " has " +
                                    std::to_string(members.size()) + " parameters, not " +
                                    std::to_string(i + 1));
    const std::size_t p = members[i];
    return storage_->as<T>().subview(offset_ + *layout_->layer_offset(p),
                                     layout_->parameter(p).numel);
  }

 private:
  const ShardLayout* layout_;
  std::size_t layer_;
  const AnyBuffer* storage_;
  std::size_t offset_; // of the layer's flat buffer in storage_
  std::function<void(std::size_t)> on_release_;
};

} // namespace zero
