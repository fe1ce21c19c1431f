#pragma once
// Command line of zero-checkpoint: a command, a directory and a few flags. A bad command line is
// a UsageError that says what is wrong; main prints it with the usage and exits with status 2.

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace zero_checkpoint {

constexpr const char* usage =
    "usage: zero-checkpoint inspect DIR [--tag TAG] [--no-verify]\n"
    "       zero-checkpoint consolidate DIR [--tag TAG] --to OUT.safetensors|OUTDIR "
    "[--moments]\n";

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Arguments {
  std::string command;
  std::filesystem::path dir;
  std::optional<std::string> tag;
  std::filesystem::path to;
  bool moments = false;
  bool verify = true;
  bool help = false;
};

inline Arguments parse_arguments(int argc, char** argv) {
  Arguments a;
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--tag")
      a.tag = value();
    else if (arg == "--to")
      a.to = value();
    else if (arg == "--moments")
      a.moments = true;
    else if (arg == "--no-verify")
      a.verify = false;
    else if (arg == "-h" || arg == "--help")
      a.help = true;
    else if (arg.starts_with("--"))
      throw UsageError("unknown option " + arg);
    else
      rest.push_back(arg);
  }
  if (a.help) return a;
  if (rest.size() != 2) throw UsageError("expected a command and a directory");
  a.command = rest[0];
  a.dir = rest[1];
  if (a.command != "inspect" && a.command != "consolidate")
    throw UsageError("unknown command " + a.command);
  if (a.command == "consolidate" && a.to.empty()) throw UsageError("consolidate needs --to");
  return a;
}

} // namespace zero_checkpoint
