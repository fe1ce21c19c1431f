// Uses zero from its installed headers: a buffer, a conversion and a one-rank all_reduce.
#include <zero/comm/self_communicator.hpp>
#include <zero/core/buffer.hpp>
#include <zero/core/half.hpp>

#include <cstdio>

int main() {
  zero::SelfCommunicator comm;
  zero::Buffer<float> grads(8, 0.5f);
  comm.all_reduce(grads, zero::ReduceOp::avg).wait();
  const zero::half h(grads[7]);
  std::printf("consumer ok: %g\n", static_cast<double>(static_cast<float>(h)));
  return static_cast<float>(h) == 0.5f ? 0 : 1;
}
