#pragma once
// CountingCommunicator<C>: wraps any communicator and records, per collective, the calls made and
// the data they moved. It is how zero proves the ZeRO paper's communication volumes: a step of
// stages 0-2 moves 2Ψ elements per rank, stage 3 moves 3Ψ.
//
// Two measures per op:
// - `elements`: the op's full buffer (the larger of input and output), as nccl-tests' "size";
// - `volume_elements()`: the paper's accounting, where an all-reduce of Ψ elements counts 2Ψ
//   (a reduce-scatter plus an all-gather) and every other op counts its full buffer once.
// Blocks of different sizes count the same way: a reduce-scatter its whole input, an all-gather its
// whole output. The wrapper offers them when the wrapped communicator does, and so quantized
// reduce-scatters (qgZ), whose bytes are those of the input packed as blocks where the wrapped
// communicator quantizes (quantizes_on_wire()).

#include "zero/comm/communicator.hpp"
#include "zero/comm/detail/collective_api.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace zero {

struct CollectiveCount {
  std::uint64_t calls = 0;
  std::uint64_t elements = 0; // sum of the ops' full buffer sizes
  std::uint64_t bytes = 0;
};

struct CommStats {
  std::array<CollectiveCount, std::size(all_collectives)> by_op{};

  const CollectiveCount& operator[](Collective c) const noexcept {
    return by_op[static_cast<std::size_t>(c)];
  }
  CollectiveCount& operator[](Collective c) noexcept { return by_op[static_cast<std::size_t>(c)]; }

  // Elements moved per rank in the ZeRO paper's accounting (all-reduce counts twice).
  std::uint64_t volume_elements() const noexcept {
    std::uint64_t total = 0;
    for (Collective c : all_collectives)
      total += (c == Collective::all_reduce ? 2 : 1) * (*this)[c].elements;
    return total;
  }
  std::uint64_t total_bytes() const noexcept {
    std::uint64_t total = 0;
    for (const auto& count : by_op)
      total += count.bytes;
    return total;
  }
  std::uint64_t total_calls() const noexcept {
    std::uint64_t total = 0;
    for (const auto& count : by_op)
      total += count.calls;
    return total;
  }

  // Traffic of several communicators together (e.g. a data-parallel group and a shard group).
  CommStats& operator+=(const CommStats& more) noexcept {
    for (std::size_t i = 0; i < by_op.size(); ++i) {
      by_op[i].calls += more.by_op[i].calls;
      by_op[i].elements += more.by_op[i].elements;
      by_op[i].bytes += more.by_op[i].bytes;
    }
    return *this;
  }
  friend CommStats operator+(CommStats a, const CommStats& b) noexcept { return a += b; }

  friend CommStats operator-(CommStats a, const CommStats& b) noexcept {
    for (std::size_t i = 0; i < a.by_op.size(); ++i) {
      a.by_op[i].calls -= b.by_op[i].calls;
      a.by_op[i].elements -= b.by_op[i].elements;
      a.by_op[i].bytes -= b.by_op[i].bytes;
    }
    return a;
  }
};

template <Communicator C>
class CountingCommunicator
    : public detail::CollectiveApi<CountingCommunicator<C>, typename C::memory_space> {
 public:
  using memory_space = typename C::memory_space;
  static constexpr bool supports_variable_counts = VariableCountCommunicator<C>;
  static constexpr bool supports_wire_quantization = QuantizingCommunicator<C>;

  explicit CountingCommunicator(C inner) : inner_(std::move(inner)) {}

  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  C& inner() noexcept { return inner_; }
  const C& inner() const noexcept { return inner_; }

  // Counting keeps the wrapped communicator's ordering after a caller stream (OrderedAfterCaller,
  // zero/core/stream_space.hpp): without these the engine would see a counted StagedCommunicator
  // as ordered by the host, and wait on the host before every collective.
  template <class Space>
  requires requires(C& comm, Space caller) { comm.set_caller(caller); }
  void set_caller(Space caller) { inner_.set_caller(std::move(caller)); }
  template <class Inner = C>
  requires requires(const Inner& comm) { comm.caller(); }
  auto caller() const { return inner_.caller(); }

  const CommStats& stats() const noexcept { return stats_; }
  void reset_stats() noexcept { stats_ = {}; }

  // The sub-group counts its own traffic.
  CountingCommunicator split(int color, int key) {
    return CountingCommunicator(inner_.split(color, key));
  }

  Work submit(const CollectiveArgs& args) {
    CollectiveCount& count = stats_[args.kind];
    const std::size_t ranks = static_cast<std::size_t>(inner_.size());
    const std::size_t elements =
        args.kind == Collective::barrier
            ? 0
            : std::max(args.send_count(int(ranks)), args.recv_count(int(ranks)));
    ++count.calls;
    count.elements += elements;
    count.bytes += args.wire && quantizes_on_wire() ? args.wire->packed_bytes(elements)
                                                    : elements * args.element_bytes();
    return forward(args);
  }

 private:
  // Our own communicators take the type-erased call; any other one gets its typed API.
  Work forward(const CollectiveArgs& a) {
    if constexpr (requires { inner_.submit(a); }) {
      return inner_.submit(a);
    } else {
      if (a.kind == Collective::barrier) {
        inner_.barrier();
        return Work();
      }
      return visit_dtype(a.dtype, [&](auto tag) -> Work {
        using T = decltype(tag);
        const int n = inner_.size();
        View<const T, memory_space> in(static_cast<const T*>(a.send), a.send_count(n));
        View<T, memory_space> out(static_cast<T*>(a.recv), a.recv_count(n));
        if constexpr (VariableCountCommunicator<C>) {
          const std::span<const std::size_t> counts(a.counts);
          if constexpr (QuantizingCommunicator<C> && FloatingElement<T>) {
            if (a.wire) {
              const std::vector<std::size_t> equal(std::size_t(n), a.count);
              return inner_.reduce_scatter(in, out, a.variable_counts() ? counts : equal, a.op,
                                           *a.wire);
            }
          }
          if (a.variable_counts() && a.kind == Collective::reduce_scatter)
            return inner_.reduce_scatter(in, out, counts, a.op);
          if (a.variable_counts() && a.kind == Collective::all_gather)
            return inner_.all_gather(in, out, counts);
        }
        switch (a.kind) {
        case Collective::all_reduce:
          return inner_.all_reduce(in, out, a.op);
        case Collective::reduce_scatter:
          return inner_.reduce_scatter(in, out, a.op);
        case Collective::all_gather:
          return inner_.all_gather(in, out);
        case Collective::broadcast:
          return inner_.broadcast(in, out, a.root);
        case Collective::reduce:
          return inner_.reduce(in, out, a.op, a.root);
        case Collective::barrier:
          break;
        }
        return Work();
      });
    }
  }

  bool quantizes_on_wire() const {
    if constexpr (requires { inner_.quantizes_on_wire(); })
      return inner_.quantizes_on_wire();
    else
      return false;
  }

  C inner_;
  CommStats stats_;
};

} // namespace zero
