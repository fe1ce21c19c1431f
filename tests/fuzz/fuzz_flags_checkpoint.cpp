// Fuzz target: zero-checkpoint's command line (zero_checkpoint::parse_arguments). A bad command
// line must be a UsageError that says what is wrong.

#include "zero-checkpoint/arguments.hpp"

#include "command_line.hpp"
#include "fuzz_target.hpp"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  zero_fuzz::CommandLine line("zero-checkpoint", data, size);
  try {
    (void)zero_checkpoint::parse_arguments(line.argc(), line.argv());
  } catch (const zero_checkpoint::UsageError& e) {
    zero_fuzz::expected(e);
  }
  return 0;
}
