// Throughput of the fused host optimizer steps and gradient passes, next to a STREAM triad
// measured by the same binary on buffers of the same size, so that the ratio of the two says how
// close the step runs to the memory bandwidth of this machine.
//
//   zero_bench_optim [--params=N] [Google Benchmark flags, e.g. --benchmark_format=json]
//
// bytes_per_second counts the bytes each element must move: for the mixed-precision Adam step
// 28 (fp32 master, exp_avg, exp_avg_sq and a half gradient read; fp32 master, exp_avg,
// exp_avg_sq and the half compute copy written); for the triad a[i] = b[i] + s * c[i] 32 per
// fp64 element (two reads, one write and the read the write-allocate costs).
// LAMB's step makes two passes (optim/trust_ratio_step.hpp), 40 bytes: the first reads master,
// moments and gradient and writes the moments (22), the second reads master and moments and writes
// master and copy (18); the buffer is one parameter, so one trust ratio.
// items_per_second counts parameters (elements). Threads: OpenMP's default (OMP_NUM_THREADS).
// adam_step_vs_triad alternates the two within each iteration and reports their ratio;
// adam_8bit_vs_fp32 does the same for the 8-bit and the fp32 Adam step, and adam_8bit_parts times
// the 8-bit step's parts on one block in cache (one thread), nanoseconds a value.
// split_master_vs_fp32_master alternates the step over split masters (a bf16 weight plus an 8- or
// 16-bit residual, optim/split_master.hpp) with the same step over fp32 masters, with 8-bit or
// fp32 moments. snapshot_then_step_vs_step alternates ZeRO-Offload's speculative update on the
// CPU (offload/speculative_update.hpp: the states copied into a snapshot, then the step) with the
// step alone.

#include <zero/offload/speculative_update.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/fused_step.hpp>
#include <zero/optim/lamb.hpp>
#include <zero/optim/quantized_step.hpp>
#include <zero/optim/sgd.hpp>
#include <zero/optim/split_master.hpp>
#include <zero/precision/grad_norm.hpp>
#include <zero/precision/overflow.hpp>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace {

std::size_t parameter_count = std::size_t{64} << 20; // 67,108,864

// Large buffers on transparent huge pages, first touched by the threads that will stream them.
struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
template <class T>
using HugeArray = std::unique_ptr<T[], FreeDeleter>;

template <class T>
HugeArray<T> huge_array(std::size_t n, float value) {
  constexpr std::size_t page = std::size_t{2} << 20;
  const std::size_t bytes = (n * sizeof(T) + page - 1) / page * page;
  auto* data = static_cast<T*>(std::aligned_alloc(page, bytes));
  if (data == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(data, bytes, MADV_HUGEPAGE);
#endif
  zero::detail::parallel_ranges(n, [&](std::size_t begin, std::size_t end, int) noexcept {
    for (std::size_t i = begin; i < end; ++i)
      data[i] = zero::convert<T>(value);
  });
  return HugeArray<T>(data);
}

template <class T>
zero::View<T> view_of(const HugeArray<T>& a, std::size_t n) {
  return {a.get(), n};
}

void report(benchmark::State& state, std::size_t n, double bytes_per_element) {
  const auto elements = static_cast<double>(state.iterations()) * static_cast<double>(n);
  state.SetItemsProcessed(static_cast<std::int64_t>(elements));
  state.SetBytesProcessed(static_cast<std::int64_t>(elements * bytes_per_element));
}

void triad(benchmark::State& state) {
  const std::size_t n = parameter_count;
  auto a = huge_array<double>(n, 0.0f);
  auto b = huge_array<double>(n, 1.0f);
  auto c = huge_array<double>(n, 2.0f);
  const double scalar = 3.0;
  double* pa = a.get();
  const double* pb = b.get();
  const double* pc = c.get();
  for (auto _ : state) {
    zero::detail::parallel_ranges(n, [&](std::size_t begin, std::size_t end, int) noexcept {
      for (std::size_t i = begin; i < end; ++i)
        pa[i] = pb[i] + scalar * pc[i];
    });
    benchmark::ClobberMemory();
  }
  report(state, n, 4 * sizeof(double));
}

template <class Optimizer, class Grad, class Copy>
void optimizer_step(benchmark::State& state, typename Optimizer::options_type options,
                    double bytes_per_element) {
  const std::size_t n = parameter_count;
  auto master = huge_array<float>(n, 0.5f);
  auto grad = huge_array<Grad>(n, 0.01f);
  std::vector<HugeArray<float>> state_tensors;
  std::array<zero::View<float>, Optimizer::state_tensors> state_views{};
  for (std::size_t k = 0; k < Optimizer::state_tensors; ++k) {
    state_tensors.push_back(huge_array<float>(n, 0.0f));
    state_views[k] = view_of(state_tensors.back(), n);
  }
  HugeArray<Copy> copy;
  zero::View<Copy> copy_view;
  if constexpr (!std::is_same_v<Copy, float>) {
    copy = huge_array<Copy>(n, 0.0f);
    copy_view = view_of(copy, n);
  }
  Optimizer optimizer(options);
  const zero::View<const Grad> grad_view(grad.get(), n);
  for (auto _ : state) {
    const auto update = optimizer.begin_step();
    if constexpr (std::is_same_v<Copy, float>)
      zero::fused_step(update, view_of(master, n), state_views, grad_view, 1.0f / 1024);
    else
      zero::fused_step(update, view_of(master, n), state_views, grad_view, 1.0f / 1024, copy_view);
    benchmark::ClobberMemory();
  }
  report(state, n, bytes_per_element);
}

void adam_fp16(benchmark::State& s) {
  optimizer_step<zero::Adam, zero::half, zero::half>(s, {}, 28);
}
void adam_bf16(benchmark::State& s) {
  optimizer_step<zero::Adam, zero::bfloat16, zero::bfloat16>(s, {}, 28);
}
void adam_fp32(benchmark::State& s) {
  optimizer_step<zero::Adam, float, float>(s, {}, 28);
}
void adamw_fp16(benchmark::State& s) {
  optimizer_step<zero::AdamW, zero::half, zero::half>(s, {}, 28);
}
void lamb_fp16(benchmark::State& s) {
  optimizer_step<zero::Lamb, zero::half, zero::half>(s, {.weight_decay = 0.01}, 40);
}
void sgd_momentum_fp16(benchmark::State& s) {
  optimizer_step<zero::SGD, zero::half, zero::half>(s, {.lr = 0.01, .momentum = 0.9}, 20);
}

// The mixed-precision Adam step and the triad in alternation, one of each per iteration, so that
// both see the same memory system: the bandwidth a virtual machine gets changes with its
// neighbours from second to second, and only a ratio measured this way is stable. The time and
// bytes_per_second are the step's; triad_bytes_per_second and fraction_of_triad the comparison.
void adam_step_vs_triad(benchmark::State& state) {
  const std::size_t n = parameter_count;
  auto master = huge_array<float>(n, 0.5f);
  auto m = huge_array<float>(n, 0.0f);
  auto v = huge_array<float>(n, 0.0f);
  auto grad = huge_array<zero::half>(n, 10.0f);
  auto copy = huge_array<zero::half>(n, 0.0f);
  auto a = huge_array<double>(n, 0.0f);
  auto b = huge_array<double>(n, 1.0f);
  auto c = huge_array<double>(n, 2.0f);
  zero::Adam adam;
  double adam_seconds = 0.0, triad_seconds = 0.0;
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto start = clock::now();
    zero::detail::parallel_ranges(n, [&](std::size_t begin, std::size_t end, int) noexcept {
      for (std::size_t i = begin; i < end; ++i)
        a[i] = b[i] + 3.0 * c[i];
    });
    benchmark::ClobberMemory();
    const auto middle = clock::now();
    zero::fused_step(adam.begin_step(), view_of(master, n), {view_of(m, n), view_of(v, n)},
                     zero::View<const zero::half>(grad.get(), n), 1.0f / 1024, view_of(copy, n));
    benchmark::ClobberMemory();
    const auto end = clock::now();
    const double step = std::chrono::duration<double>(end - middle).count();
    state.SetIterationTime(step);
    adam_seconds += step;
    triad_seconds += std::chrono::duration<double>(middle - start).count();
  }
  report(state, n, 28);
  const double elements = static_cast<double>(state.iterations()) * static_cast<double>(n);
  const double triad_rate = 32.0 * elements / triad_seconds;
  state.counters["triad_bytes_per_second"] =
      benchmark::Counter(triad_rate, benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
  state.counters["fraction_of_triad"] =
      benchmark::Counter(28.0 * elements / adam_seconds / triad_rate);
}

// The Adam step over 8-bit moments (optim/quantized_step.hpp) and the fp32-moment step in
// alternation, bf16 gradients and compute copy, one of each per iteration; the time is the 8-bit
// step's, `vs_fp32` the ratio of its time to the fp32 step's. Bytes per element: 16 (master 4 + 4,
// the two moments' codes 2 + 2, gradient 2, copy 2; the block scales 0.004) against 28.
void adam_8bit_vs_fp32(benchmark::State& state) {
  const std::size_t n = parameter_count;
  auto master = huge_array<float>(n, 0.5f);
  auto master8 = huge_array<float>(n, 0.5f);
  auto m = huge_array<float>(n, 0.0f);
  auto v = huge_array<float>(n, 0.0f);
  auto m_codes = huge_array<std::uint8_t>(n, 0.0f);
  auto v_codes = huge_array<std::uint8_t>(n, 0.0f);
  const std::size_t blocks = zero::quantized_blocks(n);
  auto m_scales = huge_array<float>(blocks, 0.0f);
  auto v_scales = huge_array<float>(blocks, 0.0f);
  auto grad = huge_array<zero::bfloat16>(n, 0.01f);
  auto copy = huge_array<zero::bfloat16>(n, 0.0f);
  // Scales of 0: both moments start at 0 whatever their codes.
  zero::Adam adam;
  double eight_seconds = 0.0, fp32_seconds = 0.0;
  using clock = std::chrono::steady_clock;
  const zero::View<const zero::bfloat16> grad_view(grad.get(), n);
  for (auto _ : state) {
    const zero::AdamUpdate update = adam.begin_step();
    const auto start = clock::now();
    zero::fused_step(update, view_of(master, n), {view_of(m, n), view_of(v, n)}, grad_view, 1.0f,
                     view_of(copy, n));
    benchmark::ClobberMemory();
    const auto middle = clock::now();
    zero::quantized_fused_step(
        update, view_of(master8, n), {view_of(m_codes, n), view_of(m_scales, blocks)},
        {view_of(v_codes, n), view_of(v_scales, blocks)}, grad_view, 1.0f, view_of(copy, n));
    benchmark::ClobberMemory();
    const auto end = clock::now();
    const double eight = std::chrono::duration<double>(end - middle).count();
    state.SetIterationTime(eight);
    eight_seconds += eight;
    fp32_seconds += std::chrono::duration<double>(middle - start).count();
  }
  report(state, n, 16);
  state.counters["vs_fp32"] = benchmark::Counter(eight_seconds / fp32_seconds);
}

// The Adam step over split masters (bf16 weight and an R residual) and over fp32 masters in
// alternation, bf16 gradients and copy, with 8-bit moments (EightBit) or fp32 ones; the time is
// the split step's, `vs_fp32_master` the ratio of its time to the fp32-master step's. Bytes per
// element moved by the split step: the weight read and written (2 + 2), the residual read and
// written, the gradient (2), the moments (8-bit: 1 + 1 each way; fp32: 4 + 4 each way).
template <class R, bool EightBit>
void split_master_vs_fp32_master(benchmark::State& state) {
  const std::size_t n = parameter_count;
  const std::size_t blocks = zero::quantized_blocks(n);
  auto master = huge_array<float>(n, 0.5f);
  auto weight = huge_array<zero::bfloat16>(n, 0.5f);
  auto residual = huge_array<R>(n, 0.0f);
  auto copy = huge_array<zero::bfloat16>(n, 0.0f);
  auto grad = huge_array<zero::bfloat16>(n, 0.01f);
  // Each step's own moments, so that both start alike: fp32 values, or codes and scales (scales
  // of 0: the moments start at 0 whatever their codes).
  const std::size_t moment_elements = EightBit ? 1 : n; // 1: unused (no empty huge arrays)
  auto m = huge_array<float>(moment_elements, 0.0f), v = huge_array<float>(moment_elements, 0.0f);
  auto m2 = huge_array<float>(moment_elements, 0.0f), v2 = huge_array<float>(moment_elements, 0.0f);
  const std::size_t code_elements = EightBit ? n : 1;
  auto codes = huge_array<std::uint8_t>(4 * code_elements, 0.0f);
  auto scales = huge_array<float>(EightBit ? 4 * blocks : 1, 0.0f);
  const auto moment = [&](std::size_t k) -> zero::QuantizedMoment {
    return {zero::View<std::uint8_t>(codes.get() + k * code_elements, code_elements),
            zero::View<float>(scales.get() + k * blocks, blocks)};
  };
  zero::Adam adam;
  double split_seconds = 0.0, fp32_seconds = 0.0;
  using clock = std::chrono::steady_clock;
  const zero::View<const zero::bfloat16> grad_view(grad.get(), n);
  const zero::SplitMasterView<zero::bfloat16, R> split{view_of(weight, n), view_of(residual, n)};
  for (auto _ : state) {
    const zero::AdamUpdate update = adam.begin_step();
    const auto start = clock::now();
    if constexpr (EightBit)
      zero::quantized_fused_step(update, view_of(master, n), moment(0), moment(1), grad_view, 1.0f,
                                 view_of(copy, n));
    else
      zero::fused_step(update, view_of(master, n), {view_of(m, n), view_of(v, n)}, grad_view, 1.0f,
                       view_of(copy, n));
    benchmark::ClobberMemory();
    const auto middle = clock::now();
    if constexpr (EightBit)
      zero::quantized_fused_step(update, split, moment(2), moment(3), grad_view);
    else
      zero::split_fused_step(update, split, {view_of(m2, n), view_of(v2, n)}, grad_view);
    benchmark::ClobberMemory();
    const auto end = clock::now();
    const double split_step = std::chrono::duration<double>(end - middle).count();
    state.SetIterationTime(split_step);
    split_seconds += split_step;
    fp32_seconds += std::chrono::duration<double>(middle - start).count();
  }
  report(state, n, 6.0 + 2.0 * sizeof(R) + (EightBit ? 4.0 : 16.0));
  state.counters["vs_fp32_master"] = benchmark::Counter(split_seconds / fp32_seconds);
}

// What the speculative update's snapshot costs the CPU: the fp32 master weights and both moments
// copied into a snapshot (copy_bytes_in_parallel with streaming stores, as the offloaded store
// saves a layer) and then the bf16 Adam step, against the step alone, in alternation; the time is
// the pair's, `vs_step` the ratio of its time to the step's. Bytes per element: the step's 28 and
// the copy's 24.
void snapshot_then_step_vs_step(benchmark::State& state) {
  const std::size_t n = parameter_count;
  auto master = huge_array<float>(n, 0.5f);
  auto m = huge_array<float>(n, 0.0f);
  auto v = huge_array<float>(n, 0.0f);
  auto snapshot = huge_array<std::uint8_t>(3 * n * sizeof(float), 0.0f);
  auto grad = huge_array<zero::bfloat16>(n, 0.01f);
  auto copy = huge_array<zero::bfloat16>(n, 0.0f);
  zero::Adam adam;
  double pair_seconds = 0.0, step_seconds = 0.0;
  using clock = std::chrono::steady_clock;
  const zero::View<const zero::bfloat16> grad_view(grad.get(), n);
  const auto step = [&](const zero::AdamUpdate& update) {
    zero::fused_step(update, view_of(master, n), {view_of(m, n), view_of(v, n)}, grad_view, 1.0f,
                     view_of(copy, n));
    benchmark::ClobberMemory();
  };
  for (auto _ : state) {
    const zero::AdamUpdate update = adam.begin_step();
    const auto start = clock::now();
    step(update);
    const auto middle = clock::now();
    std::size_t at = 0;
    for (float* state_tensor : {master.get(), m.get(), v.get()}) {
      const zero::View<std::byte> bytes = zero::writable_bytes(zero::View<float>(state_tensor, n));
      zero::copy_bytes_in_parallel(
          zero::View<const std::byte>(bytes.data(), bytes.size()),
          zero::writable_bytes(zero::View<std::uint8_t>(snapshot.get() + at, bytes.size())),
          /*streaming=*/true);
      at += bytes.size();
    }
    step(update);
    const auto end = clock::now();
    const double pair = std::chrono::duration<double>(end - middle).count();
    state.SetIterationTime(pair);
    pair_seconds += pair;
    step_seconds += std::chrono::duration<double>(middle - start).count();
  }
  report(state, n, 28.0 + 24.0);
  state.counters["vs_step"] = benchmark::Counter(pair_seconds / step_seconds);
}

// The parts of the 8-bit step on one block of 2048 elements held in cache, one thread: what bounds
// the step once memory does not. Each iteration times every part; the counters are nanoseconds a
// value (both moments' dequantization, the Adam update with master weights and bf16 copy, both
// moments' absolute maximum and quantization) and the whole block's step.
void adam_8bit_parts(benchmark::State& state) {
  constexpr std::size_t n = zero::quantized_moment_block;
  const zero::DynamicMap& signed_map = zero::DynamicMap::signed_map();
  const zero::DynamicMap& unsigned_map = zero::DynamicMap::unsigned_map();
  std::vector<float> master(n), m(n), v(n);
  std::vector<zero::bfloat16> grad(n), copy(n);
  std::vector<std::uint8_t> m_codes(n), v_codes(n);
  for (std::size_t i = 0; i < n; ++i) { // moments over a few decades, as after some steps
    const float g = std::sin(0.1f * float(i)) * (1.0f + float(i % 97)) * 1e-3f;
    master[i] = 0.5f;
    grad[i] = zero::bfloat16(g);
    m[i] = 0.1f * g;
    v[i] = 1e-3f * g * g;
  }
  std::vector<float> m_scale{zero::quantize_block(signed_map, m.data(), n, m_codes.data())};
  std::vector<float> v_scale{zero::quantize_block(unsigned_map, v.data(), n, v_codes.data())};
  zero::Adam adam;
  const zero::AdamUpdate update = adam.begin_step();
  double parts[5] = {};
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = clock::now();
    signed_map.dequantize(m_codes.data(), n, m_scale[0], m.data());
    unsigned_map.dequantize(v_codes.data(), n, v_scale[0], v.data());
    benchmark::ClobberMemory();
    const auto t1 = clock::now();
    const zero::detail::StepPointers<zero::bfloat16, zero::bfloat16, 2> p{
        master.data(), {m.data(), v.data()}, grad.data(), copy.data()};
    zero::detail::step_range<zero::detail::CopyStores::normal>(update, p, 1.0f, 0, n);
    benchmark::ClobberMemory();
    const auto t2 = clock::now();
    const float m_max = zero::absolute_maximum(m.data(), n);
    const float v_max = zero::absolute_maximum(v.data(), n);
    benchmark::DoNotOptimize(m_max);
    benchmark::DoNotOptimize(v_max);
    const auto t3 = clock::now();
    signed_map.quantize(m.data(), n, 1.0f / m_max, m_codes.data());
    unsigned_map.quantize(v.data(), n, 1.0f / v_max, v_codes.data());
    benchmark::ClobberMemory();
    const auto t4 = clock::now();
    zero::quantized_fused_step(update, zero::View<float>(master),
                               {zero::View<std::uint8_t>(m_codes), zero::View<float>(m_scale)},
                               {zero::View<std::uint8_t>(v_codes), zero::View<float>(v_scale)},
                               zero::View<const zero::bfloat16>(grad), 1.0f,
                               zero::View<zero::bfloat16>(copy));
    benchmark::ClobberMemory();
    const auto t5 = clock::now();
    const clock::time_point at[] = {t0, t1, t2, t3, t4, t5};
    for (std::size_t k = 0; k < 5; ++k)
      parts[k] += std::chrono::duration<double>(at[k + 1] - at[k]).count();
  }
  const double values = double(state.iterations()) * double(n) * 1e-9; // ns a value
  const char* names[] = {"dequantize_ns", "adam_ns", "absmax_ns", "quantize_ns", "block_step_ns"};
  for (std::size_t k = 0; k < 5; ++k)
    state.counters[names[k]] = benchmark::Counter(parts[k] / values);
}

template <class Grad>
void overflow_check(benchmark::State& state) {
  const std::size_t n = parameter_count;
  auto grad = huge_array<Grad>(n, 0.01f);
  for (auto _ : state)
    benchmark::DoNotOptimize(zero::has_overflow(view_of(grad, n)));
  report(state, n, sizeof(Grad));
}

void unscale_check_fp32(benchmark::State& state) {
  const std::size_t n = parameter_count;
  auto grad = huge_array<float>(n, 0.01f);
  for (auto _ : state)
    benchmark::DoNotOptimize(zero::unscale_and_check(view_of(grad, n), 1.0f));
  report(state, n, 2 * sizeof(float));
}

template <class Grad>
void sum_of_squares(benchmark::State& state) {
  const std::size_t n = parameter_count;
  auto grad = huge_array<Grad>(n, 0.01f);
  for (auto _ : state)
    benchmark::DoNotOptimize(zero::sum_of_squares(view_of(grad, n)));
  report(state, n, sizeof(Grad));
}

void register_all() {
  const auto add = [](const char* name, void (*fn)(benchmark::State&)) {
    benchmark::RegisterBenchmark(name, fn)->UseRealTime()->Unit(benchmark::kMillisecond);
  };
  add("stream_triad/fp64", triad);
  add("adam_step/fp16_grad/fp16_copy", adam_fp16);
  benchmark::RegisterBenchmark("adam_step_vs_triad/fp16_grad/fp16_copy", adam_step_vs_triad)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  add("adam_step/bf16_grad/bf16_copy", adam_bf16);
  benchmark::RegisterBenchmark("adam_8bit_vs_fp32/bf16_grad/bf16_copy", adam_8bit_vs_fp32)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("adam_8bit_parts/one_block_in_cache", adam_8bit_parts)
      ->Unit(benchmark::kMicrosecond);
  const auto split = [](const char* name, void (*fn)(benchmark::State&)) {
    benchmark::RegisterBenchmark(name, fn)->UseManualTime()->Unit(benchmark::kMillisecond);
  };
  split("split_master_vs_fp32_master/8bit_residual/8bit_moments",
        split_master_vs_fp32_master<std::int8_t, true>);
  split("split_master_vs_fp32_master/16bit_residual/8bit_moments",
        split_master_vs_fp32_master<std::int16_t, true>);
  split("split_master_vs_fp32_master/8bit_residual/fp32_moments",
        split_master_vs_fp32_master<std::int8_t, false>);
  split("split_master_vs_fp32_master/16bit_residual/fp32_moments",
        split_master_vs_fp32_master<std::int16_t, false>);
  split("snapshot_then_step_vs_step/bf16_grad/bf16_copy", snapshot_then_step_vs_step);
  add("lamb_step/fp16_grad/fp16_copy", lamb_fp16);
  add("adam_step/fp32_grad/no_copy", adam_fp32);
  add("adamw_step/fp16_grad/fp16_copy", adamw_fp16);
  add("sgd_momentum_step/fp16_grad/fp16_copy", sgd_momentum_fp16);
  add("has_overflow/fp16", overflow_check<zero::half>);
  add("has_overflow/fp32", overflow_check<float>);
  add("unscale_and_check/fp32", unscale_check_fp32);
  add("sum_of_squares/fp16", sum_of_squares<zero::half>);
  add("sum_of_squares/fp32", sum_of_squares<float>);
}

} // namespace

int main(int argc, char** argv) {
  // --params=N sets the number of parameters (elements) of every benchmark.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--params=", 9) == 0) {
      char* end = nullptr;
      const unsigned long long value = std::strtoull(argv[i] + 9, &end, 10);
      if (end == argv[i] + 9 || *end != '\0' || value == 0) {
        std::fprintf(stderr, "zero_bench_optim: --params expects a positive integer\n");
        return 2;
      }
      parameter_count = static_cast<std::size_t>(value);
    } else {
      args.push_back(argv[i]);
    }
  }
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::AddCustomContext("params", std::to_string(parameter_count));
  benchmark::AddCustomContext("omp_threads", std::to_string(zero::detail::parallel_max_threads()));
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
