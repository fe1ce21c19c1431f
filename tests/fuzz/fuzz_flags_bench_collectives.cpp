// Fuzz target: zero-bench-collectives' command line (bench::parse_options) and the buffer sizes it
// sweeps (Options::sizes). A bad command line must be a zero::Error that names the flag; no
// accepted one may make the sweep endless.

#include "zero-bench-collectives/options.hpp"

#include "command_line.hpp"
#include "fuzz_target.hpp"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  zero_fuzz::CommandLine line("zero-bench-collectives", data, size);
  try {
    const bench::Options options = bench::parse_options(line.argc(), line.argv());
    zero_fuzz::promise(options.sizes().size() <= bench::max_sizes, "a sweep of bounded length");
  } catch (const zero::Error& e) {
    zero_fuzz::expected(e);
  }
  return 0;
}
