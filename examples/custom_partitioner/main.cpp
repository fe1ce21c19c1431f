// A user-defined partitioner (keep_small_whole.hpp) over MPI, twice:
// 1. with ShardedTensor: master weights sharded by it, initialised from rank 0, copied to
//    bfloat16, gathered back and checked;
// 2. with the engine: a model trained at ZeRO stage 3 with `zero::partition_with<KeepSmallWhole>`
//    (training.hpp), whose final weights must equal bit for bit those of plain stage 0.
//
//   mpirun -n 3 ./zero_example_custom_partitioner

#include "keep_small_whole.hpp"
#include "training.hpp"

#include <zero/comm/mpi_communicator.hpp>
#include <zero/core/bfloat16.hpp>
#include <zero/shard.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

// An embedding and two transformer-block-like layers, one engine layer each. With either threshold
// used here (1024 and 4096), the biases and norms stay whole and the matrices are split.
std::vector<zero::ParameterSpec> model_parameters(std::size_t vocabulary) {
  std::vector<zero::ParameterSpec> params;
  params.push_back({"embedding", vocabulary * 64, zero::DType::float32, 0});
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

// The parameters rank r holds, "[part]" marking those split across ranks.
std::string kept_parameters(const zero::ShardLayout& layout, int rank) {
  std::string list;
  for (std::size_t p : layout.parameters_on(rank))
    list += " " + layout.parameter(p).name + (layout.segments(p).size() == 1 ? "" : "[part]");
  return list;
}

bool shard_with_sharded_tensor(zero::MpiCommunicator& comm) {
  using Policy = zero::Sharded<KeepSmallWhole>;
  static_assert(!zero::EqualSlices<KeepSmallWhole>);
  const auto params = model_parameters(32000);

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
      std::printf("rank %d keeps %zu elements (%zu bytes):%s\n", r, master.local().size(),
                  master.bytes_resident(), kept_parameters(layout, r).c_str());
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
  return all[0] == 0;
}

// What each rank of a run owns (elements of the layout) and holds (bytes of model states). A shard
// is stored as large as the largest block, so a rank that owns less holds the same bytes.
void print_kept(const char* run, const Trained& trained, bool sharded) {
  const zero::ShardLayout& layout = trained.layout;
  std::printf("%s\n", run);
  if (sharded) std::printf("  %s\n", layout.summary().c_str());
  for (int r = 0; r < layout.world_size(); ++r) {
    const auto bytes = static_cast<long long>(trained.model_state_bytes[std::size_t(r)]);
    if (sharded)
      std::printf("  rank %d owns %zu of %zu elements, holds %lld bytes of model states:%s\n", r,
                  layout.owned_numel(r), layout.numel(), bytes, kept_parameters(layout, r).c_str());
    else
      std::printf("  rank %d keeps all %zu elements, holds %lld bytes of model states\n", r,
                  layout.numel(), bytes);
  }
}

// Bit for bit: the float patterns are compared, not the values (== takes -0 for +0).
bool bitwise_equal(const std::vector<std::vector<float>>& a,
                   const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t l = 0; l < a.size(); ++l)
    if (a[l].size() != b[l].size() ||
        std::memcmp(a[l].data(), b[l].data(), a[l].size() * sizeof(float)) != 0)
      return false;
  return true;
}

bool train_with_engine(zero::MpiCommunicator& comm) {
  // example-begin plan
  // The user's partitioner at stage 3: every model state sharded as KeepSmallWhole lays it out.
  // The engine constructs the partitioner as KeepSmallWhole{} (threshold 4096).
  using KeepSmallWholeStage3 =
      zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients,
                         zero::shard_parameters, zero::partition_with<KeepSmallWhole>>;
  // example-end plan
  constexpr int steps = 5;
  const auto params = model_parameters(1000); // a smaller embedding, to train in a moment
  const Trained sharded = train<KeepSmallWholeStage3>(comm, params, steps);
  const Trained replicated = train<zero::Stage<0>>(comm, params, steps); // FlatContiguous
  const bool equal = bitwise_equal(sharded.final_weights, replicated.final_weights);
  if (comm.rank() == 0) {
    print_kept("stage 3, partition_with<KeepSmallWhole>:", sharded, true);
    print_kept("stage 0, FlatContiguous (nothing sharded):", replicated, false);
    std::printf("%s: after %d Adam steps the weights of stage 3 with %s and of stage 0 are %s\n",
                equal ? "ok" : "FAILED", steps, std::string(sharded.layout.policy()).c_str(),
                equal ? "bitwise equal" : "different");
  }
  return equal;
}

} // namespace

int main(int argc, char** argv) {
  try {
    zero::MpiCommunicator comm(argc, argv);
    const bool sharded_tensor_ok = shard_with_sharded_tensor(comm);
    const bool engine_ok = train_with_engine(comm);
    return sharded_tensor_ok && engine_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
