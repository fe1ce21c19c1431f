// Fuzz target: train_gpt's command line (train_gpt::parse) and the activation checkpointing it
// asks for (train_gpt::checkpointing), a --config included (pointed at a real config,
// command_line.hpp). A bad command line must be a zero::Error that names the flag.

#include "train_gpt/flags.hpp"

#include "command_line.hpp"
#include "fuzz_target.hpp"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  zero_fuzz::CommandLine line("train_gpt", data, size);
  try {
    const train_gpt::Flags flags = train_gpt::parse(line.argc(), line.argv());
    if (flags.steps >= 0) (void)train_gpt::checkpointing(flags);
  } catch (const zero::Error& e) {
    zero_fuzz::expected(e);
  }
  return 0;
}
