#pragma once
// SplitMasters<Space, Exec>: the master weights of this rank's blocks kept split
// (EngineOptions::master, optim/split_master.hpp): the compute copy's values, which the parameter
// store keeps anyway, plus one signed residual of 8 or 16 bits per element, held here layer by
// layer in the optimizer store's memory (host memory, or device memory beside a device's compute
// copy). The residuals cover exactly the blocks an fp32 master would, so every stage, and every
// number of ranks, splits the same values into the same bytes.
//
// The compute weights live in the parameter store (or, behind a device, in the host's staging of
// the weights it sends): the optimizer store reads them through a view bound by its owner
// (bind_compute_copy), for the cold paths that need the masters whole (the layer's weights, a
// checkpoint's save). The step itself gets them as the update's target. Writing masters
// (set_layer, a checkpoint's load) writes the compute weights into the bound view too, as the
// parameter store rounds them. In device memory the cold paths go through host copies; the step
// runs on the device (optim/cuda_step.hpp), the host's bits.

#include "zero/core/buffer.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"
#include "zero/engine/detail/host_staging.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/report.hpp"
#include "zero/optim/split_master.hpp"
#include "zero/shard/shard_layout.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace zero {

// A layer's block of the compute copy, in the types a master can be split over, in memory of
// `Space` (host memory, or a device's).
template <MemorySpace Space = host>
using SplitComputeBlock = std::variant<View<half, Space>, View<bfloat16, Space>>;

// Split masters' compute copy is float16 or bfloat16: the stores that keep residuals refuse any
// other type (EngineOptions::validate refuses float32 first).
inline void require_split_compute_type(DType compute) {
  require(
      compute == DType::float16 || compute == DType::bfloat16,
      std::string("engine: split master weights need a float16 or bfloat16 compute copy, not ") +
          to_string(compute),
      ErrorKind::unsupported);
}

// The residuals in memory of `Space`: host memory (pinned too) updated on the host's threads, or
// a stream space's memory, whose step `exec` queues; the cold paths then go through host copies
// (detail/host_staging.hpp).
template <MemorySpace Space, ExecutionSpace Exec>
requires HostAccessibleSpace<Space> || StreamSpace<Exec>
class SplitMasters {
 public:
  // Where the step's and the cold paths' views are: host memory for host-accessible memory.
  using ViewMemory = HandedOutMemory<Space>;
  using ComputeBlock = SplitComputeBlock<ViewMemory>;

  SplitMasters(const ShardLayout& kept, int kept_rank, std::size_t layers, MasterStorage storage,
               DType compute, Exec exec = {})
      : sixteen_bits_(storage == MasterStorage::split_16bit), compute_(compute), exec_(exec) {
    require_split_compute_type(compute);
    for (std::size_t l = 0; l < layers; ++l) {
      const std::size_t n = kept.block(l, kept_rank).size();
      if (sixteen_bits_)
        wide_.emplace_back(n);
      else
        narrow_.emplace_back(n);
    }
  }

  // The compute copy's block of layer l, bound by the engine once the parameter store exists.
  void bind_compute_copy(std::function<ComputeBlock(std::size_t)> compute_copy) {
    compute_copy_ = std::move(compute_copy);
  }

  // f(residuals) with layer l's residuals: a View<std::int8_t> or View<std::int16_t> of
  // ViewMemory.
  template <class F>
  decltype(auto) with_residuals(std::size_t l, F&& f) {
    if (sixteen_bits_) return f(handed_out(wide_[l].view()));
    return f(handed_out(narrow_[l].view()));
  }

  // f(bytes) with layer l's residuals as they are kept (what a snapshot of the layer copies; the
  // masters' high parts are the compute copy's, the owner's to save).
  template <class F>
  void for_each_block(std::size_t l, F&& f) {
    if (sixteen_bits_)
      f(writable_bytes(wide_[l].view()));
    else
      f(writable_bytes(narrow_[l].view()));
  }

  // f(SplitMasterView<T, R, ViewMemory>) over layer l's compute block `weights` and its
  // residuals.
  template <SplitComputeType T, class F>
  void with_masters(std::size_t l, View<T, ViewMemory> weights, F&& f) {
    with_residuals(l, [&]<class R>(View<R, ViewMemory> residuals) {
      if (residuals.size() != weights.size()) // checked every step: no message built otherwise
        fail(ErrorKind::invalid_argument,
             "split masters: layer " + std::to_string(l) + "'s compute block has " +
                 std::to_string(weights.size()) + " elements, its residuals " +
                 std::to_string(residuals.size()));
      f(SplitMasterView<T, R, ViewMemory>{weights, residuals});
    });
  }

  // Layer l's masters, reconstructed from the bound compute copy, into `into`.
  void read(std::size_t l, View<float> into) const {
    require(static_cast<bool>(compute_copy_),
            "split masters: no compute copy is bound to reconstruct the masters from");
    std::visit(
        [&]<class T>(View<T, ViewMemory> weights) {
          detail::read_on_host(exec_, View<const T, ViewMemory>(weights), [&](View<const T> w) {
            const auto reconstruct = [&]<class R>(const Buffer<R, Space>& residuals) {
              detail::read_on_host(exec_, residuals.view(),
                                   [&](View<const R> r) { reconstruct_masters(w, r, into); });
            };
            if (sixteen_bits_)
              reconstruct(wide_[l]);
            else
              reconstruct(narrow_[l]);
          });
        },
        compute_copy_(l));
  }
  // Layer l's masters from `values`: their residuals, and their compute weights into the bound
  // view (where there is one).
  void write(std::size_t l, View<const float> values) {
    const auto split = [&]<class T>(View<T> w) {
      const auto into = [&]<class R>(Buffer<R, Space>& residuals) {
        detail::write_on_host(exec_, residuals.view(), [&](View<R> r) {
          split_masters(values, SplitMasterView<T, R>{w, r});
        });
      };
      if (sixteen_bits_)
        into(wide_[l]);
      else
        into(narrow_[l]);
    };
    if (compute_copy_)
      return std::visit(
          [&]<class T>(View<T, ViewMemory> weights) {
            detail::write_on_host(exec_, weights, split);
          },
          compute_copy_(l));
    const auto unbound = [&]<class T>(std::type_identity<T>) {
      std::vector<T> w(values.size()); // the owner writes them itself
      split(View<T>(w));
    };
    if (compute_ == DType::bfloat16)
      unbound(std::type_identity<bfloat16>{});
    else
      unbound(std::type_identity<half>{});
  }

  StateBytes bytes() const noexcept {
    std::size_t total = 0;
    for (const auto& b : wide_)
      total += b.size_bytes();
    for (const auto& b : narrow_)
      total += b.size_bytes();
    return {total, 0};
  }

 private:
  bool sixteen_bits_;
  DType compute_;
  Exec exec_;
  std::vector<Buffer<std::int16_t, Space>> wide_;  // 16-bit residuals, one buffer a layer
  std::vector<Buffer<std::int8_t, Space>> narrow_; // or 8-bit ones
  std::function<ComputeBlock(std::size_t)> compute_copy_;
};

} // namespace zero
