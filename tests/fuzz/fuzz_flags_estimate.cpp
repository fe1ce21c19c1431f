// Fuzz target: zero-estimate's command line (zero_estimate::parse_arguments). A bad command line
// must be a UsageError that names the flag.

#include "zero-estimate/arguments.hpp"

#include "command_line.hpp"
#include "fuzz_target.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  zero_fuzz::CommandLine line("zero-estimate", data, size);
  try {
    const zero_estimate::Arguments args = zero_estimate::parse_arguments(line.argc(), line.argv());
    zero_fuzz::promise(!args.parameters ||
                           (std::isfinite(*args.parameters) && *args.parameters > 0),
                       "a finite, positive parameter count");
    zero_fuzz::promise(!args.device_memory ||
                           (std::isfinite(*args.device_memory) && *args.device_memory > 0),
                       "a finite, positive device memory");
  } catch (const zero_estimate::UsageError& e) {
    zero_fuzz::expected(e);
  }
  return 0;
}
