#pragma once
// Helpers for tests that run one body under every host communicator: SelfCommunicator, the MPI
// world (at however many ranks mpirun started), and the MPI world split into simulated nodes on
// the two-level transport (so that every such test also runs the across-nodes path).

#include "test_outcome.hpp"

#include <zero/comm/mpi_communicator.hpp>
#include <zero/comm/self_communicator.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace zero::testing {

inline std::unique_ptr<MpiCommunicator>& world_slot() {
  static std::unique_ptr<MpiCommunicator> world;
  return world;
}

// The MPI world on the hierarchical transport, every ZERO_NODE_SIZE ranks (one when unset) a
// simulated node: at 2 and 3 ranks every rank is a node, at 4 with ZERO_NODE_SIZE=2 both levels
// carry data.
class SimulatedNodesCommunicator : public MpiCommunicator {
 public:
  SimulatedNodesCommunicator() : MpiCommunicator(boost::mpi::communicator(), options()) {}

 private:
  static CommOptions options() {
    CommOptions o = CommOptions::from_environment();
    o.transport = Transport::hierarchical;
    if (o.node_size == 0) o.node_size = 1;
    return o;
  }
};

inline std::unique_ptr<SimulatedNodesCommunicator>& simulated_nodes_slot() {
  static std::unique_ptr<SimulatedNodesCommunicator> nodes;
  return nodes;
}

// The world communicator shared by all tests of a binary (made on first use).
inline MpiCommunicator& world() {
  auto& slot = world_slot();
  if (!slot) slot = std::make_unique<MpiCommunicator>();
  return *slot;
}

// What a test binary made on MPI and must destroy before MPI is finalised (a communicator of its
// own in a static), in the order registered.
inline std::vector<std::function<void()>>& release_hooks() {
  static std::vector<std::function<void()>> hooks;
  return hooks;
}

// Called by the test main before MPI is finalised.
inline void release_world() {
  for (auto& release : release_hooks())
    release();
  simulated_nodes_slot().reset();
  world_slot().reset();
}

// Test fixtures get their communicator through this, one specialisation per backend.
template <class C>
C& communicator();
template <>
inline SelfCommunicator& communicator<SelfCommunicator>() {
  static SelfCommunicator self;
  return self;
}
template <>
inline MpiCommunicator& communicator<MpiCommunicator>() {
  return world();
}
template <>
inline SimulatedNodesCommunicator& communicator<SimulatedNodesCommunicator>() {
  auto& slot = simulated_nodes_slot();
  if (!slot) slot = std::make_unique<SimulatedNodesCommunicator>();
  return *slot;
}

using HostCommunicators =
    ::testing::Types<SelfCommunicator, MpiCommunicator, SimulatedNodesCommunicator>;

// Names typed tests "Self", "Mpi" and "Nodes" instead of 0, 1 and 2.
struct CommunicatorName {
  template <class C>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<C, SelfCommunicator>) return "Self";
    if constexpr (std::is_same_v<C, MpiCommunicator>) return "Mpi";
    return "Nodes";
  }
};

} // namespace zero::testing
