#pragma once
// How zero's tools and examples read their command lines with CLI11: CLI11 places the arguments
// and writes --help; a command line it refuses becomes the program's own usage error, in the
// program's own words where it had them before CLI11 ("--steps needs a value", "--json takes no
// value"), in CLI11's elsewhere. What the values mean stays with each program, which converts and
// checks them after parse.

#include <CLI/CLI.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace command_line {

// How a program words the two messages it always wrote itself: "option '--dp' needs a value" is
// {.before_flag = "option '", .after_flag = "'"}; "--seq needs a value (see --help)" is
// {.after_message = " (see --help)"}.
struct Wording {
  std::string_view before_flag = "";
  std::string_view after_flag = "";
  std::string_view after_message = "";
};

// CLI11's message, reworded where it says that a flag lacks its value or that a flag which takes
// none was given one; any other stays CLI11's.
inline std::string message(const CLI::ParseError& e, const Wording& wording = {}) {
  const std::string text = e.what();
  const auto say = [&](const std::string& flag, std::string_view complaint) {
    return std::string(wording.before_flag) + flag + std::string(wording.after_flag) +
           std::string(complaint) + std::string(wording.after_message);
  };
  const std::string override_ = " was given a disallowed flag override"; // NAME without dashes
  if (const std::size_t colon = text.find(": ");
      colon != std::string::npos && text.ends_with(" missing"))
    return say(text.substr(0, colon), " needs a value"); // "--seq: 1 required N missing"
  if (text.ends_with(override_)) {
    const std::string name = text.substr(0, text.size() - override_.size());
    return say((name.size() == 1 ? "-" : "--") + name, " takes no value");
  }
  return text;
}

// Parses argv into `app` and returns whether --help was given. CLI11 answers --help only after it
// has placed every argument, so the program still checks the rest: --help beside a bad flag stays
// an error. A command line that CLI11 refuses throws Refusal(leading..., message(e, wording)), the
// program's usage error.
template <class Refusal, class... Leading>
bool parse(CLI::App& app, int argc, char** argv, const Wording& wording,
           const Leading&... leading) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return true;
  } catch (const CLI::CallForAllHelp&) {
    return true;
  } catch (const CLI::ParseError& e) {
    throw Refusal(leading..., message(e, wording));
  }
  return false;
}

} // namespace command_line
