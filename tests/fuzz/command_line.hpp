#pragma once
// The fuzzer's bytes as a command line, for the targets of the tools' and examples' flag parsers:
// arguments are separated by NUL or newline, argv[0] is the program's name. A --config FILE
// (or --config=FILE) is pointed at one of the repository's real configs, chosen by the bytes
// given, so that the parsers read a config without the fuzzer naming files to open (/dev/zero
// would never end); the config reader has a target of its own.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zero_fuzz {

// Configs under the source tree (ZERO_SOURCE_DIR) that a --config value is replaced with.
inline const char* const repository_configs[] = {
    "/examples/train_mlp/ds_config.json",
    "/examples/train_gpt/ds_config.json",
    "/tests/config/seed_configs/zero_off_config.json",
    "/tests/config/seed_configs/zero_infinity_config.json",
};

inline std::string repository_config(const std::string& asked) {
  std::size_t pick = asked.size();
  for (const char c : asked)
    pick += static_cast<unsigned char>(c);
  constexpr std::size_t count = sizeof repository_configs / sizeof repository_configs[0];
  return std::string(ZERO_SOURCE_DIR) + repository_configs[pick % count];
}

class CommandLine {
 public:
  CommandLine(std::string program, const std::uint8_t* data, std::size_t size) {
    arguments_.push_back(std::move(program));
    std::string argument;
    for (std::size_t i = 0; i <= size; ++i) {
      if (i == size || data[i] == '\0' || data[i] == '\n') {
        if (i < size || !argument.empty()) arguments_.push_back(argument);
        argument.clear();
      } else {
        argument += static_cast<char>(data[i]);
      }
    }
    for (std::size_t i = 1; i < arguments_.size(); ++i) {
      if (arguments_[i] == "--config" && i + 1 < arguments_.size())
        arguments_[i + 1] = repository_config(arguments_[i + 1]);
      else if (arguments_[i].starts_with("--config="))
        arguments_[i] = "--config=" + repository_config(arguments_[i].substr(9));
    }
    for (std::string& a : arguments_)
      pointers_.push_back(a.data());
    pointers_.push_back(nullptr);
  }

  int argc() const { return static_cast<int>(arguments_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> arguments_;
  std::vector<char*> pointers_;
};

} // namespace zero_fuzz
