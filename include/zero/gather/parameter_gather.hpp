#pragma once
// ParameterGather<T, Comm, Exec>: ZeRO stage 3's gathered layers, the mirror image of gradient
// reduction (reduce/). Each rank keeps its block of every layer; acquire(l) all-gathers layer l
// into a buffer that lives while it is acquired, and starts gathering the layer expected next (in
// the order the last step acquired them, or by the direction of travel:
// gather/acquisition_order.hpp) so that its communication overlaps with the current layer's
// compute. Buffers hold the layer's parameters in order: a layer whose image is in another order
// (per-parameter or unequal layouts) is gathered into an image buffer and unpacked when waited for.
// Layers smaller than the persistence threshold stay gathered all the time and are refreshed once
// per step; gathered elements, prefetches included, never exceed the live bound except for what the
// caller holds itself.
//
// Where this rank's blocks come from is a BlockSource: the shard in memory (ShardBlocks), the
// NVMe tier, which reads a block ahead when asked to prefetch it, or host memory beside a device
// (offload/device_staged_blocks.hpp), whose blocks reach the device on a copy stream: such a source
// names, through arrival(l, exec), a stream ordered after its copy of block l and after the work
// queued on Exec's stream, and the collective that reads the block starts after that stream
// instead of Exec's, so that the engine's stream never waits for a copy.
//
// With quantized weights (ZeRO++'s qwZ), a gather that acquire() starts carries int8 blocks and
// their scales instead of T (gather/quantized_gather.hpp), dequantized when the gather is waited
// for. Layers kept gathered are refreshed in full precision once a step (they are small by
// definition).
//
// With a secondary group (ZeRO++'s hpZ: groups of consecutive ranks, typically a node's), the
// first gather of a layer after its weights changed leaves each rank of the group a piece of the
// gathered layer (its flat image cut into one piece per group rank); later gathers of the layer,
// backward's, all-gather those pieces within the group instead of the blocks across the shard
// group. The pieces are copies of the gathered values, so the weights are the same bits either
// way; they cost flat size / group size elements per layer and are dropped when weights change.
//
// An out-of-order image is unpacked along a run table listed once per layer (zero/core/
// run_table.hpp), by the kernel of the execution space Exec. Over a stream space (HostStreamSpace,
// CudaStreamSpace; HostThreads runs everything inline) the layers are consumed by work queued on
// that stream: acquire(l) returns once the gather's collective completed, with the unpacking of an
// out-of-order image queued, so the layer is ready for work queued after it (the host reads it
// after an event). A buffer that release() or an unpacking gives back is reused by a later gather
// only after the work queued before it was given back: a host communicator waits on the host for
// an event recorded then, and a communicator ordered after a caller stream (set_caller:
// StagedCommunicator, NcclCommunicator) is pointed at this one. The buffers (the pool, layers kept
// gathered, hpZ's pieces) live in Exec's memory, which the communicator must take, and so must the
// blocks the source gives: over CudaStreamSpace, device memory. qwZ packs on the host, and is
// refused over a device space.

#include "zero/comm/communicator.hpp"
#include "zero/core/buffer.hpp"
#include "zero/core/dropped_waits.hpp"
#include "zero/core/error.hpp"
#include "zero/core/execution_space.hpp"
#include "zero/core/host_stream_space.hpp"
#include "zero/core/run_table.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/gather/acquisition_order.hpp"
#include "zero/gather/quantized_gather.hpp"
#include "zero/shard/layer_gather.hpp"
#include "zero/shard/layer_images.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace zero {

// This rank's block of each layer, for gathering, in memory space M. block(l) stays valid until
// release(l), which the gather calls once the collective that reads it completed; prefetch(l) says
// block(l) is wanted soon.
template <class S, class T, class M = host>
concept BlockSource = requires(S& source, std::size_t l) {
  { source.block(l) } -> std::same_as<View<const T, M>>;
  source.prefetch(l);
  source.release(l);
};

// The blocks of a sharded tensor (in its memory space).
template <class Tensor>
struct ShardBlocks {
  const Tensor& shard;
  View<const typename Tensor::value_type, typename Tensor::memory_space>
  block(std::size_t l) const {
    return shard.block(l);
  }
  void prefetch(std::size_t) const noexcept {}
  void release(std::size_t) const noexcept {}
};

namespace detail {
// Events of a stream space, one per buffer (nothing for an inline space).
template <class Exec>
struct EventsOf {
  using type = std::vector<char>;
};
template <StreamSpace Exec>
struct EventsOf<Exec> {
  using type = std::vector<typename Exec::event_type>;
};
} // namespace detail

template <Element T, GatheringCommunicator Comm, ExecutionSpace Exec = HostThreads>
requires accepts_space<typename Comm::memory_space, typename Exec::memory_space>
class ParameterGather {
  using Memory = typename Exec::memory_space;

 public:
  struct Limits {
    std::size_t persistence_threshold = 0; // layers with fewer elements stay gathered
    std::size_t prefetch_elements = 0;     // gathered ahead at most
    std::size_t max_live_elements = 0;     // gathered at once at most (held layers excepted)
    // A released layer stays gathered when the record acquires it again within this many
    // elements of other acquisitions (stage3_max_reuse_distance); 0: only when it comes next.
    std::size_t max_reuse_distance = 0;
  };

  // `quantization`: gather int8 blocks instead of T (qwZ); none gathers T. `hpz`: the secondary
  // group (hpZ), or null.
  ParameterGather(Comm& comm, const ShardLayout& layout, const LayerImages& images, Limits limits,
                  std::optional<BlockQuantization> quantization = std::nullopt, Comm* hpz = nullptr,
                  Exec exec = {})
      : comm_(comm), layout_(layout), images_(images), limits_(limits), hpz_(hpz), exec_(exec),
        slots_(layout.layer_count()), unpacking_(layout.layer_count()),
        order_(layout.layer_count()) {
    if (quantization) {
      if constexpr (Memory::host_accessible)
        quantized_.emplace(comm, layout, *quantization);
      else
        fail(ErrorKind::unsupported, std::string("ParameterGather: quantized weights (qwZ) are "
                                                 "packed on the host; over ") +
                                         Exec::name + " they are not supported yet");
    }
    for (std::size_t l = 0; l < slots_.size(); ++l) {
      if (!images.in_order(l)) {
        std::vector<CopyRun> runs;
        images.append_unpack_runs(l, Range{0, layout.layer(l).flat_numel}, 0, 0, runs);
        unpacking_[l] = RunTable<Memory>(runs);
      }
      // With hpZ a gathered image is the group's pieces end to end, padded to whole pieces.
      largest_ = std::max(largest_, hpz_ ? hpz_piece_elements(l) * std::size_t(hpz_->size())
                                         : layout.layer(l).flat_numel);
      if (layout.layer(l).numel < limits.persistence_threshold) {
        slots_[l].persistent.emplace(layout.layer(l).flat_numel);
        persistent_bytes_ += slots_[l].persistent->size_bytes();
      }
    }
  }

  ParameterGather(const ParameterGather&) = delete;
  ParameterGather& operator=(const ParameterGather&) = delete;
  ~ParameterGather() {
    for (Slot& s : slots_)
      detail::wait_quietly(s.work); // never leave a gather on freed buffers
  }

  // The parameters of layer l in order; the caller must call release(l) when done.
  template <BlockSource<T, Memory> Source>
  View<const T, Memory> acquire(Source& source, std::size_t l) {
    Slot& s = slots_.at(l);
    const std::size_t numel = layout_.layer(l).numel;
    if (s.persistent) {
      predict_and_prefetch(source, l); // past a small layer kept gathered, to the next one
      return s.persistent->view().first(numel);
    }
    const auto start = std::chrono::steady_clock::now();
    if (s.holders == 0 && !s.ordered) {
      ++counts_.on_demand;
      launch(source, l, /*prefetch=*/false);
    } else if (s.holders == 0) {
      ++counts_.prefetched;
    }
    if (s.work.pending()) {
      s.work.wait();
      prefetched_ -= layout_.layer(l).flat_numel;
    }
    exposed_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    complete(source, l);
    ++s.holders;
    try {
      predict_and_prefetch(source, l);
    } catch (...) {
      release(l); // no handle will release it
      throw;
    }
    return pool_[*s.ordered].view().first(numel);
  }

  void release(std::size_t l) {
    Slot& s = slots_.at(l);
    if (s.persistent) return;
    require(s.holders > 0,
            "engine: layer " + std::to_string(l) + " released more often than acquired");
    // A layer acquired again right away (the last layer of forward is the first of backward; a
    // re-run segment ends where its backward starts), or within the reuse distance, stays
    // gathered for it.
    if (--s.holders == 0 && !reused_soon(l)) drop(l);
  }

  // The weights may change only while no layer is held.
  void require_nothing_acquired() const {
    for (std::size_t l = 0; l < slots_.size(); ++l)
      require(slots_[l].holders == 0, "engine: step() while layer " + std::to_string(l) +
                                          " is still acquired; release its handle first");
  }

  // Before the weights change: prefetches are waited for and dropped.
  template <BlockSource<T, Memory> Source>
  void begin_update(Source& source) {
    require_nothing_acquired();
    for (std::size_t l = 0; l < slots_.size(); ++l)
      forget(source, l);
  }

  // A step ended, applied or skipped: the next acquisition starts the next step's order.
  void end_step() { order_.end_step(); }

  // Layer l's block is about to change (set_layer): a prefetched copy of it would be stale.
  template <BlockSource<T, Memory> Source>
  void invalidate(Source& source, std::size_t l) {
    require(slots_.at(l).holders == 0, "engine: set_layer(" + std::to_string(l) +
                                           ") while the layer is acquired; release its handle "
                                           "first");
    forget(source, l);
  }

  // After the weights changed: gathers the persistent layers again.
  template <BlockSource<T, Memory> Source>
  void refresh_persistent(Source& source) {
    // The layers kept gathered are read by work queued on the stream: it runs before they change.
    if constexpr (StreamSpace<Exec>)
      if (!detail::wait_dropped("gather.refresh")) exec_.fence();
    for (std::size_t l = 0; l < slots_.size(); ++l) {
      Slot& s = slots_[l];
      if (!s.persistent) continue;
      if (images_.in_order(l)) {
        gather_from(source, l, s.persistent->view(), false).wait();
      } else {
        Buffer<T, Memory> image(layout_.layer(l).flat_numel, uninitialized);
        gather_from(source, l, image.view(), false).wait();
        convert_runs(exec_, View<const T, Memory>(image.view()),
                     s.persistent->view().first(layout_.layer(l).numel), unpacking_[l]);
        if constexpr (StreamSpace<Exec>) exec_.fence(); // before the image goes
      }
      source.release(l);
    }
  }

  bool persistent(std::size_t l) const { return slots_.at(l).persistent.has_value(); }
  // Elements gathered now (held and prefetched), and the most ever.
  std::size_t live_elements() const noexcept { return live_; }
  std::size_t peak_live_elements() const noexcept { return peak_live_; }
  std::size_t pool_bytes() const noexcept {
    return pool_.size() * largest_ * sizeof(T) + (quantized_ ? quantized_->pool_bytes() : 0) +
           hpz_bytes_;
  }
  std::size_t persistent_bytes() const noexcept { return persistent_bytes_; }
  // Time acquire() waited for a gather that was already in flight.
  double exposed_seconds() const noexcept { return exposed_seconds_; }
  // How the gathers that acquire() needed came about, so far.
  GatherCounts counts() const noexcept {
    GatherCounts c = counts_;
    c.order_changes = order_.order_changes();
    return c;
  }

 private:
  struct Slot {
    std::optional<Buffer<T, Memory>> persistent;
    std::optional<std::size_t> ordered; // into pool_: the layer's parameters in order
    std::optional<std::size_t> image;   // into pool_: its image while in flight, if not in order
    std::optional<std::size_t> packed;  // qwZ's byte image of the gather in flight
    std::optional<Buffer<T, Memory>> hpz_piece; // this rank's piece of the gathered layer (hpZ)
    bool hpz_valid = false;                     // the piece holds the current weights
    bool from_hpz = false;                      // the gather in flight reads the group's pieces
    Work work;                                  // the gather in flight
    bool completing = false;                    // gathered since launch, not yet completed
    bool source_held = false;                   // the source's block is read by the gather
    int holders = 0;
  };

  bool reused_soon(std::size_t l) const {
    return order_.comes_next(l) ||
           order_.reacquired_within(l, limits_.max_reuse_distance,
                                    [&](std::size_t at) { return layout_.layer(at).flat_numel; });
  }

  // Layer l's blocks gathered into `image`, after the source's block arrived where it names a
  // stream for that (see the top of this file). A communicator not ordered after a caller stream
  // starts at once: the host waits for that stream first.
  template <class Source>
  Work gather_from(Source& source, std::size_t l, View<T, Memory> image, bool unordered) {
    const View<const T, Memory> block = source.block(l);
    if constexpr (requires { source.arrival(l, exec_); }) {
      const Exec arrival = source.arrival(l, exec_);
      if constexpr (!OrderedAfterCaller<Comm, Exec>)
        if (!unordered) arrival.fence();
      const CallerScope<Comm, Exec> after_arrival(unordered ? nullptr : &comm_, arrival);
      return gather_layer_image(comm_, layout_, l, block, image);
    } else {
      return gather_layer_image(comm_, layout_, l, block, image);
    }
  }

  // A gathered or prefetched copy of layer l that nobody holds goes away.
  template <class Source>
  void forget(Source& source, std::size_t l) {
    Slot& s = slots_[l];
    s.hpz_valid = false; // the weights are about to change
    if (!s.ordered) return;
    if (s.work.pending()) {
      s.work.wait();
      prefetched_ -= layout_.layer(l).flat_numel;
    }
    complete(source, l);
    drop(l);
  }

  template <class Source>
  void launch(Source& source, std::size_t l, bool prefetch) {
    Slot& s = slots_[l];
    s.completing = true;
    s.ordered = take_buffer();
    if (!images_.in_order(l)) s.image = take_buffer();
    const bool unordered = detail::wait_dropped("gather.caller");
    const CallerScope<Comm, Exec> caller(unordered ? nullptr : &comm_, exec_),
        hpz_caller(unordered ? nullptr : hpz_, exec_);
    order_after_consumers(s);
    live_ += layout_.layer(l).flat_numel;
    peak_live_ = std::max(peak_live_, live_);
    if (hpz_ && s.hpz_valid) {
      const std::size_t piece = hpz_piece_elements(l);
      const std::size_t target = s.image ? *s.image : *s.ordered;
      s.work = hpz_->all_gather(View<const T, Memory>(s.hpz_piece->view()),
                                pool_[target].view().first(piece * std::size_t(hpz_->size())));
      s.from_hpz = true;
    } else if (quantized_) {
      try {
        if constexpr (Memory::host_accessible)
          s.packed = quantized_->start(l, source.block(l), s.work);
      } catch (...) { // a block that cannot be quantized: nothing stays half launched
        if (s.image) free_.push_back(*s.image);
        s.image.reset();
        s.completing = false;
        drop(l);
        throw;
      }
      source.release(l); // packed into the gather's own buffer
    } else {
      const std::size_t target = s.image ? *s.image : *s.ordered;
      s.work = gather_from(source, l, pool_[target].view().first(layout_.layer(l).flat_numel),
                           unordered);
      s.source_held = true;
    }
    if (prefetch)
      prefetched_ += layout_.layer(l).flat_numel;
    else
      s.work.wait();
  }

  // The gather of layer l completed: its image becomes the parameters in order. Once per gather: a
  // layer acquired again while still gathered is complete already (its buffer then holds the
  // parameters in order, not the flat image hpZ's piece is cut from).
  template <class Source>
  void complete(Source& source, std::size_t l) {
    Slot& s = slots_[l];
    if (!s.completing) return;
    s.completing = false;
    if (s.source_held) {
      source.release(l);
      s.source_held = false;
    }
    const View<T, Memory> image =
        pool_[s.image ? *s.image : *s.ordered].view().first(layout_.layer(l).flat_numel);
    if constexpr (Memory::host_accessible) {
      if (s.packed) {
        quantized_->finish(l, *s.packed, image);
        s.packed.reset();
      }
    }
    if (hpz_ && !s.from_hpz) keep_hpz_piece(l, image);
    s.from_hpz = false;
    if (!s.image) return;
    convert_runs(exec_, View<const T, Memory>(image),
                 pool_[*s.ordered].view().first(layout_.layer(l).numel), unpacking_[l]);
    give_back(*s.image);
    s.image.reset();
  }

  void drop(std::size_t l) {
    Slot& s = slots_[l];
    give_back(*s.ordered);
    s.ordered.reset();
    live_ -= layout_.layer(l).flat_numel;
  }

  // Buffer b is free once the work queued so far has run (over a stream space: an event then).
  // Never throws (release() runs in LayerParameters' destructor): on a stream that has failed, the
  // event cannot be recorded and the buffer is not reused; the failure shows at the next wait.
  void give_back(std::size_t b) noexcept {
    if constexpr (StreamSpace<Exec>) {
      try {
        record(exec_, reusable_[b]);
      } catch (...) { // NOLINT(bugprone-empty-catch): the stream reports its failure itself
        return;
      }
    }
    free_.push_back(b);
  }

  std::size_t take_buffer() {
    if (!free_.empty()) {
      const std::size_t b = free_.back();
      free_.pop_back();
      return b;
    }
    pool_.emplace_back(largest_, uninitialized);
    if constexpr (StreamSpace<Exec>) reusable_.emplace_back();
    return pool_.size() - 1;
  }

  // Over a stream space: the gather into slot s's buffers starts after the work that read them
  // before they were given back (the consumers of the layer that had them, an unpacking). A
  // communicator ordered after a caller stream is pointed at this one (CallerScope) and waits on
  // its own; the host writes a packed image's dequantized values and the hpZ pieces after the
  // collective, which that ordering covers too. With any other communicator the host waits here.
  void order_after_consumers(const Slot& s) {
    if constexpr (StreamSpace<Exec> && !OrderedAfterCaller<Comm, Exec>) {
      if (detail::wait_dropped("gather.buffer_reusable")) return;
      reusable_[*s.ordered].synchronize();
      if (s.image) reusable_[*s.image].synchronize();
    }
  }

  // hpZ: layer l's flat image cut into one piece per rank of the secondary group.
  std::size_t hpz_piece_elements(std::size_t l) const {
    const std::size_t ranks = std::size_t(hpz_->size());
    return (layout_.layer(l).flat_numel + ranks - 1) / ranks;
  }

  // This rank's piece of a freshly gathered image of layer l, for the layer's later gathers.
  void keep_hpz_piece(std::size_t l, View<const T, Memory> image) {
    Slot& s = slots_[l];
    const std::size_t piece = hpz_piece_elements(l);
    if (!s.hpz_piece) {
      s.hpz_piece.emplace(piece); // zeroed: the last piece's padding stays zero
      hpz_bytes_ += s.hpz_piece->size_bytes();
    }
    const std::size_t begin = std::min(image.size(), piece * std::size_t(hpz_->rank()));
    const std::size_t count = std::min(piece, image.size() - begin);
    // On the host at once (a host communicator reads it next), or queued before anything given
    // back after it (a device communicator is pointed at the stream when it gathers from it).
    if constexpr (Memory::host_accessible)
      std::copy_n(image.data() + begin, count, s.hpz_piece->data());
    else
      copy(exec_, image.subview(begin, count), s.hpz_piece->view().first(count));
    // A device communicator not ordered after the stream would read the piece at once.
    if constexpr (!Memory::host_accessible && !OrderedAfterCaller<Comm, Exec>) exec_.fence();
    s.hpz_valid = true;
  }

  template <class Source>
  void predict_and_prefetch(Source& source, std::size_t l) {
    order_.observe(l);
    // Layer l is gathered, and layers kept gathered need no prefetch: the guess steps over them.
    const auto gathered_on_demand = [&](std::size_t at) {
      return at != l && !slots_[at].persistent;
    };
    const std::optional<std::size_t> next = order_.expected(1, gathered_on_demand);
    if (!next) return;
    Slot& s = slots_[*next];
    const std::size_t size = layout_.layer(*next).flat_numel;
    if (s.ordered || s.holders > 0) return;
    if (prefetched_ + size > limits_.prefetch_elements || live_ + size > limits_.max_live_elements)
      return;
    // A small gather may run on this thread (MpiCommunicator's inline calls): that time is waited.
    const auto start = std::chrono::steady_clock::now();
    launch(source, *next, /*prefetch=*/true);
    exposed_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // One further ahead: a source that reads from disk starts reading it now.
    if (const auto later = order_.expected(2, gathered_on_demand)) source.prefetch(*later);
  }

  Comm& comm_;
  const ShardLayout& layout_;
  const LayerImages& images_;
  Limits limits_;
  Comm* hpz_;
  Exec exec_;
  std::vector<Slot> slots_;
  std::vector<Buffer<T, Memory>> pool_; // handed-out views point into the buffers' memory
  std::size_t largest_ = 0;
  std::vector<std::size_t> free_;
  std::vector<RunTable<Memory>> unpacking_; // per layer whose image is out of order
  std::optional<QuantizedGather<T, Comm>> quantized_;
  AcquisitionOrder order_;
  GatherCounts counts_;
  std::size_t live_ = 0, peak_live_ = 0, prefetched_ = 0, persistent_bytes_ = 0, hpz_bytes_ = 0;
  double exposed_seconds_ = 0;
  // Over a stream space: per pool buffer, the point after the work queued before it was given back.
  typename detail::EventsOf<Exec>::type reusable_;
  DrainOnDestruction<Exec> drain_{exec_}; // last: queued unpacking runs before the pool goes
};

} // namespace zero
