// zero-bench-collectives: nccl-tests-style bandwidth tables for zero's communicators and for plain
// Open MPI, so that the two are compared in one run on the same machine.
//
//   mpirun -np 2 zero-bench-collectives -b 1M -e 256M -f 16 --op all --backend mpi
//
// time: mean time of one call, the slowest rank's; algbw = size / time; busbw = algbw times
// 2(n-1)/n (all_reduce), (n-1)/n (reduce_scatter, all_gather) or 1 (broadcast, reduce), as in
// nccl-tests, so that busbw is comparable across ops and rank counts.

#include "backends.hpp"
#include "core_check.hpp"
#include "options.hpp"
#include "reference.hpp"

#include <zero/core/directory_handle.hpp>

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace bench;

double bus_factor(Collective c, int n) {
  switch (c) {
  case Collective::all_reduce:
    return 2.0 * (n - 1) / n;
  case Collective::reduce_scatter:
  case Collective::all_gather:
    return double(n - 1) / n;
  default:
    return 1.0;
  }
}

struct Measure {
  double time_us = 0, algbw = 0, busbw = 0;
  long long wrong = -1; // -1: not checked
};

struct Row {
  Collective op;
  std::size_t size_bytes, count;
  Measure out_of_place, in_place;
};

class Sweep {
 public:
  Sweep(const Options& options, Backend& backend, int rank, int ranks)
      : o_(options), backend_(backend), rank_(rank), ranks_(ranks) {}

  // The arguments of `op` for a buffer of about `bytes` bytes, out of place or in place.
  CollectiveArgs args_for(Collective op, std::size_t bytes, bool in_place) const {
    CollectiveArgs a;
    a.kind = op;
    a.dtype = o_.dtype;
    a.op = o_.redop;
    a.root = o_.root;
    const std::size_t elements = bytes / zero::size_of(o_.dtype);
    const bool blocks = op == Collective::reduce_scatter || op == Collective::all_gather;
    a.count = blocks ? elements / std::size_t(ranks_) : elements;
    std::byte* send = backend_.send_buffer();
    std::byte* recv = backend_.recv_buffer();
    const std::size_t block_bytes = a.count * a.element_bytes() * std::size_t(rank_);
    a.send = send;
    a.recv = recv;
    if (in_place) {
      if (op == Collective::reduce_scatter)
        a.recv = send + block_bytes;
      else if (op == Collective::all_gather)
        a.send = recv + block_bytes;
      else
        a.send = recv;
    }
    return a;
  }

  Measure measure(const CollectiveArgs& a) {
    Measure m;
    fill_inputs(a);
    backend_.run(a, o_.warmup);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    backend_.run(a, o_.iterations);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double per_call = seconds / o_.iterations;
    const double bytes = double(a.payload_bytes(ranks_));
    m.time_us = per_call * 1e6;
    m.algbw = per_call > 0 ? bytes / per_call / 1e9 : 0;
    m.busbw = m.algbw * bus_factor(a.kind, ranks_);
    if (o_.check) m.wrong = count_wrong(a);
    return m;
  }

 private:
  void fill_inputs(const CollectiveArgs& a) {
    const std::size_t n = a.send_count(ranks_);
    if (n == 0) return;
    std::vector<std::byte> host(n * a.element_bytes());
    // In-place reduce_scatter and all_gather inputs are read from the block at rank * count.
    const std::size_t first = a.kind == Collective::all_gather ? std::size_t(rank_) * a.count : 0;
    fill_pattern(a.dtype, host.data(), n, rank_, first);
    backend_.upload(static_cast<std::byte*>(const_cast<void*>(a.send)), host.data(), host.size());
  }

  long long count_wrong(const CollectiveArgs& a) {
    fill_inputs(a);
    backend_.run(a, 1);
    long long wrong = 0;
    const bool receives = a.kind != Collective::reduce || a.root == rank_;
    if (receives) {
      const std::size_t n = a.recv_count(ranks_);
      std::vector<std::byte> host(n * a.element_bytes());
      backend_.download(host.data(), static_cast<const std::byte*>(a.recv), host.size());
      wrong = count_mismatches(a, host.data(), rank_, ranks_);
    }
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    return wrong;
  }

  const Options& o_;
  Backend& backend_;
  int rank_, ranks_;
};

void print_header(const Options& o, const Backend& backend, int ranks, Collective op) {
  std::printf("#\n# %s: %s, %d ranks, %d iterations after %d warm-up\n", zero::to_string(op),
              backend.describe().c_str(), ranks, o.iterations, o.warmup);
  std::printf("#\n# %10s %12s %8s %6s %6s %10s %8s %8s %7s %10s %8s %8s %7s\n", "", "", "", "", "",
              "", "out-of-place", "", "", "", "in-place", "", "");
  std::printf("# %10s %12s %8s %6s %6s %10s %8s %8s %7s %10s %8s %8s %7s\n", "size", "count",
              "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
              "#wrong");
  std::printf("# %10s %12s %8s %6s %6s %10s %8s %8s %7s %10s %8s %8s %7s\n", "(B)", "(elements)",
              "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

std::string wrong_text(long long wrong) {
  return wrong < 0 ? "N/A" : std::to_string(wrong);
}

void print_row(const Row& r, const Options& o) {
  const bool reducing = zero::uses_reduce_op(r.op);
  const int root = zero::uses_root(r.op) ? o.root : -1;
  std::printf("  %10zu %12zu %8s %6s %6d %10.1f %8.2f %8.2f %7s %10.1f %8.2f %8.2f %7s\n",
              r.size_bytes, r.count, zero::to_string(o.dtype),
              reducing ? zero::to_string(o.redop) : "none", root, r.out_of_place.time_us,
              r.out_of_place.algbw, r.out_of_place.busbw, wrong_text(r.out_of_place.wrong).c_str(),
              r.in_place.time_us, r.in_place.algbw, r.in_place.busbw,
              wrong_text(r.in_place.wrong).c_str());
  std::fflush(stdout);
}

void write_json(const std::string& path, const Options& o, const Backend& backend, int ranks,
                const CoreCheck& cores, const std::vector<Row>& rows) {
  std::ostringstream out;
  auto measure = [](const Measure& m) {
    return "{\"time_us\": " + std::to_string(m.time_us) +
           ", \"algbw\": " + std::to_string(m.algbw) + ", \"busbw\": " + std::to_string(m.busbw) +
           ", \"wrong\": " + std::to_string(m.wrong) + "}";
  };
  out << "{\n  \"tool\": \"zero-bench-collectives\",\n  \"backend\": \"" << o.backend
      << "\",\n  \"description\": \"" << backend.describe() << "\",\n  \"ranks\": " << ranks
      << ",\n  \"dtype\": \"" << zero::to_string(o.dtype) << "\",\n  \"redop\": \""
      << zero::to_string(o.redop) << "\",\n  \"iterations\": " << o.iterations
      << ",\n  \"core_check_gbps\": {\"min\": " << cores.min_gbps << ", \"max\": " << cores.max_gbps
      << "},\n  \"round_trip_ns\": " << cores.round_trip_ns << ",\n  \"results\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out << "    {\"op\": \"" << zero::to_string(r.op) << "\", \"size\": " << r.size_bytes
        << ", \"count\": " << r.count << ", \"out_of_place\": " << measure(r.out_of_place)
        << ", \"in_place\": " << measure(r.in_place) << "}" << (i + 1 < rows.size() ? "," : "")
        << "\n";
  }
  out << "  ]\n}\n";
  // Whole, under a fresh temporary name renamed into place: never through a name planted in /tmp.
  const std::filesystem::path file(path);
  const std::filesystem::path parent = file.parent_path();
  const std::string text = out.str();
  const std::span<const std::byte> bytes = std::as_bytes(std::span<const char>(text));
  zero::DirectoryHandle::open_named(parent.empty() ? std::filesystem::path(".") : parent,
                                    "--json " + path)
      .write_file_atomically(file.filename().string(), std::span(&bytes, 1));
}

int run(int argc, char** argv) {
  zero::MpiCommunicator world(argc, argv);
  const int rank = world.rank();
  const int ranks = world.size();
  const Options o = parse_options(argc, argv);
  if (o.help) {
    if (rank == 0) std::printf("%s", help_text().c_str());
    return 0;
  }

  std::unique_ptr<Backend> backend;
  if (o.backend == "mpi")
    backend = std::make_unique<ZeroMpiBackend>(world, o.max_bytes, o.blocking);
  else if (o.backend == "raw-mpi")
    backend = std::make_unique<RawMpiBackend>(MPI_COMM_WORLD, o.max_bytes);
#if ZERO_HAS_CUDA
  else if (o.backend == "nccl")
    backend = std::make_unique<NcclBackend>(world, o.max_bytes);
#endif
  else
    zero::fail(zero::ErrorKind::invalid_argument,
               "--backend " + o.backend + " is not available in this build");

  const CoreCheck cores = check_cores(MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("# machine check: in-cache float sum, all ranks at once, %.1f-%.1f GB/s per rank; "
                "round trip of a cache line between ranks %.0f ns\n",
                cores.min_gbps, cores.max_gbps, cores.round_trip_ns);
  const std::vector<std::size_t> sizes = o.sizes();
  std::vector<Row> rows;
  Sweep sweep(o, *backend, rank, ranks);
  const bool tty = isatty(STDERR_FILENO) != 0;
  auto last_progress = std::chrono::steady_clock::now();
  const std::size_t total = sizes.size() * o.ops.size();
  for (Collective op : o.ops) {
    if (o.backend == "raw-mpi") {
      CollectiveArgs probe;
      probe.kind = op;
      probe.dtype = o.dtype;
      probe.op = o.redop;
      RawMpiBackend::require_supported(probe);
    }
    if (rank == 0) print_header(o, *backend, ranks, op);
    double busbw_sum = 0;
    int busbw_count = 0;
    for (std::size_t bytes : sizes) {
      Row row{op, 0, 0, {}, {}};
      const CollectiveArgs oop = sweep.args_for(op, bytes, false);
      row.count = oop.count;
      row.size_bytes = oop.payload_bytes(ranks);
      row.out_of_place = sweep.measure(oop);
      row.in_place = sweep.measure(sweep.args_for(op, bytes, true));
      busbw_sum += row.out_of_place.busbw + row.in_place.busbw;
      busbw_count += 2;
      rows.push_back(row);
      if (rank == 0) print_row(row, o);
      // Long sweeps: say where we are on a terminal, or every few seconds in a log.
      const auto now = std::chrono::steady_clock::now();
      if (rank == 0 && (tty || now - last_progress > std::chrono::seconds(5))) {
        std::fprintf(stderr, "%s[progress] %s %zu B: %zu of %zu measurements done%s",
                     tty ? "\r" : "", zero::to_string(op), row.size_bytes, rows.size(), total,
                     tty ? "   " : "\n");
        last_progress = now;
      }
    }
    if (rank == 0) {
      if (tty) std::fprintf(stderr, "\r%60s\r", "");
      std::printf("# Avg bus bandwidth    : %.3f GB/s (%s)\n",
                  busbw_count ? busbw_sum / busbw_count : 0.0, zero::to_string(op));
    }
  }
  long long wrong = 0;
  for (const Row& r : rows)
    wrong += std::max(0LL, r.out_of_place.wrong) + std::max(0LL, r.in_place.wrong);
  if (rank == 0) {
    std::printf("#\n# Wrong elements       : %lld %s\n", wrong, wrong == 0 ? "OK" : "FAILED");
    if (!o.json.empty()) write_json(o.json, o, *backend, ranks, cores, rows);
  }
  return wrong == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const zero::Error& e) {
    // Every rank parses the same flags and sizes: a bad one fails everywhere alike, so the job can
    // end normally, with the message printed once.
    int rank = 0, finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (e.kind() == zero::ErrorKind::invalid_argument) {
      if (rank == 0) std::fprintf(stderr, "zero-bench-collectives: %s\n", e.what());
      return 2;
    }
    std::fprintf(stderr, "zero-bench-collectives: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
  }
}
