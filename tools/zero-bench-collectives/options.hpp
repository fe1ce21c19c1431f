#pragma once
// Command line of zero-bench-collectives, with nccl-tests' flag names.

#include <zero/comm/collective.hpp>
#include <zero/comm/reduce_op.hpp>
#include <zero/core/dtype.hpp>
#include <zero/core/error.hpp>

#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace bench {

inline constexpr std::size_t max_sizes = 1000; // rows of one sweep

inline const char* usage =
    "usage: mpirun -np N zero-bench-collectives [options]\n"
    "  -b, --minbytes SIZE    smallest buffer (default 8; suffixes K, M, G)\n"
    "  -e, --maxbytes SIZE    largest buffer (default 32M)\n"
    "  -f, --stepfactor F     multiply the size by F between rows (default 2)\n"
    "  -n, --iters N          timed iterations per size (default 20)\n"
    "  -w, --warmup_iters N   untimed iterations first (default 5)\n"
    "  -c, --check 0|1        verify results, counting wrong elements (default 1)\n"
    "  -o, --op OP            all_reduce, reduce_scatter, all_gather, broadcast, reduce or all\n"
    "  -d, --dtype TYPE       float, double, int32, int64, uint8, half, bfloat16 (default float)\n"
    "  -r, --redop OP         sum, avg, max, min (default sum)\n"
    "      --root R           root of broadcast and reduce (default 0)\n"
    "      --backend B        mpi (zero), raw-mpi (plain Open MPI) or nccl (default mpi)\n"
    "      --blocking         mpi backend: wait after every call instead of keeping all in flight\n"
    "      --json FILE        also write the results as JSON (rank 0)\n"
    "  -h, --help             this text\n";

struct Options {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{32} << 20;
  double factor = 2;
  int iterations = 20;
  int warmup = 5;
  bool check = true;
  std::vector<zero::Collective> ops{zero::Collective::all_reduce};
  zero::DType dtype = zero::DType::float32;
  zero::ReduceOp redop = zero::ReduceOp::sum;
  int root = 0;
  std::string backend = "mpi";
  bool blocking = false;
  std::string json;
  bool help = false;

  std::vector<std::size_t> sizes() const {
    std::vector<std::size_t> result;
    // One past max_sizes at most: parse_options refuses a sweep longer than that.
    for (double s = double(min_bytes);
         s <= double(max_bytes) * (1 + 1e-9) && result.size() <= max_sizes; s *= factor) {
      result.push_back(static_cast<std::size_t>(s));
      if (factor <= 1) break;
    }
    return result;
  }
};

// The largest size taken: 2^53 bytes (8 PiB), which a double holds exactly.
inline constexpr double max_size_bytes = 0x1p53;

inline std::size_t parse_size(std::string_view text) {
  std::size_t end = 0;
  double value = 0;
  try {
    value = std::stod(std::string(text), &end);
  } catch (...) {
    zero::fail(zero::ErrorKind::invalid_argument, "bad size '" + std::string(text) + "'");
  }
  std::string_view suffix = text.substr(end);
  double scale = 1;
  if (suffix == "K" || suffix == "k")
    scale = 1024.0;
  else if (suffix == "M" || suffix == "m")
    scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g")
    scale = 1024.0 * 1024 * 1024;
  else if (!suffix.empty() && suffix != "B")
    zero::fail(zero::ErrorKind::invalid_argument,
               "bad size suffix in '" + std::string(text) + "' (use K, M or G)");
  // Also refuses NaN and infinity, whose conversion to an integer is undefined.
  zero::require(value >= 0 && value * scale <= max_size_bytes,
                "bad size '" + std::string(text) + "' (from 0 to 8 PiB, 2^53 bytes)");
  return static_cast<std::size_t>(value * scale);
}

inline double parse_number(std::string_view flag, std::string_view text) {
  try {
    std::size_t end = 0;
    const double v = std::stod(std::string(text), &end);
    if (end == text.size() && std::isfinite(v)) return v;
  } catch (...) {
  }
  zero::fail(zero::ErrorKind::invalid_argument,
             std::string(flag) + " expects a number, got '" + std::string(text) + "'");
}

inline int parse_int(std::string_view flag, std::string_view text, int minimum) {
  try {
    std::size_t end = 0;
    const int v = std::stoi(std::string(text), &end);
    if (end == text.size() && v >= minimum) return v;
  } catch (...) {
  }
  zero::fail(zero::ErrorKind::invalid_argument,
             std::string(flag) + " expects an integer >= " + std::to_string(minimum) + ", got '" +
                 std::string(text) + "'");
}

inline std::vector<zero::Collective> parse_ops(std::string_view name) {
  using zero::Collective;
  if (name == "all")
    return {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather,
            Collective::broadcast, Collective::reduce};
  for (Collective c : zero::all_collectives)
    if (c != Collective::barrier && name == zero::to_string(c)) return {c};
  zero::fail(zero::ErrorKind::invalid_argument,
             "unknown --op '" + std::string(name) +
                 "' (expected all_reduce, reduce_scatter, all_gather, broadcast, reduce or all)");
}

inline Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&]() -> std::string_view {
      zero::require(i + 1 < argc, std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (flag == "-b" || flag == "--minbytes")
      o.min_bytes = parse_size(value());
    else if (flag == "-e" || flag == "--maxbytes")
      o.max_bytes = parse_size(value());
    else if (flag == "-f" || flag == "--stepfactor")
      o.factor = parse_number(flag, value());
    else if (flag == "-n" || flag == "--iters")
      o.iterations = parse_int(flag, value(), 1);
    else if (flag == "-w" || flag == "--warmup_iters")
      o.warmup = parse_int(flag, value(), 0);
    else if (flag == "-c" || flag == "--check")
      o.check = parse_int(flag, value(), 0) != 0;
    else if (flag == "-o" || flag == "--op")
      o.ops = parse_ops(value());
    else if (flag == "-d" || flag == "--dtype")
      o.dtype = zero::parse_dtype(value());
    else if (flag == "-r" || flag == "--redop")
      o.redop = zero::parse_reduce_op(value());
    else if (flag == "--root")
      o.root = parse_int(flag, value(), 0);
    else if (flag == "--backend")
      o.backend = std::string(value());
    else if (flag == "--blocking")
      o.blocking = true;
    else if (flag == "--json")
      o.json = std::string(value());
    else if (flag == "-h" || flag == "--help")
      o.help = true;
    else
      zero::fail(zero::ErrorKind::invalid_argument,
                 "unknown option '" + std::string(flag) + "' (see --help)");
  }
  zero::require(o.min_bytes >= 1, "-b must be at least 1 (a sweep from 0 never grows)");
  zero::require(o.min_bytes <= o.max_bytes, "-b must not exceed -e");
  zero::require(o.factor >= 1, "-f must be at least 1");
  // A sweep is a table to read, not an endless run: -f 1.000001 would make millions of sizes.
  zero::require(o.sizes().size() <= max_sizes, "-b, -e and -f make more than " +
                                                   std::to_string(max_sizes) +
                                                   " sizes; take a larger -f");
  zero::require(o.backend == "mpi" || o.backend == "raw-mpi" || o.backend == "nccl",
                "--backend must be mpi, raw-mpi or nccl, got '" + o.backend + "'");
  return o;
}

} // namespace bench
