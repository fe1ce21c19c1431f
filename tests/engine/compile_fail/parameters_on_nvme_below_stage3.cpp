// Must not compile: stages 0-2 keep the whole compute copy on every rank; parameters go to NVMe
// only as stage 3 shards.
#include <zero/comm/self_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>

int main() {
  using Where =
      zero::Placement<zero::parameters_in<zero::nvme>, zero::optimizer_states_in<zero::nvme>>;
  zero::SelfCommunicator comm;
  zero::Engine<zero::Stage<2>, zero::SelfCommunicator, Where, zero::Adam, zero::StaticLossScaler>
      engine(comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
