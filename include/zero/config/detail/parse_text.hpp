#pragma once
// Turns config text into a JSON document: // and /* */ comments allowed (DeepSpeed reads configs
// with hjson), a syntax error reported with line and column, a key given twice in one object
// refused, as DeepSpeed refuses it, and so are a number too large for a double and nesting deeper
// than any config (copying and printing a document recurse once per level).

#include "zero/core/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zero::config::detail {

// A parser callback that tracks the path of the value being read, to name a duplicate key, and
// refuses objects and arrays nested deeper than max_depth.
class StructureCheck {
 public:
  // DeepSpeed's configs nest four levels at most (zero_optimization.offload_param.device).
  static constexpr std::size_t max_depth = 64;

  explicit StructureCheck(std::string source) : source_(std::move(source)) {}

  bool operator()(int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
    case Event::object_start:
    case Event::array_start:
      if (frames_.size() == max_depth)
        fail(ErrorKind::invalid_argument, source_ + ": objects and arrays nested deeper than " +
                                              std::to_string(max_depth) + " levels");
      frames_.push_back({event == Event::object_start});
      break;
    case Event::key: {
      std::string key = parsed.get<std::string>();
      if (!frames_.back().keys.insert(key).second)
        fail(ErrorKind::invalid_argument,
             source_ + ": " + path_to(key) + ": key given twice in the same object");
      frames_.back().key = std::move(key);
      break;
    }
    case Event::object_end:
    case Event::array_end:
      frames_.pop_back();
      element_done();
      break;
    case Event::value:
      element_done();
      break;
    }
    return true;
  }

 private:
  struct Frame {
    bool is_object;
    std::set<std::string> keys{};
    std::string key{};     // the key being read, in an object
    std::size_t index = 0; // the element being read, in an array
  };

  void element_done() {
    if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().index;
  }

  std::string path_to(const std::string& key) const {
    std::string path;
    for (std::size_t i = 0; i + 1 < frames_.size(); ++i) {
      if (frames_[i].is_object)
        path += (path.empty() ? "" : ".") + frames_[i].key;
      else
        path += "[" + std::to_string(frames_[i].index) + "]";
    }
    return path.empty() ? key : path + "." + key;
  }

  std::string source_;
  std::vector<Frame> frames_;
};

// 1-based line and column of the character at 1-based `offset` (nlohmann's parse_error::byte).
struct TextPosition {
  std::size_t line;
  std::size_t column;
};

inline TextPosition position_of(std::string_view text, std::size_t offset) {
  const std::size_t end = std::min(offset == 0 ? 0 : offset - 1, text.size());
  const std::string_view before = text.substr(0, end);
  const std::size_t line =
      1 + static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n'));
  const std::size_t last_newline = before.rfind('\n');
  const std::size_t column = last_newline == std::string_view::npos ? end + 1 : end - last_newline;
  return {line, column};
}

inline nlohmann::json parse_config_text(std::string_view text, const std::string& source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end(), StructureCheck(source),
                                 /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond a double's range, "1e999"; nlohmann gives no position for it.
    std::string reason = e.what();
    if (const std::size_t end = reason.find("] "); end != std::string::npos)
      reason = reason.substr(end + 2);
    fail(ErrorKind::invalid_argument, source + ": " + reason + " (beyond the range of a double)");
  } catch (const nlohmann::json::parse_error& e) {
    // Keep nlohmann's description, drop its prefix: "[json.exception...] ... column N: ".
    std::string reason = e.what();
    if (const std::size_t column = reason.find("column "); column != std::string::npos)
      if (const std::size_t colon = reason.find(": ", column); colon != std::string::npos)
        reason = reason.substr(colon + 2);
    const TextPosition at = position_of(text, e.byte);
    fail(ErrorKind::invalid_argument, source + ":" + std::to_string(at.line) + ":" +
                                          std::to_string(at.column) +
                                          ": malformed JSON: " + reason);
  }
}

} // namespace zero::config::detail
