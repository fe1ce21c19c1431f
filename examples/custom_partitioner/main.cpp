// A user-defined partitioner (keep_small_whole.hpp) used with ShardedTensor over MPI: master
// weights sharded by it, initialised from rank 0, copied to bfloat16, gathered back and checked.
//
//   mpirun -n 3 ./zero_example_custom_partitioner

#include "keep_small_whole.hpp"

#include <zero/comm/mpi_communicator.hpp>
#include <zero/core/bfloat16.hpp>
#include <zero/shard.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

// A two-layer transformer block's parameters, one layer per layer.
std::vector<zero::ParameterSpec> model_parameters() {
  std::vector<zero::ParameterSpec> params;
  params.push_back({"embedding", 32000 * 64, zero::DType::float32, 0});
  for (int layer = 1; layer <= 2; ++layer) {
    const std::string prefix = "layer" + std::to_string(layer) + ".";
    params.push_back({prefix + "attention.qkv.weight", 64 * 192, zero::DType::float32, layer});
    params.push_back({prefix + "attention.qkv.bias", 192, zero::DType::float32, layer});
    params.push_back({prefix + "norm.weight", 64, zero::DType::float32, layer});
    params.push_back({prefix + "norm.bias", 64, zero::DType::float32, layer});
    params.push_back({prefix + "mlp.weight", 64 * 256, zero::DType::float32, layer});
  }
  return params;
}

int run(zero::MpiCommunicator& comm) {
  using Policy = zero::Sharded<KeepSmallWhole>;
  static_assert(!zero::EqualSlices<KeepSmallWhole>);
  const auto params = model_parameters();

  // Collective: every rank lays out the same parameters, and the layouts are compared.
  zero::ShardedTensor<float, Policy> master(comm, params,
                                            Policy{.partitioner = {.threshold = 1024}});
  const zero::ShardLayout& layout = master.layout();
  if (comm.rank() == 0) std::printf("%s\n", layout.summary().c_str());

  std::vector<float> initial;
  if (comm.rank() == 0) {
    initial.resize(master.numel());
    for (std::size_t i = 0; i < initial.size(); ++i)
      initial[i] = 0.001f * static_cast<float>(i % 997);
  }
  master.scatter_from(comm, initial, 0).wait();

  for (int r = 0; r < comm.size(); ++r) {
    if (r == comm.rank()) {
      std::printf("rank %d keeps %zu elements (%zu bytes):", r, master.local().size(),
                  master.bytes_resident());
      for (std::size_t p : layout.parameters_on(r))
        std::printf(" %s%s", layout.parameter(p).name.c_str(),
                    layout.segments(p).size() == 1 ? "" : "[part]");
      std::printf("\n");
      std::fflush(stdout);
    }
    comm.barrier();
  }

  // The low-precision copy a forward pass would gather, on the same layout.
  const auto weights = master.converted<zero::bfloat16>();
  auto gathered = weights.gather(comm);
  std::vector<float> reference(master.numel());
  master.gather_to(comm, reference, 0).wait();

  std::size_t wrong = 0;
  if (comm.rank() == 0)
    for (std::size_t i = 0; i < reference.size(); ++i)
      if (gathered.view()[i].bits != zero::bfloat16(initial[i]).bits || reference[i] != initial[i])
        ++wrong;
  std::vector<std::int64_t> all{static_cast<std::int64_t>(wrong)};
  comm.all_reduce(all, zero::ReduceOp::sum).wait();
  if (comm.rank() == 0)
    std::printf("%s: %lld wrong elements after scatter, bfloat16 copy and gather\n",
                all[0] == 0 ? "ok" : "FAILED", static_cast<long long>(all[0]));
  return all[0] == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  try {
    zero::MpiCommunicator comm(argc, argv);
    return run(comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
