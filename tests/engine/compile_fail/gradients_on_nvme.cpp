// Must not compile: gradients cannot live on the NVMe tier.
#include <zero/comm/self_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>

int main() {
  using Where = zero::Placement<zero::gradients_in<zero::nvme>>;
  zero::SelfCommunicator comm;
  zero::Engine<zero::Stage<2>, zero::SelfCommunicator, Where, zero::Adam, zero::StaticLossScaler>
      engine(comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
