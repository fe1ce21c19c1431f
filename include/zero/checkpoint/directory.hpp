#pragma once
// A checkpoint directory and how a save becomes visible atomically:
//
//   DIR/latest               the tag of the newest complete checkpoint (replaced last, by rename)
//   DIR/TAG/manifest.json    written by rank 0 once every state file is durable
//   DIR/TAG/states.rankR.bin one per saving rank
//   DIR/.TAG.partial/        where a save is written; renamed to DIR/TAG when complete
//
// A save killed at any moment leaves DIR/latest naming a complete checkpoint: the previous one,
// which nothing in a save touches, until the new one is complete. Saving over an existing tag
// replaces it; saving over the tag DIR/latest names first points DIR/latest at the complete new
// copy (.TAG.partial), then swaps the directories, then points DIR/latest back at TAG, and a
// reader or the next save finishes a swap that was interrupted.

#include "zero/checkpoint/files.hpp"
#include "zero/checkpoint/manifest.hpp"
#include "zero/core/error.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace zero::checkpoint {

inline void check_tag(const std::string& tag) {
  require(!tag.empty() && tag.size() <= 200 && tag.front() != '.' && tag != latest_file &&
              tag.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                    "0123456789._-") == std::string::npos,
          "checkpoint: the tag '" + tag +
              "' is not a plain name (letters, digits, '.', '_', '-'; not starting with '.'; "
              "not 'latest')");
}

inline std::filesystem::path partial_dir(const std::filesystem::path& dir, const std::string& tag) {
  return dir / ("." + tag + ".partial");
}
inline std::string state_file_name(int saving_rank) {
  return "states.rank" + std::to_string(saving_rank) + ".bin";
}

// TAG when `name` is ".TAG.partial" (where DIR/latest points while TAG is being replaced).
inline std::optional<std::string> replaced_tag(const std::string& name) {
  const std::string suffix = ".partial";
  if (name.size() > 1 + suffix.size() && name.front() == '.' && name.ends_with(suffix))
    return name.substr(1, name.size() - 1 - suffix.size());
  return std::nullopt;
}

// The tag DIR/latest names, if any.
inline std::optional<std::string> latest_tag(const std::filesystem::path& dir) {
  std::ifstream in(dir / latest_file);
  if (!in) return std::nullopt;
  std::string tag;
  std::getline(in, tag);
  return tag;
}

// The directory of a checkpoint to load: DIR/TAG, DIR/<latest> without a tag, or DIR itself when
// it is one checkpoint (holds a manifest).
inline std::filesystem::path resolve(const std::filesystem::path& dir,
                                     const std::optional<std::string>& tag) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    fail(ErrorKind::io, "checkpoint: " + dir.string() + " does not exist or is not a directory");
  if (tag) {
    check_tag(*tag);
    if (!std::filesystem::is_directory(dir / *tag, ec))
      fail(ErrorKind::io,
           "checkpoint: " + dir.string() + " has no checkpoint tagged '" + *tag + "'");
    return dir / *tag;
  }
  if (std::filesystem::exists(dir / manifest_file, ec)) return dir;
  const auto latest = latest_tag(dir);
  if (!latest)
    fail(ErrorKind::io,
         "checkpoint: " + dir.string() +
             " is not a checkpoint directory (it has neither a 'latest' file nor a " +
             manifest_file + ")");
  if (!std::filesystem::is_directory(dir / *latest, ec))
    fail(ErrorKind::io, "checkpoint: " + (dir / latest_file).string() + " names '" + *latest +
                            "', which is not in " + dir.string());
  return dir / *latest;
}

// Rank 0, before anything is written: DIR exists, TAG may be written, DIR/.TAG.partial is new.
inline void finish_replacement(const std::filesystem::path& dir, const std::string& tag);

inline void prepare(const std::filesystem::path& dir, const std::string& tag) {
  check_tag(tag);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(ErrorKind::io, "checkpoint: cannot create " + dir.string() + ": " + ec.message());
  // DIR/latest points into a replacement that was interrupted: finish it first.
  if (const auto latest = latest_tag(dir))
    if (const auto replaced = replaced_tag(*latest)) finish_replacement(dir, *replaced);
  const auto partial = partial_dir(dir, tag);
  std::filesystem::remove_all(partial, ec); // a save of this tag that was killed
  if (ec)
    fail(ErrorKind::io, "checkpoint: cannot remove " + partial.string() + ": " + ec.message());
  if (!std::filesystem::create_directory(partial, ec))
    fail(ErrorKind::io, "checkpoint: cannot create " + partial.string() + ": " +
                            (ec ? ec.message() : std::string("it exists")));
}

// Test hooks. ZERO_CHECKPOINT_CRASH=point[:rank] kills this process (SIGKILL, as a node failure
// would) when a save reaches `point` on that rank (every rank without ":rank"); points, in order:
// states-written, manifest-written, latest-moved (only when the latest tag is saved over), renamed.
// ZERO_CHECKPOINT_FAIL=writer[:rank] makes that rank's state-file writer fail, as a full disk
// would.
namespace detail {
inline bool hook_set(const char* variable, const char* point, int rank) {
  const char* setting = std::getenv(variable);
  if (!setting) return false;
  const std::string s = setting;
  const auto colon = s.find(':');
  if (s.substr(0, colon) != point) return false;
  return colon == std::string::npos || std::stoi(s.substr(colon + 1)) == rank;
}
} // namespace detail
inline void crash_point(const char* point, int rank) {
  if (detail::hook_set("ZERO_CHECKPOINT_CRASH", point, rank)) ::kill(::getpid(), SIGKILL);
}
inline void failure_point(const char* point, int rank) {
  if (detail::hook_set("ZERO_CHECKPOINT_FAIL", point, rank))
    fail(ErrorKind::io,
         std::string("checkpoint: a failure injected at '") + point + "' (ZERO_CHECKPOINT_FAIL)");
}

inline void point_latest_at(const std::filesystem::path& dir, const std::string& name) {
  const std::string line = name + "\n";
  write_small_file(dir / latest_file, std::as_bytes(std::span<const char>(line)));
  sync_directory(dir);
}

// Rank 0, once every saving rank's state file and its description (a .json beside it) are
// durable: the manifest, the rename, and DIR/latest.
inline void commit(const std::filesystem::path& dir, const std::string& tag, Manifest manifest,
                   int saving_ranks) {
  const auto partial = partial_dir(dir, tag);
  for (int r = 0; r < saving_ranks; ++r) {
    const auto described = partial / (state_file_name(r) + ".json");
    std::ifstream in(described);
    if (!in) fail(ErrorKind::io, "checkpoint: " + described.string() + " is missing");
    nlohmann::json j;
    in >> j;
    manifest.files.push_back(state_file_from_json(j, described.string()));
  }
  const std::string text = to_json(manifest).dump(1);
  write_small_file(partial / manifest_file, std::as_bytes(std::span<const char>(text)));
  for (int r = 0; r < saving_ranks; ++r)
    std::filesystem::remove(partial / (state_file_name(r) + ".json"));
  sync_directory(partial);
  crash_point("manifest-written", 0);
  std::error_code ec;
  if (latest_tag(dir) == tag && std::filesystem::exists(dir / tag, ec)) {
    // Replacing the latest: while the directories swap, DIR/latest names the new, complete copy.
    point_latest_at(dir, partial.filename().string());
    crash_point("latest-moved", 0);
  }
  finish_replacement(dir, tag);
}

// DIR/.TAG.partial (complete) becomes DIR/TAG, and DIR/latest names it.
inline void finish_replacement(const std::filesystem::path& dir, const std::string& tag) {
  std::error_code ec;
  const auto partial = partial_dir(dir, tag);
  const auto final_dir = dir / tag;
  const auto replaced = dir / ("." + tag + ".replaced");
  if (std::filesystem::exists(partial, ec)) {
    std::filesystem::remove_all(replaced, ec);
    if (std::filesystem::exists(final_dir, ec)) std::filesystem::rename(final_dir, replaced);
    std::filesystem::rename(partial, final_dir);
    sync_directory(dir);
  }
  crash_point("renamed", 0);
  point_latest_at(dir, tag);
  std::filesystem::remove_all(replaced, ec);
}

} // namespace zero::checkpoint
