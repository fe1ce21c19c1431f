// Must not compile: model states in device memory with the default (host) execution space.
#include <zero/comm/self_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>

int main() {
  zero::SelfCommunicator comm;
  zero::Engine<zero::Stage<2>, zero::SelfCommunicator, zero::cuda, zero::Adam,
               zero::StaticLossScaler>
      engine(comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
