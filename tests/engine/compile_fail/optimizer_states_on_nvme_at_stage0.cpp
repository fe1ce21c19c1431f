// Must not compile: stage 0 does not shard the optimizer states, so every rank would write the
// same whole copy to its disk.
#include <zero/comm/self_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>

int main() {
  using Where = zero::Placement<zero::optimizer_states_in<zero::nvme>>;
  zero::SelfCommunicator comm;
  zero::Engine<zero::Stage<0>, zero::SelfCommunicator, Where, zero::Adam, zero::StaticLossScaler>
      engine(comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
