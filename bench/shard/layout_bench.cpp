// Layout construction for 10^5 parameters (the size of a very large model's parameter list) with
// each partitioner and several world sizes, in parameters per second; and element lookups in a
// built layout, in lookups per second.
//
//   ./zero_bench_shard_layout --benchmark_counters_tabular=true

#include <zero/shard.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr std::size_t parameter_count = 100'000;

// A transformer-like mix: per layer of 8 parameters, 4 large matrices and 4 small vectors.
const std::vector<zero::ParameterSpec>& parameters() {
  static const std::vector<zero::ParameterSpec> params = [] {
    std::vector<zero::ParameterSpec> p;
    p.reserve(parameter_count);
    std::mt19937 rng(7);
    for (std::size_t i = 0; i < parameter_count; ++i) {
      const bool matrix = i % 8 < 4;
      const std::size_t numel = matrix ? 4096 * (1 + rng() % 4096) : 1 + rng() % 8192;
      p.push_back({"layer" + std::to_string(i / 8) + ".p" + std::to_string(i % 8), numel,
                   zero::DType::float32, static_cast<int>(i / 8)});
    }
    return p;
  }();
  return params;
}

template <class P>
void build(benchmark::State& state, P partitioner) {
  const auto& params = parameters();
  const int world = static_cast<int>(state.range(0));
  std::size_t segments = 0;
  for (auto _ : state) {
    const zero::ShardLayout layout = partitioner.partition(params, world);
    benchmark::DoNotOptimize(layout.hash());
    segments = 0;
    for (int r = 0; r < world; ++r)
      segments += layout.rank_segments(r).size();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(params.size()));
  state.counters["segments"] = static_cast<double>(segments);
}

void BM_FlatContiguous(benchmark::State& state) {
  build(state, zero::FlatContiguous{});
}
void BM_FlatContiguousOneLayer(benchmark::State& state) {
  // Stage 1/2: all parameters in one layer, one flat buffer.
  auto params = parameters();
  for (auto& p : params)
    p.layer = 0;
  const int world = static_cast<int>(state.range(0));
  for (auto _ : state)
    benchmark::DoNotOptimize(zero::FlatContiguous{}.partition(params, world).hash());
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(params.size()));
}
void BM_PerParameter(benchmark::State& state) {
  build(state, zero::PerParameter{});
}
void BM_WholeParameterGreedy(benchmark::State& state) {
  build(state, zero::WholeParameterGreedy{});
}

void BM_LocateElement(benchmark::State& state) {
  const zero::ShardLayout layout =
      zero::FlatContiguous{}.partition(parameters(), static_cast<int>(state.range(0)));
  std::mt19937_64 rng(11);
  std::vector<std::size_t> elements(4096);
  for (auto& e : elements)
    e = rng() % layout.numel();
  std::size_t i = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(layout.locate_element(elements[i++ % elements.size()]));
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_FlatContiguous)->Arg(8)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FlatContiguousOneLayer)->Arg(8)->Arg(512)->Unit(benchmark::kMillisecond);
// W segments per parameter: memory grows with the world size, so only small worlds here.
BENCHMARK(BM_PerParameter)->Arg(8)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WholeParameterGreedy)->Arg(8)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LocateElement)->Arg(8);

} // namespace

BENCHMARK_MAIN();
