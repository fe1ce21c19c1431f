// Links zero::engines from the installed package: a trainer that names a prebuilt engine, which
// this unit does not compile (run_consumer.cmake checks its object), and trains it for two steps
// on one rank (MPI starts as a singleton without mpirun).
#include <zero/engines.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  zero::MpiCommunicator comm(argc, argv);
  const std::vector<zero::ParameterSpec> parameters = {{"w", 4, zero::DType::float32, 0}};
  zero::PrebuiltEngine<2, zero::Adam> engine(comm, parameters, zero::Adam({.lr = 0.1}),
                                             zero::AnyLossScaler(zero::StaticLossScaler(1.0)));
  const std::vector<float> w = {1, 2, 3, 4};
  engine.set_layer(0, w);
  for (int step = 0; step < 2; ++step) {
    { auto held = engine.acquire(0); }
    zero::View<float> grad = engine.gradients<float>(0);
    for (std::size_t i = 0; i < grad.size(); ++i)
      grad[i] = 1.0f;
    engine.grads_ready(0);
    engine.step();
  }
  // Adam's first steps move each weight by about lr against the gradient's sign.
  const std::vector<float> trained = engine.get_layer(0);
  std::printf("consumer_engines ok: %g %g %g %g\n", trained[0], trained[1], trained[2], trained[3]);
  return trained[0] < 0.85f && trained[0] > 0.75f ? 0 : 1;
}
