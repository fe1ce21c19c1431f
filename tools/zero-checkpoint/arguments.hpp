#pragma once
// Command line of zero-checkpoint: a command, a directory and a few flags, read by CLI11, which
// also writes --help. A bad command line is a UsageError that says what is wrong and names the
// flag; main prints it with the usage and exits with status 2.

#include <command_line/parse.hpp>

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

namespace detail {

// What CLI11 reads, as text: the checks and conversions are parse_arguments' own, after it.
struct Text {
  std::string command, dir, tag, to;
};

// The command line, bound to `text` and `a` (the flags). parse_arguments reads it; help_text
// prints it.
inline void describe(CLI::App& app, Text& text, Arguments& a) {
  app.description("Look inside a zero checkpoint and turn it into files other tools read.\n" +
                  std::string(usage));
  app.footer("DIR is a checkpoint directory (its `latest` is used unless --tag) or one "
             "checkpoint.\nExit status: 0, 1 for a bad or corrupt checkpoint (the message names "
             "the file), 2 for bad usage.");
  // Unknown arguments are collected and reported by parse_arguments in the tool's own words.
  app.allow_extras();
  // A flag given twice: the last one counts, as it always did. The flags take no value
  // (disable_flag_override): `--moments=false` is refused, not read as "no moments".
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("command", text.command, "inspect or consolidate");
  app.add_option("dir", text.dir, "the checkpoint directory");
  app.add_option("--tag", text.tag, "the checkpoint's tag (default: the one `latest` names)");
  app.add_option("--to", text.to,
                 "consolidate into OUT.safetensors, or one .npy per tensor into OUTDIR");
  app.add_flag("--moments", a.moments, "consolidate the optimizer's moments too")
      ->disable_flag_override();
  app.add_flag_callback(
         "--no-verify", [&a] { a.verify = false; }, "inspect without verifying the checksums")
      ->disable_flag_override();
}

} // namespace detail

inline Arguments parse_arguments(int argc, char** argv) {
  Arguments a;
  detail::Text text;
  CLI::App app{"", "zero-checkpoint"};
  detail::describe(app, text, a);
  // "--tag needs a value", "--moments takes no value", as this tool always said.
  a.help = command_line::parse<UsageError>(app, argc, argv, {});
  // An argument CLI11 did not place: an unknown option, or a third word.
  for (const std::string& extra : app.remaining())
    if (extra.starts_with("-")) throw UsageError("unknown option " + extra);
  if (a.help) return a;
  if (!app.remaining().empty() || app.count("dir") == 0)
    throw UsageError("expected a command and a directory");
  a.command = text.command;
  a.dir = text.dir;
  if (app.count("--tag")) a.tag = text.tag;
  a.to = text.to;
  if (a.command != "inspect" && a.command != "consolidate")
    throw UsageError("unknown command " + a.command);
  if (a.command == "consolidate" && a.to.empty()) throw UsageError("consolidate needs --to");
  return a;
}

// --help, as CLI11 writes it.
inline std::string help_text() {
  Arguments a;
  detail::Text text;
  CLI::App app{"", "zero-checkpoint"};
  detail::describe(app, text, a);
  return app.help();
}

} // namespace zero_checkpoint
