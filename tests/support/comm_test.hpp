#pragma once
// Helpers for tests that run one body under every host communicator: SelfCommunicator and the MPI
// world (at however many ranks mpirun started).

#include <zero/comm/mpi_communicator.hpp>
#include <zero/comm/self_communicator.hpp>

#include <gtest/gtest.h>

#include <memory>

namespace zero::testing {

inline std::unique_ptr<MpiCommunicator>& world_slot() {
  static std::unique_ptr<MpiCommunicator> world;
  return world;
}

// The world communicator shared by all tests of a binary (made on first use).
inline MpiCommunicator& world() {
  auto& slot = world_slot();
  if (!slot) slot = std::make_unique<MpiCommunicator>();
  return *slot;
}

// Called by the test main before MPI is finalised.
inline void release_world() {
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

using HostCommunicators = ::testing::Types<SelfCommunicator, MpiCommunicator>;

// Names typed tests "Self" and "Mpi" instead of 0 and 1.
struct CommunicatorName {
  template <class C>
  static std::string GetName(int) {
    return std::is_same_v<C, SelfCommunicator> ? "Self" : "Mpi";
  }
};

} // namespace zero::testing
