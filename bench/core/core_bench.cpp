// Throughput of the element-wise pieces under the collectives and the engine: bulk conversions
// (half/bfloat16 <-> float), the rank-ordered reduction of the shared-memory transport, and the
// streaming copy used for large collective outputs. Reported as bytes_per_second (read + written)
// and items_per_second (elements).

#include <zero/comm/transport/host_reduce.hpp>
#include <zero/core/buffer.hpp>
#include <zero/core/convert.hpp>
#include <zero/core/stream_copy.hpp>

#include <benchmark/benchmark.h>

#include <array>
#include <cstring>

namespace {

template <class From, class To>
void BM_convert(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  zero::Buffer<From> src(n);
  zero::Buffer<To> dst(n);
  for (std::size_t i = 0; i < n; ++i)
    src[i] = zero::convert<From>(float(i % 1000) * 0.01f);
  for (auto _ : state) {
    zero::convert_n(src.data(), dst.data(), n);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetItemsProcessed(state.iterations() * std::int64_t(n));
  state.SetBytesProcessed(state.iterations() * std::int64_t(n * (sizeof(From) + sizeof(To))));
}
BENCHMARK(BM_convert<float, zero::half>)->Arg(1 << 16)->Arg(1 << 24);
BENCHMARK(BM_convert<zero::half, float>)->Arg(1 << 16)->Arg(1 << 24);
BENCHMARK(BM_convert<float, zero::bfloat16>)->Arg(1 << 16)->Arg(1 << 24);
BENCHMARK(BM_convert<zero::bfloat16, float>)->Arg(1 << 16)->Arg(1 << 24);

// Two sources reduced into a destination, as one rank's sub-range of a 2-rank all-reduce.
template <class T>
void BM_reduce_two_sources(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  zero::Buffer<T> a(n), b(n), out(n);
  const std::array<const T*, 2> sources{a.data(), b.data()};
  for (auto _ : state) {
    zero::detail::reduce_sources<T>(out.data(), sources, n, zero::ReduceOp::sum, 2);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * std::int64_t(n));
  state.SetBytesProcessed(state.iterations() * std::int64_t(3 * n * sizeof(T)));
}
BENCHMARK(BM_reduce_two_sources<float>)->Arg(1 << 16)->Arg(1 << 24);
BENCHMARK(BM_reduce_two_sources<zero::half>)->Arg(1 << 16)->Arg(1 << 24);
BENCHMARK(BM_reduce_two_sources<zero::bfloat16>)->Arg(1 << 16)->Arg(1 << 24);

void BM_copy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const bool streaming = state.range(1) != 0;
  zero::Buffer<std::byte> src(bytes), dst(bytes);
  for (auto _ : state) {
    zero::detail::copy_bytes(dst.data(), src.data(), bytes, streaming);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * std::int64_t(2 * bytes));
  state.SetLabel(streaming ? "non-temporal stores" : "memcpy");
}
BENCHMARK(BM_copy)
    ->Args({1 << 20, 0})
    ->Args({1 << 20, 1})
    ->Args({256 << 20, 0})
    ->Args({256 << 20, 1});

} // namespace

BENCHMARK_MAIN();
