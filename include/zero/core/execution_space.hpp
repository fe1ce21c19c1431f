#pragma once
// Execution spaces say where kernels and copies run, as Kokkos' do, and each names the memory
// space its kernels read and write. zero's kernels take the space as their first argument,
// Thrust-style:
//
//   zero::fused_step(zero::HostThreads{}, update, master, states, grads, multiplier, out);
//   zero::convert(exec, from, to);
//   zero::accumulate(exec, grads, sums);
//
// HostThreads runs them on the calling thread (fused_step also on its OpenMP team, one contiguous
// range per thread) and returns when they are done, so its fence() has nothing to wait for. The
// engine's stores call their kernels through an execution space; a GPU engine adds a space
// (kernels on a CUDA stream, fence() = synchronise) with its overloads. What else it needs (device
// versions of the stores' remaining host loops: norms, image packing) is listed in
// docs/engine-design.md.

#include "zero/core/convert.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/run_table.hpp"
#include "zero/core/view.hpp"

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>

namespace zero {

struct HostThreads {
  using execution_space = HostThreads;
  using memory_space = host;
  static constexpr const char* name = "host_threads";
  // Host kernels complete inside their call: nothing is ever pending.
  void fence() const noexcept {}
};

template <class E>
concept ExecutionSpace = requires(const E& space) {
  typename E::execution_space;
  requires std::same_as<typename E::execution_space, E>;
  typename E::memory_space;
  requires MemorySpace<typename E::memory_space>;
  { E::name } -> std::convertible_to<const char*>;
  space.fence();
};

// Whether kernels of space E can read and write memory of space M.
template <class E, class M>
inline constexpr bool can_access =
    E::memory_space::host_accessible ? M::host_accessible
                                     : std::same_as<typename E::memory_space, M>;

// to[i] = From-to-To conversion of from[i] (a copy when the types are equal).
template <Element From, Element To, class Space>
requires Space::host_accessible void convert(const HostThreads&, View<const From, Space> from,
                                             View<To, Space> to) {
  if (from.size() != to.size())
    fail(ErrorKind::invalid_argument, "convert: " + std::to_string(from.size()) +
                                          " elements into a buffer of " +
                                          std::to_string(to.size()));
  convert_n(from.data(), to.data(), from.size());
}

// to[i] += float(from[i]): gradient accumulation in float, whatever the gradient's type.
template <Element From, class Space>
requires Space::host_accessible void accumulate(const HostThreads&, View<const From, Space> from,
                                                View<float, Space> to) {
  if (from.size() != to.size())
    fail(ErrorKind::invalid_argument, "accumulate: " + std::to_string(from.size()) +
                                          " elements into a buffer of " +
                                          std::to_string(to.size()));
  accumulate_n(from.data(), to.data(), from.size());
}

// to[run.to + i] = From-to-To conversion of from[run.from + i] along the table (zeros for its
// zero runs): image packing and unpacking (zero/core/run_table.hpp).
template <Element From, Element To, class Space>
requires Space::host_accessible void convert_runs(const HostThreads&, View<const From, Space> from,
                                                  View<To, Space> to, const RunTable<host>& table) {
  detail::require_fits("convert_runs", table, from.size(), to.size());
  detail::convert_along(table.host_runs(), from.data(), to.data());
}

// to[run.to + i] += float(from[run.from + i]) along the table (its zero runs add nothing).
template <Element From, class Space>
requires Space::host_accessible void accumulate_runs(const HostThreads&,
                                                     View<const From, Space> from,
                                                     View<float, Space> to,
                                                     const RunTable<host>& table) {
  detail::require_fits("accumulate_runs", table, from.size(), to.size());
  detail::accumulate_along(table.host_runs(), from.data(), to.data());
}

} // namespace zero
