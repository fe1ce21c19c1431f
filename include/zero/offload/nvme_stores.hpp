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

namespace zero::detail {

template <class Opt, class Plan, class Exec>
struct optimizer_store_for<Opt, Plan, nvme, Exec> {
  using type = NvmeOptimizerStore<Opt, Plan, Exec>;
};

template <class T, class Plan, class Comm>
struct parameter_store_for<T, Plan, Comm, nvme> {
  using type = NvmeParameters<T, Plan, Comm>;
};

} // namespace zero::detail
