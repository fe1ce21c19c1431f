#pragma once
// From a described collective to a transport's typed implementation: the one place where the
// run-time element type and kind become template arguments and member calls. A transport provides
//   reduce(send, recv, count, op, root)          root < 0: all-reduce
//   reduce_scatter(send, recv, block, op)
//   all_gather(send, recv, block)
//   broadcast(send, recv, count, root)
// the same reduce_scatter and all_gather with a span of per-rank counts in place of the block, for
// blocks of different sizes, and handles barriers itself. A transport that declares
// `quantizes_on_wire` also provides quantized_reduce_scatter (both forms, with a
// BlockQuantization) for reductions that carry CollectiveArgs::wire; the others reduce those
// exactly.

#include "zero/comm/collective.hpp"
#include "zero/core/dtype.hpp"

#include <cstddef>
#include <span>

namespace zero::detail {

template <class Transport>
concept QuantizesOnWire = Transport::quantizes_on_wire;

// A quantized reduce-scatter on a transport that runs them; false where it reduces exactly.
template <class Transport, class T>
bool run_quantized(Transport& transport, const CollectiveArgs& a, const T* send, T* recv) {
  if constexpr (QuantizesOnWire<Transport> && FloatingElement<T>) {
    if (a.variable_counts())
      transport.quantized_reduce_scatter(send, recv, std::span<const std::size_t>(a.counts), a.op,
                                         *a.wire);
    else
      transport.quantized_reduce_scatter(send, recv, a.count, a.op, *a.wire);
    return true;
  } else {
    return false;
  }
}

template <class Transport>
void run_typed(Transport& transport, const CollectiveArgs& a) {
  visit_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto* send = static_cast<const T*>(a.send);
    auto* recv = static_cast<T*>(a.recv);
    const std::span<const std::size_t> counts(a.counts);
    switch (a.kind) {
    case Collective::all_reduce:
      transport.reduce(send, recv, a.count, a.op, -1);
      break;
    case Collective::reduce:
      transport.reduce(send, recv, a.count, a.op, a.root);
      break;
    case Collective::reduce_scatter:
      if (a.wire && run_quantized(transport, a, send, recv)) break;
      if (a.variable_counts())
        transport.reduce_scatter(send, recv, counts, a.op);
      else
        transport.reduce_scatter(send, recv, a.count, a.op);
      break;
    case Collective::all_gather:
      if (a.variable_counts())
        transport.all_gather(send, recv, counts);
      else
        transport.all_gather(send, recv, a.count);
      break;
    case Collective::broadcast:
      transport.broadcast(send, recv, a.count, a.root);
      break;
    case Collective::barrier:
      break;
    }
  });
}

} // namespace zero::detail
