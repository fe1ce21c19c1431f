// A trainer compiled for other instruction sets (-march=x86-64) than zero::engines (-march=native)
// names a prebuilt engine: it must not link, and the linker names the engine of the unit's
// instruction sets (zero::baseline::Engine), not the library's.
#include <zero/engines.hpp>

#include <vector>

int main(int argc, char** argv) {
  zero::MpiCommunicator comm(argc, argv);
  const std::vector<zero::ParameterSpec> parameters = {{"w", 4, zero::DType::float32, 0}};
  zero::PrebuiltEngine<2, zero::Adam> engine(comm, parameters, zero::Adam({.lr = 0.1}),
                                             zero::AnyLossScaler(zero::StaticLossScaler(1.0)));
  return engine.step().applied ? 0 : 1;
}
