#pragma once
// Collectives across nodes in two levels, so that a node's ranks cross the network once between
// them instead of once each. The ranks form a grid: node m (nodes ordered by their lowest rank),
// local index l (ranks of a node in rank order); every node has the same number of ranks.
//
// A reduce-scatter of one piece of every block: first within each node (node communicator, shared
// memory under Open MPI), local rank l receives its node's partial sums of "column" l, the blocks
// of the ranks with local index l on every node; then across nodes (the ranks with local index l),
// rank (m, l) receives every node's partial of its own block and sums them. Each node sends
// (nodes - 1) / nodes of the data once, where a flat exchange sends it once per local rank.
// An all-gather is the reverse: across nodes within the column first, then within the node.
// All-reduce and reduce are a reduce-scatter of equal blocks followed by an all-gather.
//
// The order of summation is fixed: within a node in local order, then the node partials in node
// order; every element of every collective (equal blocks, per-rank counts, all-reduce) is summed in
// that order, so results are bitwise reproducible and every ZeRO stage gets the same bits. It is
// not the rank order of the one-node transports: the same ranks spread over another number of
// nodes round differently. Half and bfloat16 accumulate in float within each level and are rounded
// once per level. Broadcast moves bytes only: Open MPI's own call, cut into chunks.
//
// A quantized reduce-scatter (ZeRO++'s qgZ: CollectiveArgs::wire) runs the same two levels as the
// paper's hierarchical all-to-all: every rank quantizes each piece it sends within the node, the
// receiver sums the dequantized pieces in float in local order, quantizes its node's partial of
// each block again, and the exchange across nodes carries those; the owner sums them in node
// order. Each value is thus rounded twice; the error bound is in docs/multinode.md.

#include "zero/comm/collective.hpp"
#include "zero/comm/detail/mpi_check.hpp"
#include "zero/comm/detail/mpi_wait.hpp"
#include "zero/comm/transport/host_reduce.hpp"
#include "zero/comm/transport/mpi_transport.hpp"
#include "zero/comm/transport/scratch_buffers.hpp"
#include "zero/comm/transport/typed_dispatch.hpp"
#include "zero/comm/transport/variable_blocks.hpp"
#include "zero/core/block_quantization.hpp"
#include "zero/core/convert.hpp"
#include "zero/core/error.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace zero::detail {

// Which node each rank is on: `node_of[r]` numbers nodes 0, 1, ... by their lowest rank.
struct NodeGrid {
  int nodes = 1;
  int local_size = 1;
  int node = 0;             // this rank's
  int local = 0;            // this rank's index on its node
  std::vector<int> rank_at; // rank_at[m * local_size + l]: the rank with local index l on node m

  int rank(int m, int l) const { return rank_at[slot(m, l)]; }
  std::size_t slot(int m, int l) const {
    return std::size_t(m) * std::size_t(local_size) + std::size_t(l);
  }

  // From every rank's node key (ranks with equal keys share a node); nullopt when the nodes hold
  // different numbers of ranks, which the two-level scheme cannot serve.
  static std::optional<NodeGrid> from_keys(std::span<const int> key_of_rank, int me) {
    const int size = static_cast<int>(key_of_rank.size());
    std::vector<int> first_rank_of_node; // in order of first appearance: by lowest rank
    std::vector<int> node_of(std::size_t(size), -1);
    for (int r = 0; r < size; ++r) {
      for (std::size_t m = 0; m < first_rank_of_node.size(); ++m)
        if (key_of_rank[std::size_t(first_rank_of_node[m])] == key_of_rank[std::size_t(r)])
          node_of[std::size_t(r)] = static_cast<int>(m);
      if (node_of[std::size_t(r)] < 0) {
        node_of[std::size_t(r)] = static_cast<int>(first_rank_of_node.size());
        first_rank_of_node.push_back(r);
      }
    }
    NodeGrid g;
    g.nodes = static_cast<int>(first_rank_of_node.size());
    if (size % g.nodes != 0) return std::nullopt;
    g.local_size = size / g.nodes;
    g.rank_at.assign(std::size_t(size), -1);
    std::vector<int> filled(std::size_t(g.nodes), 0);
    for (int r = 0; r < size; ++r) {
      const int m = node_of[std::size_t(r)];
      const int l = filled[std::size_t(m)]++;
      if (l >= g.local_size) return std::nullopt;
      g.rank_at[g.slot(m, l)] = r;
      if (r == me) {
        g.node = m;
        g.local = l;
      }
    }
    return g;
  }
};

class HierarchicalTransport {
 public:
  static constexpr bool quantizes_on_wire = true; // runs quantized reduce-scatters (qgZ)

  // Collective: splits `comm` into the node communicator and the across-nodes one.
  HierarchicalTransport(MPI_Comm comm, const NodeGrid& grid, std::size_t chunk_bytes)
      : comm_(comm), grid_(grid), chunk_bytes_(chunk_bytes) {
    ZERO_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    ZERO_CHECK_MPI(MPI_Comm_size(comm_, &size_));
    arrive_together(comm_, "splitting into nodes", {}, mpi_setup_spin);
    ZERO_CHECK_MPI(MPI_Comm_split(comm_, grid_.node, grid_.local, &node_comm_));
    arrive_together(comm_, "splitting across nodes", {}, mpi_setup_spin);
    ZERO_CHECK_MPI(MPI_Comm_split(comm_, grid_.local, grid_.node, &cross_comm_));
  }
  HierarchicalTransport(const HierarchicalTransport&) = delete;
  HierarchicalTransport& operator=(const HierarchicalTransport&) = delete;
  ~HierarchicalTransport() {
    if (abandoned_) return;
    MPI_Comm_free(&node_comm_);
    MPI_Comm_free(&cross_comm_);
  }
  // Freeing the communicators is collective: a rank that leaves on an error skips it.
  void abandon() noexcept { abandoned_ = true; }

  const NodeGrid& grid() const noexcept { return grid_; }

  void run(const CollectiveArgs& a) {
    if (a.kind == Collective::barrier) {
      arrive_together(comm_, "barrier");
      return;
    }
    run_typed(*this, a);
  }

 private:
  template <class Transport>
  friend void run_typed(Transport&, const CollectiveArgs&);
  template <class Transport, class T>
  friend bool run_quantized(Transport&, const CollectiveArgs&, const T*, T*);

  std::size_t ranks() const noexcept { return std::size_t(size_); }
  // Elements of every block that one step moves: about chunk_bytes on the wire per step.
  template <class T>
  std::size_t piece() const noexcept {
    return std::max<std::size_t>(1, chunk_bytes_ / sizeof(T) / ranks());
  }

  // all_reduce (root < 0) or reduce to root: equal blocks (the last padded), reduce-scattered and
  // gathered again, a chunk at a time.
  template <class T>
  void reduce(const T* in, T* out, std::size_t count, ReduceOp op, int root) {
    const std::size_t n = ranks();
    const std::size_t chunk = piece<T>() * n;
    for (std::size_t base = 0; base < count; base += chunk) {
      const std::size_t m = std::min(chunk, count - base);
      const std::size_t block = (m + n - 1) / n;
      T* padded = scratch_.get<T>(4, block * n);
      std::memcpy(padded, in + base, m * sizeof(T));
      std::memset(static_cast<void*>(padded + m), 0, (block * n - m) * sizeof(T));
      const std::vector<std::size_t> counts(n, block);
      reduce_scatter(padded, padded + block * std::size_t(rank_), counts, op);
      all_gather(padded + block * std::size_t(rank_), padded, counts);
      if (root < 0 || rank_ == root) std::memcpy(out + base, padded, m * sizeof(T));
    }
  }

  template <class T>
  void reduce_scatter(const T* in, T* out, std::size_t block, ReduceOp op) {
    reduce_scatter(in, out, std::vector<std::size_t>(ranks(), block), op);
  }
  template <class T>
  void all_gather(const T* in, T* out, std::size_t block) {
    all_gather(in, out, std::vector<std::size_t>(ranks(), block));
  }

  // Per step (one piece of every block): within the node, local rank l receives every local
  // rank's pieces of column l and sums them in local order; across nodes, it sends each node its
  // partial of that node's block of the column and sums what it receives in node order. Pieces are
  // packed before anything is written and later steps read only further along: in place is safe.
  template <class T>
  void reduce_scatter(const T* in, T* out, std::span<const std::size_t> counts, ReduceOp op) {
    const int N = grid_.nodes, L = grid_.local_size;
    const std::size_t step = piece<T>();
    const std::vector<std::size_t> starts = block_starts(counts);
    const auto locals = static_cast<std::size_t>(L), nodes = static_cast<std::size_t>(N);
    std::vector<int> send_bytes(locals), send_at(locals), recv_bytes(locals), recv_at(locals);
    std::vector<int> cross_send(nodes), cross_send_at(nodes), cross_recv(nodes),
        cross_recv_at(nodes);
    std::vector<const T*> sources;
    // Level one sums; avg divides once, at the end of level two.
    const ReduceOp within = op == ReduceOp::avg ? ReduceOp::sum : op;
    for (std::size_t offset = 0; offset < largest_block(counts); offset += step) {
      auto p = [&](int m, int l) {
        return piece_of(counts[std::size_t(grid_.rank(m, l))], offset, step);
      };
      // Level one: pack column l's pieces for local rank l, node by node.
      T* packed = scratch_.get<T>(0, step * ranks());
      std::size_t packed_count = 0;
      for (int l = 0; l < L; ++l) {
        send_at[std::size_t(l)] = static_cast<int>(packed_count * sizeof(T));
        for (int m = 0; m < N; ++m) {
          const int r = grid_.rank(m, l);
          const std::size_t n = p(m, l);
          if (n != 0)
            std::memcpy(packed + packed_count, in + starts[std::size_t(r)] + offset, n * sizeof(T));
          packed_count += n;
        }
        send_bytes[std::size_t(l)] =
            static_cast<int>(packed_count * sizeof(T)) - send_at[std::size_t(l)];
      }
      std::size_t column = 0; // my column's elements in this step
      for (int m = 0; m < N; ++m)
        column += p(m, grid_.local);
      T* received = scratch_.get<T>(1, column * locals);
      for (int l = 0; l < L; ++l) {
        recv_bytes[std::size_t(l)] = static_cast<int>(column * sizeof(T));
        recv_at[std::size_t(l)] = static_cast<int>(std::size_t(l) * column * sizeof(T));
      }
      ZERO_CHECK_MPI(MPI_Alltoallv(packed, send_bytes.data(), send_at.data(), MPI_BYTE, received,
                                   recv_bytes.data(), recv_at.data(), MPI_BYTE, node_comm_));
      T* partial = scratch_.get<T>(2, column);
      sources.resize(locals);
      for (int l = 0; l < L; ++l)
        sources[std::size_t(l)] = received + std::size_t(l) * column;
      if (column != 0) reduce_sources<T>(partial, sources, column, within, size_);
      // Level two: node m gets my node's partial of block (m, l); I get every node's of mine.
      const std::size_t own = p(grid_.node, grid_.local);
      std::size_t at = 0;
      for (int m = 0; m < N; ++m) {
        cross_send[std::size_t(m)] = static_cast<int>(p(m, grid_.local) * sizeof(T));
        cross_send_at[std::size_t(m)] = static_cast<int>(at * sizeof(T));
        at += p(m, grid_.local);
        cross_recv[std::size_t(m)] = static_cast<int>(own * sizeof(T));
        cross_recv_at[std::size_t(m)] = static_cast<int>(std::size_t(m) * own * sizeof(T));
      }
      T* partials = scratch_.get<T>(3, own * nodes);
      ZERO_CHECK_MPI(MPI_Alltoallv(partial, cross_send.data(), cross_send_at.data(), MPI_BYTE,
                                   partials, cross_recv.data(), cross_recv_at.data(), MPI_BYTE,
                                   cross_comm_));
      sources.resize(nodes);
      for (int m = 0; m < N; ++m)
        sources[std::size_t(m)] = partials + std::size_t(m) * own;
      if (own != 0) reduce_sources<T>(out + offset, sources, own, op, size_);
    }
  }

  template <class T>
  void quantized_reduce_scatter(const T* in, T* out, std::size_t block, ReduceOp op,
                                const BlockQuantization& q) {
    quantized_reduce_scatter(in, out, std::vector<std::size_t>(ranks(), block), op, q);
  }

  // reduce_scatter above with the pieces on the wire packed as q's blocks: each (node, local) piece
  // of a step is packed on its own, so every receiver knows its sizes from the counts alone. Sums
  // run in float, in local then node order; a non-finite value makes its block NaN on arrival, so
  // that an overflow still reaches the loss scaler.
  template <class T>
  void quantized_reduce_scatter(const T* in, T* out, std::span<const std::size_t> counts,
                                ReduceOp op, const BlockQuantization& q) {
    const int N = grid_.nodes, L = grid_.local_size;
    const std::size_t step = piece<T>();
    const std::vector<std::size_t> starts = block_starts(counts);
    const auto locals = static_cast<std::size_t>(L), nodes = static_cast<std::size_t>(N);
    std::vector<int> send_bytes(locals), send_at(locals), recv_bytes(locals), recv_at(locals);
    std::vector<int> cross_send(nodes), cross_send_at(nodes), cross_recv(nodes),
        cross_recv_at(nodes);
    auto pack = [&](const auto* values, std::size_t n, std::uint8_t* to) {
      using V = std::remove_cv_t<std::remove_pointer_t<decltype(values)>>;
      quantize_blocks<V>(q, View<const V>(values, n), std::span(to, q.packed_bytes(n)),
                         "quantized reduce_scatter", NonFinite::propagate);
      return q.packed_bytes(n);
    };
    for (std::size_t offset = 0; offset < largest_block(counts); offset += step) {
      auto p = [&](int m, int l) {
        return piece_of(counts[std::size_t(grid_.rank(m, l))], offset, step);
      };
      // Level one: column l's pieces, each packed, for local rank l, node by node.
      std::uint8_t* packed = scratch_.get<std::uint8_t>(0, ranks() * q.packed_bytes(step));
      std::size_t packed_at = 0;
      for (int l = 0; l < L; ++l) {
        send_at[std::size_t(l)] = static_cast<int>(packed_at);
        for (int m = 0; m < N; ++m)
          packed_at += pack(in + starts[std::size_t(grid_.rank(m, l))] + offset, p(m, l),
                            packed + packed_at);
        send_bytes[std::size_t(l)] = static_cast<int>(packed_at) - send_at[std::size_t(l)];
      }
      std::size_t column = 0, column_bytes = 0; // my column in this step, as values and packed
      for (int m = 0; m < N; ++m) {
        column += p(m, grid_.local);
        column_bytes += q.packed_bytes(p(m, grid_.local));
      }
      std::uint8_t* received = scratch_.get<std::uint8_t>(1, column_bytes * locals);
      for (int l = 0; l < L; ++l) {
        recv_bytes[std::size_t(l)] = static_cast<int>(column_bytes);
        recv_at[std::size_t(l)] = static_cast<int>(std::size_t(l) * column_bytes);
      }
      ZERO_CHECK_MPI(MPI_Alltoallv(packed, send_bytes.data(), send_at.data(), MPI_BYTE, received,
                                   recv_bytes.data(), recv_at.data(), MPI_BYTE, node_comm_));
      float* partial = scratch_.get<float>(2, column);
      std::fill_n(partial, column, 0.0f);
      for (std::size_t l = 0; l < locals; ++l) {
        const std::uint8_t* from = received + l * column_bytes;
        std::size_t at = 0;
        for (int m = 0; m < N; ++m) {
          const std::size_t n = p(m, grid_.local);
          dequantize_add_blocks(q, std::span(from, q.packed_bytes(n)), std::span(partial + at, n));
          from += q.packed_bytes(n);
          at += n;
        }
      }
      // Level two: node m gets my node's partial of block (m, l), packed again.
      const std::size_t own = p(grid_.node, grid_.local);
      std::uint8_t* partials_out = scratch_.get<std::uint8_t>(3, column_bytes);
      std::size_t at = 0, at_bytes = 0;
      for (int m = 0; m < N; ++m) {
        const std::size_t n = p(m, grid_.local);
        cross_send_at[std::size_t(m)] = static_cast<int>(at_bytes);
        cross_send[std::size_t(m)] =
            static_cast<int>(pack(partial + at, n, partials_out + at_bytes));
        at += n;
        at_bytes += q.packed_bytes(n);
        cross_recv[std::size_t(m)] = static_cast<int>(q.packed_bytes(own));
        cross_recv_at[std::size_t(m)] = static_cast<int>(std::size_t(m) * q.packed_bytes(own));
      }
      std::uint8_t* partials_in = scratch_.get<std::uint8_t>(4, q.packed_bytes(own) * nodes);
      ZERO_CHECK_MPI(MPI_Alltoallv(partials_out, cross_send.data(), cross_send_at.data(), MPI_BYTE,
                                   partials_in, cross_recv.data(), cross_recv_at.data(), MPI_BYTE,
                                   cross_comm_));
      float* sums = partial; // level one's partials are sent: the buffer is free again
      std::fill_n(sums, own, 0.0f);
      for (std::size_t m = 0; m < nodes; ++m)
        dequantize_add_blocks(q,
                              std::span(partials_in + m * q.packed_bytes(own), q.packed_bytes(own)),
                              std::span(sums, own));
      if (op == ReduceOp::avg)
        for (std::size_t i = 0; i < own; ++i)
          sums[i] /= static_cast<float>(size_);
      convert_n(sums, out + offset, own);
    }
  }

  // Per step: across nodes, the column's pieces (blocks (m, l) for every node m); within the
  // node, every local rank's column; then unpacked into rank order. In place (`in` inside `out`)
  // is safe: the own piece is read before `out` is written, with the same values.
  template <class T>
  void all_gather(const T* in, T* out, std::span<const std::size_t> counts) {
    const int N = grid_.nodes, L = grid_.local_size;
    const std::size_t step = piece<T>();
    const std::vector<std::size_t> starts = block_starts(counts);
    const auto locals = static_cast<std::size_t>(L), nodes = static_cast<std::size_t>(N);
    std::vector<int> cross_bytes(nodes), cross_at(nodes), node_bytes(locals), node_at(locals);
    for (std::size_t offset = 0; offset < largest_block(counts); offset += step) {
      auto p = [&](int m, int l) {
        return piece_of(counts[std::size_t(grid_.rank(m, l))], offset, step);
      };
      std::size_t column = 0;
      for (int m = 0; m < N; ++m) {
        cross_bytes[std::size_t(m)] = static_cast<int>(p(m, grid_.local) * sizeof(T));
        cross_at[std::size_t(m)] = static_cast<int>(column * sizeof(T));
        column += p(m, grid_.local);
      }
      T* mine = scratch_.get<T>(0, column);
      const std::size_t own = p(grid_.node, grid_.local);
      ZERO_CHECK_MPI(MPI_Allgatherv(own != 0 ? in + offset : in, static_cast<int>(own * sizeof(T)),
                                    MPI_BYTE, mine, cross_bytes.data(), cross_at.data(), MPI_BYTE,
                                    cross_comm_));
      std::size_t everything = 0;
      for (int l = 0; l < L; ++l) {
        std::size_t c = 0;
        for (int m = 0; m < N; ++m)
          c += p(m, l);
        node_bytes[std::size_t(l)] = static_cast<int>(c * sizeof(T));
        node_at[std::size_t(l)] = static_cast<int>(everything * sizeof(T));
        everything += c;
      }
      T* columns = scratch_.get<T>(1, everything);
      ZERO_CHECK_MPI(MPI_Allgatherv(mine, static_cast<int>(column * sizeof(T)), MPI_BYTE, columns,
                                    node_bytes.data(), node_at.data(), MPI_BYTE, node_comm_));
      std::size_t from = 0;
      for (int l = 0; l < L; ++l)
        for (int m = 0; m < N; ++m) {
          const std::size_t n = p(m, l);
          if (n != 0)
            std::memcpy(out + starts[std::size_t(grid_.rank(m, l))] + offset, columns + from,
                        n * sizeof(T));
          from += n;
        }
    }
  }

  template <class T>
  void broadcast(const T* in, T* out, std::size_t count, int root) {
    chunked_broadcast(comm_, rank_, in, out, count, root, chunk_bytes_);
  }

  MPI_Comm comm_;
  NodeGrid grid_;
  std::size_t chunk_bytes_;
  int rank_ = 0;
  int size_ = 1;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
  MPI_Comm cross_comm_ = MPI_COMM_NULL;
  bool abandoned_ = false;
  ScratchBuffers<5> scratch_;
};

} // namespace zero::detail
