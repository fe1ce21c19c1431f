#pragma once
// Collectives among ranks of one node through an MPI-3 shared-memory window.
//
// Each rank owns a staging area of two chunk buffers (double buffering) and, on its own cache line,
// a phase counter and the signature of the call it is in (kind, type, count, reduction, root, and
// a fingerprint of the per-rank counts when blocks differ in size). A collective is cut into
// chunks; every chunk is "publish into my buffer, signal, wait for all, read the others' buffers".
// Reading chunk g's buffers finishes before a rank signals in chunk g + 1, and nobody writes chunk
// g + 2 (the same buffer) before everybody's signal in chunk g + 1 arrived, so two buffers suffice
// without any extra synchronisation.
//
// Every phase compares the signatures, so ranks that called different collectives (or passed
// different per-rank counts) throw the same mismatch error on every rank at their first phase, even
// without validation mode, instead of pairing one rank's barrier with another's all_reduce. The
// message shows every rank's call, counts included, which the ranks then exchange. (A rank that
// skips a call altogether is left to the watchdog.) A signature slot is read at most one phase
// after it was written, and a rank cannot run two phases ahead of another, so two slots, by phase
// parity, suffice.
//
// Reductions split each chunk into one sub-range per rank: rank r reduces sub-range r over all
// ranks' contributions, in rank order (deterministic, and half/bfloat16 accumulate in float), and
// everyone copies the reduced sub-ranges out. Memory traffic per rank is about five passes over the
// data, against Open MPI's default algorithms which re-allocate temporaries and collapse to under
// 1 GB/s on large messages.
//
// Blocks of different sizes run on the same pipeline, in shm_variable_blocks.hpp.

#include "zero/comm/collective.hpp"
#include "zero/comm/detail/mpi_check.hpp"
#include "zero/comm/detail/mpi_wait.hpp"
#include "zero/comm/detail/validation.hpp"
#include "zero/comm/transport/host_reduce.hpp"
#include "zero/comm/transport/native_collectives.hpp"
#include "zero/comm/transport/peer_signal.hpp"
#include "zero/comm/transport/shm_variable_blocks.hpp"
#include "zero/comm/transport/typed_dispatch.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/stream_copy.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <thread>
#include <utility>
#include <vector>

namespace zero::detail {

class ShmTransport {
 public:
  // Collective over `comm`, whose ranks must share one node.
  // Collectives that Open MPI does faster on one node (see prefers_native) are handed to it,
  // after the usual signature check.
  ShmTransport(MPI_Comm comm, std::size_t chunk_bytes,
               std::size_t native_gathers_from_bytes = SIZE_MAX, std::size_t native_below_bytes = 0,
               bool native_when_oversubscribed = false)
      : comm_(comm), native_gathers_from_bytes_(native_gathers_from_bytes),
        native_below_bytes_(native_below_bytes) {
    ZERO_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    ZERO_CHECK_MPI(MPI_Comm_size(comm_, &size_));
    // More ranks than cores: Open MPI's calls wait by spinning, on the core the peer they wait for
    // needs, and collapse (3 ranks on 2 cores: its 1 MiB all_gather at 0.26x of the pipeline's
    // speed, 0.01x beside a busy core), while the pipeline's waits sleep. Every rank of the
    // communicator sees the same counts, so all decide alike.
    if (!native_when_oversubscribed &&
        static_cast<unsigned>(size_) > std::thread::hardware_concurrency()) {
      native_gathers_from_bytes_ = SIZE_MAX;
      native_below_bytes_ = 0;
    }
    // A chunk holds whole 64-byte lines for every rank's sub-range.
    chunk_bytes_ = std::max<std::size_t>(chunk_bytes / 64 * 64, 4096);
    const std::size_t segment = sizeof(Header) + 2 * chunk_bytes_;
    MPI_Info info;
    ZERO_CHECK_MPI(MPI_Info_create(&info));
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void* base = nullptr;
    arrive_together(comm_, "creating the shared-memory window", {}, mpi_setup_spin);
    const int status =
        MPI_Win_allocate_shared(static_cast<MPI_Aint>(segment), 1, info, comm_, &base, &window_);
    MPI_Info_free(&info);
    ZERO_CHECK_MPI(status);
    new (base) Header();
    segments_.resize(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      MPI_Aint size = 0;
      int unit = 0;
      void* p = nullptr;
      ZERO_CHECK_MPI(MPI_Win_shared_query(window_, r, &size, &unit, &p));
      segments_[static_cast<std::size_t>(r)] = static_cast<std::byte*>(p);
    }
    // Every counter initialised before anyone polls it.
    arrive_together(comm_, "initialising the shared-memory window", {}, mpi_setup_spin);
  }

  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;
  ~ShmTransport() {
    if (window_ != MPI_WIN_NULL) ZERO_LOG_MPI(MPI_Win_free(&window_));
  }
  // Forgets the window without freeing it: freeing is collective, and a rank leaving on an error
  // must not wait for peers that may never come (the memory goes with the process).
  void abandon() noexcept { window_ = MPI_WIN_NULL; }

  std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }

  // Measured on 2-core nodes (docs/collective-benchmark.md, "Small messages and Open MPI"): with
  // peers that sleep instead of yielding, the pipeline beats Open MPI's calls at every size but
  // one: gathers from 1 MiB, where it is 1.4-3.5x faster when the host runs the two virtual CPUs on
  // cores that share a cache and 0.45-0.5x when it does not, while Open MPI's single-copy
  // transfers read the peer's buffer directly and hold in both. Hence
  // CommOptions::native_gathers_from_bytes. A gather does no arithmetic, and a 2-rank sum is
  // a0 + a1 in any algorithm, so results stay bit-identical and rank-ordered whichever runs; with 3
  // or more ranks the order of MPI's sums is unknown, so those reductions always stay here.
  // A 2-rank reduce-scatter is handed over only below the smaller of native_below_bytes and this:
  static constexpr std::size_t native_reduce_scatter_below_bytes = std::size_t{128} << 10;

  bool prefers_native(const CollectiveArgs& a) const {
    if (!native_supports(a, size_)) return false;
    if (a.kind == Collective::all_gather || a.kind == Collective::broadcast)
      return a.payload_bytes(size_) >= native_gathers_from_bytes_;
    if (size_ != 2) return false;
    if (a.kind == Collective::reduce_scatter)
      return a.payload_bytes(size_) <
             std::min(native_below_bytes_, native_reduce_scatter_below_bytes);
    return a.kind == Collective::all_reduce && a.payload_bytes(size_) < native_below_bytes_;
  }

  void run(const CollectiveArgs& a) {
    signature_ = CallSignature::of(a, 0);
    counts_ = a.counts;
    // Calls that move nothing (on any rank) still meet once, so that their signatures are compared.
    if (a.payload_bytes(size_) == 0) {
      signal_and_wait();
      return;
    }
    if (prefers_native(a)) {
      signal_and_wait(); // mismatched calls are still caught here, before any data moves
      run_native(comm_, a);
      return;
    }
    set_streaming(a.recv_count(size_) * a.element_bytes());
    run_typed(*this, a);
  }

 private:
  template <class Transport>
  friend void run_typed(Transport&, const CollectiveArgs&);
  template <class Shm>
  friend class ShmVariableBlocks;
  // Two cache lines per rank (no false sharing between ranks' counters); MPI only promises the
  // window's base 8-byte alignment, which is all the atomics need.
  struct Header {
    std::atomic<std::uint64_t> phase{0};
    PeerSignal signal; // phase's low half, for the futex a waiting peer sleeps on
    std::uint64_t padding[5] = {};
    // By phase parity: count, packed fields, fingerprint of the per-rank counts.
    std::atomic<std::uint64_t> signature[2][3] = {};
    std::uint64_t padding2[2] = {};
  };
  static_assert(sizeof(Header) == 128 && alignof(Header) == 8);

  Header& header(int r) const {
    return *std::launder(reinterpret_cast<Header*>(segments_[std::size_t(r)]));
  }
  static std::uint64_t packed(const CallSignature& s) noexcept {
    return std::uint64_t{s.kind} | std::uint64_t{s.dtype} << 8 | std::uint64_t{s.op} << 16 |
           std::uint64_t{s.wire_bits} << 24 | std::uint64_t(std::uint32_t(s.root)) << 32;
  }
  static CallSignature unpacked(std::uint64_t count, std::uint64_t fields,
                                std::uint64_t counts_hash) noexcept {
    CallSignature s{};
    s.count = count;
    s.counts_hash = counts_hash;
    s.kind = static_cast<std::uint8_t>(fields);
    s.dtype = static_cast<std::uint8_t>(fields >> 8);
    s.op = static_cast<std::uint8_t>(fields >> 16);
    s.wire_bits = static_cast<std::uint8_t>(fields >> 24);
    s.root = static_cast<std::int32_t>(fields >> 32);
    return s;
  }
  template <class T>
  T* buffer(int r, int which) const {
    return reinterpret_cast<T*>(segments_[std::size_t(r)] + sizeof(Header) +
                                std::size_t(which) * chunk_bytes_);
  }
  int next_buffer() noexcept { return static_cast<int>(chunk_++ & 1u); }

  void signal_and_wait() {
    ++phase_;
    const std::size_t slot = phase_ & 1u;
    Header& mine = header(rank_);
    mine.signature[slot][0].store(signature_.count, std::memory_order_relaxed);
    mine.signature[slot][1].store(packed(signature_), std::memory_order_relaxed);
    mine.signature[slot][2].store(signature_.counts_hash, std::memory_order_relaxed);
    mine.phase.store(phase_, std::memory_order_release);
    signal_peers(mine.signal, static_cast<std::uint32_t>(phase_));
    bool agree = true;
    for (int r = 0; r < size_; ++r) {
      Header& other = header(r);
      if (r != rank_)
        wait_for_peer(other.signal,
                      [&] { return other.phase.load(std::memory_order_acquire) >= phase_; });
      agree = agree &&
              other.signature[slot][0].load(std::memory_order_relaxed) == signature_.count &&
              other.signature[slot][1].load(std::memory_order_relaxed) == packed(signature_) &&
              other.signature[slot][2].load(std::memory_order_relaxed) == signature_.counts_hash;
    }
    if (!agree) report_mismatch(slot);
  }

  [[noreturn]] void report_mismatch(std::size_t slot) {
    std::vector<CallSignature> calls;
    for (int r = 0; r < size_; ++r) {
      const auto& words = header(r).signature[slot];
      calls.push_back(unpacked(words[0].load(std::memory_order_relaxed),
                               words[1].load(std::memory_order_relaxed),
                               words[2].load(std::memory_order_relaxed)));
    }
    // Every rank stops at this same phase, after all reads of earlier chunks: the buffers are free,
    // so all restart buffer parity together.
    chunk_ = 0;
    fail_mismatch(comm_, "collective mismatch", calls, counts_);
  }

  // [begin, end) of rank r's sub-range of a chunk of m elements, in whole cache lines.
  template <class T>
  std::pair<std::size_t, std::size_t> sub_range(std::size_t m, int r) const noexcept {
    constexpr std::size_t line = 64 / sizeof(T) > 0 ? 64 / sizeof(T) : 1;
    const std::size_t ranks = static_cast<std::size_t>(size_);
    const std::size_t part = (m + ranks * line - 1) / (ranks * line) * line;
    const std::size_t begin = std::min(m, part * static_cast<std::size_t>(r));
    return {begin, std::min(m, begin + part)};
  }

  // Copies into staging buffers stay in cache for the peers; copies into the caller's output
  // stream past the cache when the whole output is too big to stay there anyway.
  template <class T>
  static void copy(const T* from, T* to, std::size_t n) noexcept {
    copy_bytes(to, from, n * sizeof(T), false);
  }
  template <class T>
  void copy_out(const T* from, T* to, std::size_t n) const noexcept {
    copy_bytes(to, from, n * sizeof(T), streaming_output_);
  }
  void set_streaming(std::size_t output_bytes) noexcept {
    streaming_output_ = output_bytes >= streaming_threshold_bytes;
  }

  // all_reduce (root < 0) or reduce to `root`.
  template <class T>
  void reduce(const T* in, T* out, std::size_t count, ReduceOp op, int root) {
    const std::size_t per_chunk = chunk_bytes_ / sizeof(T);
    std::vector<const T*> sources(static_cast<std::size_t>(size_));
    for (std::size_t base = 0; base < count; base += per_chunk) {
      const std::size_t m = std::min(per_chunk, count - base);
      const int b = next_buffer();
      T* mine = buffer<T>(rank_, b);
      const auto [lo, hi] = sub_range<T>(m, rank_);
      // Publish what the others reduce: all but my own sub-range, which I read from my input.
      copy(in + base, mine, lo);
      copy(in + base + hi, mine + hi, m - hi);
      signal_and_wait();
      for (int r = 0; r < size_; ++r)
        sources[std::size_t(r)] = r == rank_ ? in + base + lo : buffer<T>(r, b) + lo;
      reduce_sources<T>(mine + lo, sources, hi - lo, op, size_);
      signal_and_wait();
      if (root >= 0 && root != rank_) continue;
      for (int r = 0; r < size_; ++r) {
        const auto [rlo, rhi] = sub_range<T>(m, r);
        copy_out(buffer<T>(r, b) + rlo, out + base + rlo, rhi - rlo);
      }
    }
  }

  template <class T>
  void reduce_scatter(const T* in, T* out, std::size_t block, ReduceOp op) {
    const std::size_t ranks = static_cast<std::size_t>(size_);
    const std::size_t piece = std::max<std::size_t>(1, chunk_bytes_ / sizeof(T) / ranks);
    std::vector<const T*> sources(ranks);
    for (std::size_t offset = 0; offset < block; offset += piece) {
      const std::size_t p = std::min(piece, block - offset);
      const int b = next_buffer();
      T* mine = buffer<T>(rank_, b);
      for (int r = 0; r < size_; ++r)
        if (r != rank_)
          copy(in + std::size_t(r) * block + offset, mine + std::size_t(r) * piece, p);
      signal_and_wait();
      for (int r = 0; r < size_; ++r)
        sources[std::size_t(r)] = r == rank_ ? in + std::size_t(rank_) * block + offset
                                             : buffer<T>(r, b) + std::size_t(rank_) * piece;
      reduce_sources<T>(out + offset, sources, p, op, size_);
    }
  }

  template <class T>
  void reduce_scatter(const T* in, T* out, std::span<const std::size_t> counts, ReduceOp op) {
    ShmVariableBlocks(*this).reduce_scatter(in, out, counts, op);
  }

  template <class T>
  void all_gather(const T* in, T* out, std::span<const std::size_t> counts) {
    ShmVariableBlocks(*this).all_gather(in, out, counts);
  }

  template <class T>
  void all_gather(const T* in, T* out, std::size_t block) {
    const std::size_t piece = chunk_bytes_ / sizeof(T);
    for (std::size_t offset = 0; offset < block; offset += piece) {
      const std::size_t p = std::min(piece, block - offset);
      const int b = next_buffer();
      copy(in + offset, buffer<T>(rank_, b), p);
      signal_and_wait();
      for (int r = 0; r < size_; ++r) {
        T* target = out + std::size_t(r) * block + offset;
        copy_out(r == rank_ ? in + offset : buffer<T>(r, b), target, p);
      }
    }
  }

  template <class T>
  void broadcast(const T* in, T* out, std::size_t count, int root) {
    const std::size_t piece = chunk_bytes_ / sizeof(T);
    for (std::size_t offset = 0; offset < count; offset += piece) {
      const std::size_t p = std::min(piece, count - offset);
      const int b = next_buffer();
      if (rank_ == root) {
        copy(in + offset, buffer<T>(root, b), p);
        copy(in + offset, out + offset, p);
      }
      signal_and_wait();
      if (rank_ != root) copy_out(buffer<T>(root, b), out + offset, p);
    }
  }

  MPI_Comm comm_;
  std::size_t native_gathers_from_bytes_ = SIZE_MAX;
  std::size_t native_below_bytes_ = 0;
  MPI_Win window_ = MPI_WIN_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::size_t chunk_bytes_ = 0;
  std::vector<std::byte*> segments_;
  std::uint64_t phase_ = 0; // same sequence on every rank: one per signal
  std::uint64_t chunk_ = 0; // chunks so far, across operations: picks the buffer
  // Outputs above this size are written with non-temporal stores (about the shared L3 of a
  // 2-core slice; smaller outputs are likely read again soon and stay cached).
  static constexpr std::size_t streaming_threshold_bytes = std::size_t{8} << 20;
  bool streaming_output_ = false;
  CallSignature signature_{};
  std::span<const std::size_t> counts_; // of the call being run, for a mismatch message
};

} // namespace zero::detail
