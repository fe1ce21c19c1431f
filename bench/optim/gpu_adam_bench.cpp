// The fused Adam step on a CUDA device against a device-to-device copy that moves the same bytes
// (the goal: fused Adam at least 0.95 of copy bandwidth). A plain main, not Google Benchmark:
// the GPU machines have no Debian packages, and the report is a few fixed lines the GPU check
// (tools/zero-gpu-check) shows as they are.
//
//   zero_bench_optim_gpu [--elements=16777216,268435456] [--dtype=bfloat16,float16]
//                        [--reps=50] [--warmup=5] [--target=0.95]
//
// For each size and gradient type (the compute copy has the gradient's type):
//   step: zero::fused_step (optim/cuda_step.hpp), Adam, fp32 master weights, fp32 exp_avg and
//         exp_avg_sq, 16-bit gradients scaled by a multiplier, the 16-bit compute copy written.
//         28 bytes per element: read master 4 + exp_avg 4 + exp_avg_sq 4 + grad 2 (14), write
//         master 4 + exp_avg 4 + exp_avg_sq 4 + compute copy 2 (14).
//   copy: one cudaMemcpyAsync device to device of 14 bytes per element, counted as it reads 14
//         and writes 14: 28 bytes per element, the step's traffic (CUDA's bandwidthTest counts a
//         device-to-device copy the same way, 2 x size; nccl-tests' algbw would count 14).
// Each repetition times one step and then one copy with cudaEvents on one stream, after `warmup`
// untimed pairs; all repetitions are queued back to back, each with its own events, and the host
// synchronizes once at the end (a sync per repetition would leave the GPU idle when the step's
// start event is recorded and count the launch gap as step time). GB/s (10^9 bytes) and
// elements/s come from the median time, the ratio is step GB/s / copy GB/s. The PASS/FAIL line
// against the target is a report: the exit status is 0 unless a CUDA call fails (1) or the
// correctness check finds a mismatch (1); 77 without a device.
//
// Correctness, once, first: one step on 100,003 random elements, aligned (the 4-lane vector path
// the timed buffers take) and misaligned by one element (the scalar path), on the device and with
// the host's zero::fused_step (optim/fused_step.hpp) must agree bit for bit in master, both
// moments and the compute copy.

#include <zero/core/buffer.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/core/dtype.hpp>
#include <zero/core/view.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/cuda_step.hpp>
#include <zero/optim/fused_step.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using zero::bfloat16;
using zero::half;

constexpr double step_bytes_per_element = 28.0;    // 14 read + 14 written
constexpr std::size_t copy_bytes_per_element = 14; // copied; read and written: 28 moved
constexpr float grad_multiplier = 1.0f / 1024;

struct Options {
  std::vector<std::size_t> elements = {std::size_t{1} << 24, std::size_t{1} << 28};
  std::vector<std::string> dtypes = {"bfloat16", "float16"};
  int reps = 50;
  int warmup = 5;
  double target = 0.95;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr,
               "zero_bench_optim_gpu: %s\nusage: zero_bench_optim_gpu [--elements=N,...] "
               "[--dtype=bfloat16,float16] [--reps=N] [--warmup=N] [--target=R]\n",
               message.c_str());
  std::exit(2);
}

std::vector<std::string> split(std::string_view list) {
  std::vector<std::string> items;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    items.emplace_back(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
  return items;
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const std::size_t equals = arg.find('=');
    if (!arg.starts_with("--") || equals == std::string_view::npos)
      usage_error("unknown argument '" + std::string(arg) + "'");
    const std::string_view name = arg.substr(2, equals - 2);
    const std::string value(arg.substr(equals + 1));
    try {
      if (name == "elements") {
        options.elements.clear();
        for (const std::string& item : split(value))
          options.elements.push_back(std::stoull(item));
      } else if (name == "dtype") {
        options.dtypes = split(value);
        for (const std::string& dtype : options.dtypes)
          if (dtype != "bfloat16" && dtype != "float16")
            usage_error("--dtype takes bfloat16 and/or float16, not '" + dtype + "'");
      } else if (name == "reps") {
        options.reps = std::stoi(value);
      } else if (name == "warmup") {
        options.warmup = std::stoi(value);
      } else if (name == "target") {
        options.target = std::stod(value);
      } else {
        usage_error("unknown option '--" + std::string(name) + "'");
      }
    } catch (const std::logic_error&) { // stoull, stoi, stod
      usage_error("bad value in '" + std::string(arg) + "'");
    }
  }
  if (options.reps < 1 || options.warmup < 0 || options.elements.empty() ||
      std::find(options.elements.begin(), options.elements.end(), 0) != options.elements.end())
    usage_error("--reps must be >= 1, --warmup >= 0, --elements non-empty and positive");
  return options;
}

template <class T>
zero::View<T, zero::cuda> device_view(zero::Buffer<T, zero::cuda>& buffer, std::size_t offset) {
  return {buffer.data() + offset, buffer.size() - offset};
}

// --- correctness
// -----------------------------------------------------------------------------------

template <class T>
std::size_t count_mismatches(const char* what, const std::vector<T>& device,
                             const std::vector<T>& host) {
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (std::memcmp(&device[i], &host[i], sizeof(T)) == 0) continue;
    if (++mismatches <= 5)
      std::printf("  mismatch: %s[%zu] device %.9g host %.9g\n", what, i,
                  static_cast<double>(zero::convert<float>(device[i])),
                  static_cast<double>(zero::convert<float>(host[i])));
  }
  return mismatches;
}

template <class T>
void upload(zero::Buffer<T, zero::cuda>& device, const std::vector<T>& host) {
  ZERO_CHECK_CUDA(
      cudaMemcpy(device.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <class T>
void download(std::vector<T>& host, const zero::Buffer<T, zero::cuda>& device) {
  ZERO_CHECK_CUDA(
      cudaMemcpy(host.data(), device.data(), host.size() * sizeof(T), cudaMemcpyDeviceToHost));
}

// One Adam step on `n` random elements, on the device and on the host; the mismatches. The device
// views start `offset` elements into their buffers: 0 is aligned (the kernel's 4-lane vector path,
// which the timed buffers take), 1 misaligned (its scalar path).
template <class Low>
std::size_t check_against_host(std::size_t n, std::size_t offset) {
  std::mt19937 random(28);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> master(n + offset), exp_avg(n + offset), exp_avg_sq(n + offset);
  std::vector<Low> grad(n + offset), copy(n + offset);
  for (std::size_t i = 0; i < n + offset; ++i) {
    master[i] = uniform(random);
    exp_avg[i] = 0.1f * uniform(random);
    exp_avg_sq[i] = 0.01f * std::abs(uniform(random));
    grad[i] = zero::convert<Low>(64.0f * uniform(random));
  }
  const zero::AdamUpdate update = zero::Adam({.weight_decay = 0.01}).update_for_step(3);

  zero::Buffer<float, zero::cuda> d_master(n + offset, zero::uninitialized),
      d_exp_avg(n + offset, zero::uninitialized), d_exp_avg_sq(n + offset, zero::uninitialized);
  zero::Buffer<Low, zero::cuda> d_grad(n + offset, zero::uninitialized),
      d_copy(n + offset, zero::uninitialized);
  upload(d_master, master);
  upload(d_exp_avg, exp_avg);
  upload(d_exp_avg_sq, exp_avg_sq);
  upload(d_grad, grad);
  upload(d_copy, copy);
  zero::fused_step(update, device_view(d_master, offset),
                   {device_view(d_exp_avg, offset), device_view(d_exp_avg_sq, offset)},
                   zero::View<const Low, zero::cuda>(device_view(d_grad, offset)), grad_multiplier,
                   device_view(d_copy, offset), nullptr);
  ZERO_CHECK_CUDA(cudaDeviceSynchronize());

  const auto host_view = [&]<class T>(std::vector<T>& v) {
    return zero::View<T>(v.data() + offset, n);
  };
  zero::fused_step(update, host_view(master), {host_view(exp_avg), host_view(exp_avg_sq)},
                   zero::View<const Low>(host_view(grad)), grad_multiplier, host_view(copy));

  std::vector<float> got_master(n + offset), got_exp_avg(n + offset), got_exp_avg_sq(n + offset);
  std::vector<Low> got_copy(n + offset);
  download(got_master, d_master);
  download(got_exp_avg, d_exp_avg);
  download(got_exp_avg_sq, d_exp_avg_sq);
  download(got_copy, d_copy);
  return count_mismatches("master", got_master, master) +
         count_mismatches("exp_avg", got_exp_avg, exp_avg) +
         count_mismatches("exp_avg_sq", got_exp_avg_sq, exp_avg_sq) +
         count_mismatches("copy", got_copy, copy);
}

// --- timing --------------------------------------------------------------------------------------

struct Events {
  std::vector<cudaEvent_t> e;
  explicit Events(std::size_t count) {
    e.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      cudaEvent_t event = nullptr;
      ZERO_CHECK_CUDA(cudaEventCreate(&event));
      e.push_back(event);
    }
  }
  ~Events() {
    for (auto& event : e)
      ZERO_LOG_CUDA(cudaEventDestroy(event));
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

struct Result {
  double step_ms = 0, copy_ms = 0, step_min_ms = 0, copy_min_ms = 0;
};

template <class Low>
Result time_step_and_copy(std::size_t n, const Options& options, cudaStream_t stream) {
  zero::Buffer<float, zero::cuda> master(n, zero::uninitialized), exp_avg(n, zero::uninitialized),
      exp_avg_sq(n, zero::uninitialized);
  zero::Buffer<Low, zero::cuda> grad(n, zero::uninitialized), copy(n, zero::uninitialized);
  zero::Buffer<std::byte, zero::cuda> source(n * copy_bytes_per_element, zero::uninitialized),
      destination(n * copy_bytes_per_element, zero::uninitialized);
  // Finite, normal values (0x3C3C3C3C is 0.0115f; 0x3C3C is 0.0115 in bfloat16, 1.06 in half).
  ZERO_CHECK_CUDA(cudaMemset(master.data(), 0x3C, master.size_bytes()));
  ZERO_CHECK_CUDA(cudaMemset(exp_avg.data(), 0x3B, exp_avg.size_bytes()));
  ZERO_CHECK_CUDA(cudaMemset(exp_avg_sq.data(), 0x3A, exp_avg_sq.size_bytes()));
  ZERO_CHECK_CUDA(cudaMemset(grad.data(), 0x3C, grad.size_bytes()));
  ZERO_CHECK_CUDA(cudaMemset(source.data(), 0x3C, source.size_bytes()));
  ZERO_CHECK_CUDA(cudaDeviceSynchronize());

  const zero::AdamUpdate update = zero::Adam().update_for_step(10);
  const auto step = [&] {
    zero::fused_step(update, master.view(), {exp_avg.view(), exp_avg_sq.view()},
                     zero::View<const Low, zero::cuda>(grad.view()), grad_multiplier, copy.view(),
                     stream);
  };
  const auto copy_bytes = [&] {
    ZERO_CHECK_CUDA(cudaMemcpyAsync(destination.data(), source.data(), source.size_bytes(),
                                    cudaMemcpyDeviceToDevice, stream));
  };
  for (int i = 0; i < options.warmup; ++i) {
    step();
    copy_bytes();
  }
  // Every rep queued before any is waited for, with its own events: e[2i] starts step i, e[2i+1]
  // ends it and starts copy i, e[2i+2] ends that copy and starts step i+1. The stream is never
  // idle when a start event is recorded (no host sync between reps), so neither the step nor the
  // copy pays a launch gap; one synchronization at the end.
  const std::size_t reps = static_cast<std::size_t>(options.reps);
  Events events(2 * reps + 1);
  ZERO_CHECK_CUDA(cudaEventRecord(events.e[0], stream));
  for (std::size_t i = 0; i < reps; ++i) {
    step();
    ZERO_CHECK_CUDA(cudaEventRecord(events.e[2 * i + 1], stream));
    copy_bytes();
    ZERO_CHECK_CUDA(cudaEventRecord(events.e[2 * i + 2], stream));
  }
  ZERO_CHECK_CUDA(cudaEventSynchronize(events.e[2 * reps]));
  std::vector<double> step_ms, copy_ms;
  for (std::size_t i = 0; i < reps; ++i) {
    float a = 0, b = 0;
    ZERO_CHECK_CUDA(cudaEventElapsedTime(&a, events.e[2 * i], events.e[2 * i + 1]));
    ZERO_CHECK_CUDA(cudaEventElapsedTime(&b, events.e[2 * i + 1], events.e[2 * i + 2]));
    step_ms.push_back(a);
    copy_ms.push_back(b);
  }
  ZERO_CHECK_CUDA(cudaGetLastError());
  return {median(step_ms), median(copy_ms), *std::min_element(step_ms.begin(), step_ms.end()),
          *std::min_element(copy_ms.begin(), copy_ms.end())};
}

double gb_per_s(double bytes, double ms) {
  return bytes / (ms * 1e-3) / 1e9;
}

} // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipping the GPU fused Adam benchmark\n");
    return 77;
  }
  try {
    cudaDeviceProp properties{};
    ZERO_CHECK_CUDA(cudaGetDeviceProperties(&properties, 0));
    std::printf("device: %s (sm_%d%d, %.1f GiB)\n", properties.name, properties.major,
                properties.minor, static_cast<double>(properties.totalGlobalMem) / (1 << 30));
    std::printf("bytes per element: step 28 = read master 4 + exp_avg 4 + exp_avg_sq 4 + grad 2, "
                "write master 4 + exp_avg 4 + exp_avg_sq 4 + copy 2; copy: cudaMemcpyAsync D2D "
                "of 14 per element, counted read + write = 28\n");

    constexpr std::size_t check_elements = 100003;
    std::size_t mismatches = 0;
    for (const std::string& dtype : options.dtypes) {
      for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
        const std::size_t m = dtype == "bfloat16"
                                  ? check_against_host<bfloat16>(check_elements, offset)
                                  : check_against_host<half>(check_elements, offset);
        std::printf("correctness %s offset %zu (%s): %zu elements, one Adam step against the host "
                    "fused_step: %s (%zu mismatches)\n",
                    dtype.c_str(), offset, offset == 0 ? "aligned" : "misaligned", check_elements,
                    m == 0 ? "bitwise equal" : "MISMATCH", m);
        mismatches += m;
      }
    }

    cudaStream_t stream = nullptr;
    ZERO_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    double worst = 0;
    bool measured = false;
    for (const std::size_t n : options.elements) {
      // master, moments, grad, copy: 16 bytes; the copy's source and destination: 28.
      const double needed = static_cast<double>(n) * 44.0;
      std::size_t free_bytes = 0, total_bytes = 0;
      ZERO_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
      if (needed > 0.95 * static_cast<double>(free_bytes)) {
        std::printf("skipped n=%zu: needs %.1f GB of device memory, %.1f GB free\n", n,
                    needed / 1e9, static_cast<double>(free_bytes) / 1e9);
        continue;
      }
      for (const std::string& dtype : options.dtypes) {
        const Result r = dtype == "bfloat16" ? time_step_and_copy<bfloat16>(n, options, stream)
                                             : time_step_and_copy<half>(n, options, stream);
        const double bytes = step_bytes_per_element * static_cast<double>(n);
        const double step_gbs = gb_per_s(bytes, r.step_ms);
        const double copy_gbs = gb_per_s(bytes, r.copy_ms);
        const double ratio = step_gbs / copy_gbs;
        worst = measured ? std::min(worst, ratio) : ratio;
        measured = true;
        std::printf("result adam %-8s n=%zu reps=%d: step %.3f ms (min %.3f) %.1f GB/s %.2f "
                    "Gelem/s | copy %.3f ms (min %.3f) %.1f GB/s | ratio %.3f %s %.2f\n",
                    dtype.c_str(), n, options.reps, r.step_ms, r.step_min_ms, step_gbs,
                    static_cast<double>(n) / (r.step_ms * 1e-3) / 1e9, r.copy_ms, r.copy_min_ms,
                    copy_gbs, ratio, ratio >= options.target ? ">=" : "<", options.target);
      }
    }
    ZERO_CHECK_CUDA(cudaStreamDestroy(stream));
    if (measured)
      std::printf("target fused Adam >= %.2f of copy bandwidth: %s (lowest ratio %.3f)\n",
                  options.target, worst >= options.target ? "PASS" : "FAIL", worst);
    else
      std::printf("target fused Adam >= %.2f of copy bandwidth: not measured\n", options.target);
    if (mismatches != 0) {
      std::printf("zero_bench_optim_gpu: the device step differs from the host's\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::printf("zero_bench_optim_gpu: error: %s\n", e.what());
    return 1;
  }
}
