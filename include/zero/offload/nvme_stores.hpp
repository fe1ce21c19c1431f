#pragma once
// The engine's stores for states placed on the NVMe tier. Include this header (and link the
// zero::nvme target, which brings liburing and xxHash) in a program whose placement names
// zero::nvme:
//
//   #include <zero/engine/engine.hpp>
//   #include <zero/offload/nvme_stores.hpp>
//   using Where = zero::Placement<zero::optimizer_states_in<zero::nvme>>;
//   zero::Engine<zero::Stage<2>, zero::MpiCommunicator, Where, zero::Adam, zero::StaticLossScaler>
//       engine(comm, parameters, adam, scaler, options);   // options.nvme.optimizer.nvme_path set
//
// Engines that keep everything in memory do not need it, nor its libraries.

#include "zero/engine/model_states.hpp"
#include "zero/offload/nvme_optimizer_store.hpp"
#include "zero/offload/nvme_parameters.hpp"
#include "zero/offload/offloaded_optimizer_store.hpp"

namespace zero::detail {

template <Optimizer Opt, class Partitioner, ExecutionSpace Exec>
struct optimizer_store_for<Opt, Kept<true, Partitioner, nvme>, Exec> {
  using type = NvmeOptimizerStore<Opt, Kept<true, Partitioner, nvme>, Exec>;
};
// Beside a device space (GPU -> pinned host -> NVMe): the host's store, behind the device.
template <Optimizer Opt, class Partitioner, ExecutionSpace Exec>
requires offloaded_from<nvme, Exec>
struct optimizer_store_for<Opt, Kept<true, Partitioner, nvme>, Exec> {
  using K = Kept<true, Partitioner, nvme>;
  using type = OffloadedOptimizerStore<NvmeOptimizerStore<Opt, K, HostThreads>, K, Exec>;
};

// Over a host space the NVMe tier gathers its layers on the host thread; beside a device it copies
// each block read to the device and gathers it there (GPU <- pinned host <- NVMe).
template <Element T, class Partitioner, KeptState Updated, Communicator Comm, ExecutionSpace Exec>
struct parameter_store_for<T, Kept<true, Partitioner, nvme>, Updated, Comm, Exec, true> {
  using type = NvmeParameters<T, Kept<true, Partitioner, nvme>, Comm, Exec>;
};

} // namespace zero::detail
