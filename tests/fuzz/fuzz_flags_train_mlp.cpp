// Fuzz target: train_mlp's command line (train::parse), a --config included (pointed at a real
// config, command_line.hpp). A bad command line must be a zero::Error that names the flag.

#include "train_mlp/flags.hpp"

#include "command_line.hpp"
#include "fuzz_target.hpp"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  zero_fuzz::CommandLine line("train_mlp", data, size);
  try {
    (void)train::parse(line.argc(), line.argv());
  } catch (const zero::Error& e) {
    zero_fuzz::expected(e);
  }
  return 0;
}
