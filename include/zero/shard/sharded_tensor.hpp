#pragma once
// ShardedTensor<T, Policy>: a logical flat tensor of numel() elements (parameters end to end, in
// registration order) whose storage follows a StoragePolicy: the whole tensor on every rank
// (Replicated) or one slice per rank (Sharded<Partitioner>). Operations that communicate take
// the communicator and return a Work handle (or, for gather(), a guard that holds one):
//
//   gather / gather_into     every rank gets the whole tensor (all-gather of the slices)
//   reduce_scatter_from      reduce a whole tensor from every rank into the owned slice
//   all_reduce               reduce a whole tensor on every rank, and keep the owned slice
//   scatter_from / gather_to root's whole tensor to the slices, and back (init, checkpoints)
//
// "Whole tensor" buffers have numel() elements. When the layout's padded image is the tensor
// itself plus tail padding (padded_in_order(): one layer, flat contiguous), buffers of
// padded_numel() elements are accepted as well and are used by the collective without a copy;
// otherwise the tensor goes through a staging buffer owned by the returned Work.
//
// The layout is checked across ranks (verify_layout) when the tensor is made from a communicator.

#include "zero/comm/agreed.hpp"
#include "zero/comm/communicator.hpp"
#include "zero/comm/reduce_op.hpp"
#include "zero/core/buffer.hpp"
#include "zero/core/convert.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/nvme.hpp"
#include "zero/core/view.hpp"
#include "zero/core/work.hpp"
#include "zero/shard/detail/continued_work.hpp"
#include "zero/shard/detail/slices.hpp"
#include "zero/shard/gathered.hpp"
#include "zero/shard/policy.hpp"
#include "zero/shard/shard_layout.hpp"
#include "zero/shard/verify.hpp"

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <memory>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace zero {

// A contiguous host buffer of T (vector, span, Buffer, View), read-only or writable.
template <class R, class T>
concept HostBufferOf = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
    std::same_as<std::remove_cv_t<std::ranges::range_value_t<R>>, T> &&
    memory_space_of<R>::host_accessible;
template <class R, class T>
concept WritableHostBufferOf = HostBufferOf<R, T> &&
    !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

// Says that the ranks agreed on a layout already: the tensor made on it skips the check.
struct layout_agreed_t {
  explicit layout_agreed_t() = default;
};
inline constexpr layout_agreed_t layout_agreed{};

template <Element T, StoragePolicy Policy = Sharded<FlatContiguous>>
class ShardedTensor {
 public:
  using value_type = T;
  using policy_type = Policy;
  using memory_space = typename Policy::memory_space;
  // Whether the slice is in addressable memory (host, pinned host): then local(), block() and the
  // collectives work on it directly. A slice on NVMe moves only through read() and write().
  static constexpr bool in_memory = MemorySpace<memory_space>;
  // Whether the host can move the slice's data: host-accessible memory, or NVMe through read() and
  // write(). A slice in device memory is reached through its views (local(), block()) by device
  // code and a communicator of that memory; the host-side gathers, scatters and copies refuse it.
  static constexpr bool host_data = !in_memory || memory_space::host_accessible;

 private:
  // Views of an NVMe slice cannot exist; host stands in, in declarations no call can reach.
  using view_space = std::conditional_t<in_memory, memory_space, host>;
  using storage_type = typename detail::slice_storage<T, memory_space>::type;

 public:
  // Collective: lays out `params` with the policy over comm's ranks, checks that every rank did
  // the same, and allocates this rank's slice (zero-filled).
  template <class Comm>
  ShardedTensor(Comm& comm, std::span<const ParameterSpec> params, Policy policy = {})
      : ShardedTensor(comm,
                      std::make_shared<const ShardLayout>(detail::agreed_layout(
                          comm, [&] { return policy.layout(params, slices_of(comm)); })),
                      policy, verified) {}

  // Collective: a tensor on an existing layout (shared, e.g. by master weights and their
  // optimizer states), checked again across ranks. The check moves host metadata: a communicator
  // of device memory cannot make it (pass layout_agreed, below).
  template <class Comm>
  ShardedTensor(Comm& comm, std::shared_ptr<const ShardLayout> layout, Policy policy = {})
      : ShardedTensor(comm, std::move(layout), policy, unverified) {
    static_assert(HostAccessibleSpace<typename Comm::memory_space>,
                  "zero::ShardedTensor: a communicator of device memory cannot check a layout "
                  "across ranks; pass zero::layout_agreed when the ranks agreed on it already "
                  "(the engine's model layout), or build the tensor on a host communicator");
  }
  // Not collective: a tensor on a layout the ranks agreed on already (ModelLayout's, which the
  // engine agreed when it was built), with any communicator of the group.
  template <class Comm>
  ShardedTensor(Comm& comm, std::shared_ptr<const ShardLayout> layout, layout_agreed_t,
                Policy policy = {})
      : ShardedTensor(comm, std::move(layout), policy, verified) {}

  // Not collective: rank `rank`'s slice, in memory, of a layout `ranks` ranks agreed on already,
  // without a communicator of the slice's memory (stage 3's blocks in host memory beside a
  // communicator of device memory, offload/offloaded_parameters.hpp).
  ShardedTensor(std::shared_ptr<const ShardLayout> layout, layout_agreed_t, int rank, int ranks,
                Policy policy = {}) requires in_memory
      : ShardedTensor(sized_for(std::move(layout), Policy::sharded ? ranks : 1), std::move(policy),
                      rank, ranks) {}

  ShardedTensor(ShardedTensor&&) noexcept = default;
  ShardedTensor& operator=(ShardedTensor&&) noexcept = default;

  const ShardLayout& layout() const noexcept { return *layout_; }
  const std::shared_ptr<const ShardLayout>& shared_layout() const noexcept { return layout_; }
  const Policy& policy() const noexcept { return policy_; }
  int rank() const noexcept { return rank_; }
  // Which slice of the layout this rank keeps: its rank when sharded, 0 when replicated.
  int slice() const noexcept { return slice_; }
  std::size_t numel() const noexcept { return layout_->numel(); }
  // The image every collective moves: slices padded to the largest, end to end.
  std::size_t padded_numel() const noexcept {
    return static_cast<std::size_t>(layout_->world_size()) * block_;
  }
  // Whether the image holds the tensor in order from element 0 (see the top of this file).
  bool padded_in_order() const noexcept { return identity_; }

  // This rank's slice, in shard order (layout().rank_segments(slice()) says what is where).
  View<T, view_space> local() noexcept requires in_memory {
    return {local_.data(), layout_->shard_numel(slice_)};
  }
  View<const T, view_space> local() const noexcept requires in_memory {
    return {local_.data(), layout_->shard_numel(slice_)};
  }
  // Bytes this rank allocates for the tensor (its slice, padded to the largest slice).
  std::size_t bytes_resident() const noexcept {
    if constexpr (in_memory)
      return local_.size_bytes();
    else
      return 0;
  }
  // Bytes the slice takes where it lives (memory, or its swap file).
  std::size_t bytes_stored() const noexcept {
    if constexpr (in_memory)
      return local_.size_bytes();
    else
      return local_.file_bytes();
  }

  // This rank's block of layer l, inside its slice: the unit a store, a swapper or a checkpoint
  // addresses ("the moments of layer 7 on this rank"). A replicated tensor's block is the whole
  // layer.
  Range block_range(std::size_t l) const { return layout_->block(l, slice_); }
  View<T, view_space> block(std::size_t l) requires in_memory {
    const Range r = block_range(l);
    return {local_.data() + r.begin, r.size()};
  }
  View<const T, view_space> block(std::size_t l) const requires in_memory {
    const Range r = block_range(l);
    return {local_.data() + r.begin, r.size()};
  }

  // Moves positions `part` of this rank's block of layer l between the slice and host memory,
  // wherever the slice lives: a copy in memory, an aligned transfer on NVMe (nvme/nvme_slice.hpp
  // says what alignment it needs). The Work completes when the data has moved.
  Work read(std::size_t l, Range part, View<T> into) const requires host_data {
    check_part(l, part, into.size(), "read");
    if constexpr (in_memory) {
      detail::copy_elements(into.data(), local_.data() + block_range(l).begin + part.begin,
                            part.size());
      return detail::completed(describe("read"));
    } else {
      return local_.read(l, part, into);
    }
  }
  Work write(std::size_t l, Range part, View<const T> from) requires host_data {
    check_part(l, part, from.size(), "write");
    if constexpr (in_memory) {
      detail::copy_elements(local_.data() + block_range(l).begin + part.begin, from.data(),
                            part.size());
      return detail::completed(describe("write"));
    } else {
      return local_.write(l, part, from);
    }
  }

  // --- gathering ---------------------------------------------------------------------------------
  // The whole tensor in a buffer the returned guard owns until release() or scope exit.
  template <class Comm>
  Gathered<T, host> gather(Comm& comm) const requires host_data {
    const std::size_t size = identity_ ? padded_numel() : numel();
    Buffer<T, host> storage(size, uninitialized);
    Work work = gather_into(comm, storage.view());
    return Gathered<T, host>(std::move(storage), numel(), std::move(work), layout_);
  }

  // The whole tensor into `full` on every rank.
  template <class Comm, WritableHostBufferOf<T> Full>
  Work gather_into(Comm& comm, Full&& full) const requires host_data {
    static_assert(
        in_memory,
        "zero::ShardedTensor: a slice on NVMe moves through read() and write(), not collectives");
    check_communicator(comm, "gather_into");
    T* out = std::ranges::data(full);
    const std::size_t size = check_full(std::ranges::size(full), "gather_into");
    if constexpr (!Policy::sharded) {
      detail::copy_from_slice(*layout_, 0, local_.data(), out);
      return detail::completed(describe("gather_into"));
    } else if constexpr (!GatheringCommunicator<Comm>) {
      static_assert(dependent_false<Comm>,
                    "zero::ShardedTensor: a Sharded policy all-gathers the slices, but this "
                    "communicator type has no all_gather (it does not model "
                    "zero::GatheringCommunicator)");
    } else {
      if (identity_ && size == padded_numel())
        return comm.all_gather(mine(), View<T, memory_space_of<Full>>(out, size));
      Buffer<T, host> image(padded_numel(), uninitialized);
      Work work = comm.all_gather(mine(), image.view());
      return detail::continue_with(
          std::move(work),
          [layout = layout_, block = block_, image = std::move(image), out] {
            detail::unpack_image(*layout, block, image.data(), out);
          },
          describe("gather_into"));
    }
  }

  // --- reductions --------------------------------------------------------------------------------
  // Every rank passes a whole tensor; the owned slice becomes their reduction (sum or avg).
  template <class Comm, HostBufferOf<T> Full>
  Work reduce_scatter_from(Comm& comm, Full&& full,
                           ReduceOp op = ReduceOp::sum) requires host_data {
    static_assert(
        in_memory,
        "zero::ShardedTensor: a slice on NVMe moves through read() and write(), not collectives");
    check_communicator(comm, "reduce_scatter_from");
    static_assert(ReducingCommunicator<Comm>,
                  "zero::ShardedTensor::reduce_scatter_from needs a communicator with "
                  "reduce_scatter and all_reduce (zero::ReducingCommunicator)");
    const T* in = std::ranges::data(full);
    const std::size_t size = check_full(std::ranges::size(full), "reduce_scatter_from");
    const View<T, view_space> out(local_.data(), block_);
    if (identity_ && size == padded_numel()) return reduce_into(comm, in, size, out, op);
    Buffer<T, host> image(padded_numel()); // zero padding contributes nothing to any reduction
    detail::pack_image(*layout_, block_, in, image.data());
    Work work = reduce_into(comm, image.data(), image.size(), out, op);
    return detail::continue_with(
        std::move(work), [image = std::move(image)] {}, describe("reduce_scatter_from"));
  }

  // Reduces `full` in place on every rank and keeps this rank's slice of the result.
  template <class Comm, WritableHostBufferOf<T> Full>
  Work all_reduce(Comm& comm, Full&& full, ReduceOp op = ReduceOp::sum) requires host_data {
    static_assert(
        in_memory,
        "zero::ShardedTensor: a slice on NVMe moves through read() and write(), not collectives");
    check_communicator(comm, "all_reduce");
    static_assert(ReducingCommunicator<Comm>, "zero::ShardedTensor::all_reduce needs a "
                                              "communicator with all_reduce "
                                              "(zero::ReducingCommunicator)");
    T* data = std::ranges::data(full);
    const std::size_t size = check_full(std::ranges::size(full), "all_reduce");
    Work work = comm.all_reduce(View<T, memory_space_of<Full>>(data, size), op);
    return detail::continue_with(
        std::move(work),
        [layout = layout_, slice = slice_, data, local = local_.data()] {
          detail::copy_to_slice(*layout, slice, data, local);
        },
        describe("all_reduce"));
  }

  // --- root <-> slices -------------------------------------------------------------------------
  // Root's whole tensor into every rank's slice. Other ranks may pass an empty buffer.
  template <class Comm, HostBufferOf<T> Full>
  Work scatter_from(Comm& comm, Full&& root_full, int root = 0) requires host_data {
    static_assert(
        in_memory,
        "zero::ShardedTensor: a slice on NVMe moves through read() and write(), not collectives");
    check_communicator(comm, "scatter_from");
    check_root(root, "scatter_from");
    static_assert(GatheringCommunicator<Comm>, "zero::ShardedTensor::scatter_from needs a "
                                               "communicator with broadcast "
                                               "(zero::GatheringCommunicator)");
    const T* in = std::ranges::data(root_full);
    std::size_t size = 0;
    if (rank_ == root) size = check_full(std::ranges::size(root_full), "scatter_from");
    Buffer<T, host> image(padded_numel());
    if (rank_ == root) {
      if (identity_)
        detail::copy_elements(image.data(), in, std::min(size, numel()));
      else
        detail::pack_image(*layout_, block_, in, image.data());
    }
    if constexpr (!Policy::sharded) {
      Work work = comm.broadcast(image.view(), View<T, view_space>(local_.data(), block_), root);
      return detail::continue_with(
          std::move(work), [image = std::move(image)] {}, describe("scatter_from"));
    } else {
      Work work = comm.broadcast(image.view(), root);
      const std::size_t offset = static_cast<std::size_t>(slice_) * block_;
      return detail::continue_with(
          std::move(work),
          [image = std::move(image), local = local_.data(), offset, block = block_] {
            detail::copy_elements(local, image.data() + offset, block);
          },
          describe("scatter_from"));
    }
  }

  // The whole tensor into root's `out`. Other ranks may pass an empty buffer.
  template <class Comm, WritableHostBufferOf<T> Full>
  Work gather_to(Comm& comm, Full&& out, int root = 0) const requires host_data {
    static_assert(
        in_memory,
        "zero::ShardedTensor: a slice on NVMe moves through read() and write(), not collectives");
    check_communicator(comm, "gather_to");
    check_root(root, "gather_to");
    T* data = std::ranges::data(out);
    if (rank_ == root) check_full(std::ranges::size(out), "gather_to");
    if constexpr (!Policy::sharded) {
      if (rank_ == root) detail::copy_from_slice(*layout_, 0, local_.data(), data);
      return detail::completed(describe("gather_to"));
    } else if constexpr (!GatheringCommunicator<Comm>) {
      static_assert(dependent_false<Comm>,
                    "zero::ShardedTensor: a Sharded policy all-gathers the slices, but this "
                    "communicator type has no all_gather (it does not model "
                    "zero::GatheringCommunicator)");
    } else {
      Buffer<T, host> image(padded_numel(), uninitialized);
      Work work = comm.all_gather(mine(), image.view());
      const bool keep = rank_ == root;
      return detail::continue_with(
          std::move(work),
          [layout = layout_, block = block_, image = std::move(image), data, keep] {
            if (keep) detail::unpack_image(*layout, block, image.data(), data);
          },
          describe("gather_to"));
    }
  }

  // --- element types -----------------------------------------------------------------------------
  // A tensor of U on the same layout holding this slice converted (e.g. fp32 master to bf16).
  template <Element U>
  ShardedTensor<U, Policy> converted() const requires in_memory && host_data {
    ShardedTensor<U, Policy> result(layout_, policy_, rank_, comm_size_);
    convert_n(local_.data(), result.local_.data(), local_.size());
    return result;
  }
  // This slice = `source`'s slice converted; both must be on the same layout and rank.
  template <Element U>
  void convert_from(const ShardedTensor<U, Policy>& source) requires in_memory && host_data {
    if (source.layout_ != layout_ && source.layout_->hash() != layout_->hash())
      fail(ErrorKind::invalid_argument,
           "ShardedTensor::convert_from: the source tensor has a different layout (" +
               std::string(source.layout_->policy()) + ", " +
               std::to_string(source.layout_->numel()) + " elements) than this one (" +
               std::string(layout_->policy()) + ", " + std::to_string(layout_->numel()) + ")");
    if (source.rank_ != rank_)
      fail(ErrorKind::invalid_argument, "ShardedTensor::convert_from: the source tensor is rank " +
                                            std::to_string(source.rank_) + "'s, this is rank " +
                                            std::to_string(rank_) + "'s");
    convert_n(source.local_.data(), local_.data(), local_.size());
  }

 private:
  template <Element, StoragePolicy>
  friend class ShardedTensor;

  enum Checked { verified, unverified };

  template <class Comm>
  static int slices_of(const Comm& comm) {
    return Policy::sharded ? static_cast<int>(comm.size()) : 1;
  }

  template <class Comm>
  ShardedTensor(Comm& comm, std::shared_ptr<const ShardLayout> layout, Policy policy,
                Checked checked)
      : ShardedTensor(
            allocated(comm, checked_layout(comm, std::move(layout), checked), std::move(policy))) {}

  // A slice in memory is allocated; one on NVMe is a file, which a full disk can refuse on one
  // rank only: every rank learns of it, rather than some waiting for the failed one.
  template <class Comm>
  static ShardedTensor allocated(Comm& comm, std::shared_ptr<const ShardLayout> layout,
                                 Policy policy) {
    const int rank = static_cast<int>(comm.rank()), size = static_cast<int>(comm.size());
    if constexpr (in_memory)
      return ShardedTensor(std::move(layout), std::move(policy), rank, size);
    else
      return agreed(comm, "creating the swap file of a ShardedTensor on NVMe", [&] {
        return ShardedTensor(std::move(layout), std::move(policy), rank, size);
      });
  }

  ShardedTensor(std::shared_ptr<const ShardLayout> layout, Policy policy, int rank, int comm_size)
      : policy_(std::move(policy)), layout_(std::move(layout)), rank_(rank), comm_size_(comm_size),
        slice_(Policy::sharded ? rank : 0), block_(layout_->max_shard_numel()),
        identity_(detail::image_is_identity(*layout_, block_)), local_(make_storage()) {}

  storage_type make_storage() const {
    if constexpr (in_memory)
      return storage_type(block_);
    else
      return storage_type(policy_.space, *layout_, slice_);
  }

  static std::shared_ptr<const ShardLayout> sized_for(std::shared_ptr<const ShardLayout> layout,
                                                      int slices) {
    require(layout != nullptr, "ShardedTensor: the layout is null");
    if (layout->world_size() != slices)
      fail(ErrorKind::invalid_argument,
           "ShardedTensor: the layout has " + std::to_string(layout->world_size()) +
               " slices, but this tensor needs " + std::to_string(slices));
    return layout;
  }

  void check_part(std::size_t l, Range part, std::size_t buffer, const char* op) const {
    const Range block = block_range(l);
    if (part.begin > part.end || part.end > block.size() || buffer < part.size())
      fail(ErrorKind::invalid_argument,
           describe(op) + ": positions [" + std::to_string(part.begin) + ", " +
               std::to_string(part.end) + ") of layer " + std::to_string(l) + "'s block of " +
               std::to_string(block.size()) + " elements, with a buffer of " +
               std::to_string(buffer));
  }

  template <class Comm>
  static std::shared_ptr<const ShardLayout>
  checked_layout(Comm& comm, std::shared_ptr<const ShardLayout> layout, Checked checked) {
    static_assert(CommunicatorGroup<Comm>,
                  "zero::ShardedTensor needs a communicator (zero::CommunicatorGroup)");
    // A slice in device memory is only laid out here (the agreement moves host metadata); its data
    // moves through its views, with a communicator of that memory.
    static_assert(!in_memory || !host_data ||
                      accepts_space<typename Comm::memory_space, view_space>,
                  "zero::ShardedTensor: the communicator cannot read the policy's memory space");
    require(layout != nullptr, "ShardedTensor: the layout is null");
    if (layout->world_size() != slices_of(comm))
      fail(ErrorKind::invalid_argument,
           "ShardedTensor: the layout has " + std::to_string(layout->world_size()) +
               " slices, but a " + (Policy::sharded ? "sharded" : "replicated") +
               " tensor on a communicator of " + std::to_string(comm.size()) + " ranks needs " +
               std::to_string(slices_of(comm)));
    if constexpr (HostAccessibleSpace<typename Comm::memory_space>) {
      if (checked == unverified) verify_layout(comm, *layout);
    } else {
      require(checked == verified, "ShardedTensor: a communicator of device memory cannot check a "
                                   "layout across ranks (pass zero::layout_agreed)");
    }
    return layout;
  }

  template <class Comm>
  void check_communicator(const Comm& comm, const char* op) const {
    static_assert(CommunicatorGroup<Comm>,
                  "zero::ShardedTensor needs a communicator (zero::CommunicatorGroup)");
    if (comm.size() != comm_size_ || comm.rank() != rank_)
      fail(ErrorKind::invalid_argument,
           std::string("ShardedTensor::") + op + ": the tensor belongs to rank " +
               std::to_string(rank_) + " of " + std::to_string(comm_size_) +
               ", but the communicator is rank " + std::to_string(comm.rank()) + " of " +
               std::to_string(comm.size()));
  }

  std::size_t check_full(std::size_t size, const char* op) const {
    if (size == numel() || (identity_ && size == padded_numel())) return size;
    fail(ErrorKind::invalid_argument,
         std::string("ShardedTensor::") + op + ": the whole-tensor buffer has " +
             std::to_string(size) + " elements, expected " + std::to_string(numel()) +
             (identity_ && padded_numel() != numel()
                  ? " (or " + std::to_string(padded_numel()) + " with padding)"
                  : std::string()));
  }

  void check_root(int root, const char* op) const {
    if (root < 0 || root >= comm_size_)
      fail(ErrorKind::invalid_argument, std::string("ShardedTensor::") + op + ": root " +
                                            std::to_string(root) + " is not a rank of " +
                                            std::to_string(comm_size_));
  }

  View<const T, view_space> mine() const noexcept requires in_memory {
    return {local_.data(), block_};
  }

  template <class Comm>
  Work reduce_into(Comm& comm, const T* in, std::size_t size, View<T, view_space> out,
                   ReduceOp op) {
    const View<const T, host> input(in, size);
    if constexpr (Policy::sharded)
      return comm.reduce_scatter(input, out, op);
    else
      return comm.all_reduce(input, out, op);
  }

  std::string describe(const char* op) const {
    return std::string("ShardedTensor<") + to_string(dtype_of<T>) + ">::" + op + "(" +
           std::to_string(numel()) + " elements, " + std::string(layout_->policy()) + ")";
  }

  Policy policy_;
  std::shared_ptr<const ShardLayout> layout_;
  int rank_ = 0;
  int comm_size_ = 1;
  int slice_ = 0;
  std::size_t block_ = 0;
  bool identity_ = false;
  storage_type local_;
};

} // namespace zero
