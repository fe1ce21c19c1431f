#pragma once
// Helpers for the config tests: parse text while capturing warnings, and expect an error whose
// text contains given pieces.

#include "zero/config/json.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace zero::testing {

struct Parsed {
  config::Config config;
  std::vector<std::string> warnings;
};

inline Parsed parse(std::string_view text,
                    config::UnbuiltFeatures unbuilt = config::UnbuiltFeatures::reject) {
  Parsed parsed;
  config::ParseOptions options{
      .unbuilt = unbuilt,
      .warn = [&](std::string_view message) { parsed.warnings.emplace_back(message); },
      .source = "ds_config.json"};
  parsed.config = config::from_json_string(text, options);
  return parsed;
}

// Parses `text` and expects Error(kind) whose message contains every piece.
inline void expect_error(std::string_view text, ErrorKind kind,
                         const std::vector<std::string>& pieces) {
  try {
    parse(text);
    ADD_FAILURE() << "no error for: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string& piece : pieces)
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos)
          << "missing '" << piece << "' in: " << e.what();
  }
}

inline void expect_invalid(std::string_view text, const std::vector<std::string>& pieces) {
  expect_error(text, ErrorKind::invalid_argument, pieces);
}

} // namespace zero::testing
