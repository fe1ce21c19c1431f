// Must not compile: stage 3 gathers parameters, and this communicator has no all_gather.
#include <zero/comm/self_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>

// A communicator that can reduce but not gather (all its other members are SelfCommunicator's).
struct ReduceOnly {
  using memory_space = zero::host;
  zero::SelfCommunicator self;
  int rank() const { return 0; }
  int size() const { return 1; }
  template <class... A>
  zero::Work all_reduce(A&&... a) {
    return self.all_reduce(std::forward<A>(a)...);
  }
  template <class... A>
  zero::Work reduce_scatter(A&&... a) {
    return self.reduce_scatter(std::forward<A>(a)...);
  }
  template <class... A>
  zero::Work reduce(A&&... a) {
    return self.reduce(std::forward<A>(a)...);
  }
  void barrier() {}
  ReduceOnly split(int, int) { return {}; }
};

int main() {
  ReduceOnly comm;
  zero::Engine<zero::Stage<3>, ReduceOnly, zero::host, zero::Adam, zero::StaticLossScaler> engine(
      comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
