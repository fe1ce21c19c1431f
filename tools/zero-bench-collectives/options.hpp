#pragma once
// Command line of zero-bench-collectives, with nccl-tests' flag names, read by CLI11 (which writes
// --help). A bad one is a zero::Error(invalid_argument) that names the flag: main exits with 2.

#include <zero/comm/collective.hpp>
#include <zero/comm/reduce_op.hpp>
#include <zero/core/dtype.hpp>
#include <zero/core/error.hpp>

#include <command_line/parse.hpp>

#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace bench {

inline constexpr std::size_t max_sizes = 1000; // rows of one sweep

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

namespace detail {

// What CLI11 reads, as text: parse_options converts and checks each value after it, with the
// functions above.
struct Text {
  std::string min_bytes, max_bytes, factor, iterations, warmup, check, ops, dtype, redop, root;
};

// The command line, bound to `text` and `o` (the flags and the texts it keeps). parse_options
// reads it; help_text prints it.
inline void describe(CLI::App& app, Text& text, Options& o) {
  app.description("Bus bandwidth of zero's collectives, with nccl-tests' flag names.\n"
                  "usage: mpirun -np N zero-bench-collectives [options]");
  app.get_formatter()->column_width(28);
  // Unknown arguments are collected and reported by parse_options in the tool's own words. A flag
  // given twice: the last one counts. No flag takes `=true` or `=false`.
  app.allow_extras();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_help_flag("-h,--help", "this text")->disable_flag_override();
  app.add_option("-b,--minbytes", text.min_bytes, "smallest buffer (default 8; suffixes K, M, G)")
      ->type_name("SIZE");
  app.add_option("-e,--maxbytes", text.max_bytes, "largest buffer (default 32M)")
      ->type_name("SIZE");
  app.add_option("-f,--stepfactor", text.factor, "multiply the size by F between rows (default 2)")
      ->type_name("F");
  app.add_option("-n,--iters", text.iterations, "timed iterations per size (default 20)")
      ->type_name("N");
  app.add_option("-w,--warmup_iters", text.warmup, "untimed iterations first (default 5)")
      ->type_name("N");
  app.add_option("-c,--check", text.check, "verify results, counting wrong elements (default 1)")
      ->type_name("0|1");
  app.add_option("-o,--op", text.ops,
                 "all_reduce, reduce_scatter, all_gather, broadcast, reduce or all")
      ->type_name("OP");
  app.add_option("-d,--dtype", text.dtype,
                 "float, double, int32, int64, uint8, half, bfloat16 (default float)")
      ->type_name("TYPE");
  app.add_option("-r,--redop", text.redop, "sum, avg, max, min (default sum)")->type_name("OP");
  app.add_option("--root", text.root, "root of broadcast and reduce (default 0)")->type_name("R");
  app.add_option("--backend", o.backend,
                 "mpi (zero), raw-mpi (plain Open MPI) or nccl (default mpi)")
      ->type_name("B");
  app.add_flag("--blocking", o.blocking,
               "mpi backend: wait after every call instead of keeping all in flight")
      ->disable_flag_override();
  app.add_option("--json", o.json, "also write the results as JSON (rank 0)")->type_name("FILE");
}

} // namespace detail

// Throws zero::Error(invalid_argument) naming the flag when the command line is bad.
inline Options parse_options(int argc, char** argv) {
  Options o;
  detail::Text text;
  CLI::App app{"", "zero-bench-collectives"};
  detail::describe(app, text, o);
  // "-n needs a value", "--blocking takes no value", as this tool always said.
  o.help = command_line::parse<zero::Error>(app, argc, argv, {}, zero::ErrorKind::invalid_argument);
  for (const std::string& extra : app.remaining())
    zero::fail(zero::ErrorKind::invalid_argument, "unknown option '" + extra + "' (see --help)");
  // Each value given, converted; the messages name the flag by both its names.
  const auto given = [&](const char* flag) { return app.count(flag) > 0; };
  if (given("--minbytes")) o.min_bytes = parse_size(text.min_bytes);
  if (given("--maxbytes")) o.max_bytes = parse_size(text.max_bytes);
  if (given("--stepfactor")) o.factor = parse_number("-f/--stepfactor", text.factor);
  if (given("--iters")) o.iterations = parse_int("-n/--iters", text.iterations, 1);
  if (given("--warmup_iters")) o.warmup = parse_int("-w/--warmup_iters", text.warmup, 0);
  if (given("--check")) o.check = parse_int("-c/--check", text.check, 0) != 0;
  if (given("--op")) o.ops = parse_ops(text.ops);
  if (given("--dtype")) o.dtype = zero::parse_dtype(text.dtype);
  if (given("--redop")) o.redop = zero::parse_reduce_op(text.redop);
  if (given("--root")) o.root = parse_int("--root", text.root, 0);
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

// --help, as CLI11 writes it.
inline std::string help_text() {
  Options o;
  detail::Text text;
  CLI::App app{"", "zero-bench-collectives"};
  detail::describe(app, text, o);
  return app.help();
}

} // namespace bench
