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
// copy (.TAG.partial), then swaps the directories, then points DIR/latest back at TAG; a reader
// follows a swap that was interrupted, and the next save finishes it.
//
// A save that fails (a full disk, an I/O error) fails on every rank, and rank 0 removes what it
// wrote (abandon()): DIR holds what it held before. Publishing writes everything that takes space
// (the manifest, and DIR/latest's next contents as DIR/.latest.next) before it renames anything,
// so that a full disk stops a save before any of it is visible.

#include "zero/checkpoint/files.hpp"
#include "zero/checkpoint/manifest.hpp"
#include "zero/core/error.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace zero::checkpoint {

inline constexpr std::size_t max_tag_size = 200;

inline bool is_plain_tag(const std::string& tag) {
  return !tag.empty() && tag.size() <= max_tag_size && tag.front() != '.' && tag != latest_file &&
         tag.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789._-") == std::string::npos;
}

inline void check_tag(const std::string& tag) {
  require(is_plain_tag(tag),
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

// The tag DIR/latest names, if any: TAG, or .TAG.partial while a save swaps TAG's directories.
// DIR/latest is outside data: anything else in it (a path, "..") is an error, never followed.
inline std::optional<std::string> latest_tag(const std::filesystem::path& dir) {
  std::ifstream in(dir / latest_file);
  if (!in) return std::nullopt;
  std::string text(max_tag_size + 16, '\0'); // a line longer than any tag is not one
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  std::string tag = text.substr(0, text.find('\n'));
  const auto replaced = replaced_tag(tag);
  if (!is_plain_tag(tag) && !(replaced && is_plain_tag(*replaced)))
    fail(ErrorKind::io, "checkpoint: " + (dir / latest_file).string() + " names '" + tag +
                            "', which is not a checkpoint's tag");
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
  if (std::filesystem::is_directory(dir / *latest, ec)) return dir / *latest;
  // A swap interrupted after .TAG.partial became TAG, before DIR/latest was pointed back at TAG.
  if (const auto replaced = replaced_tag(*latest))
    if (std::filesystem::is_directory(dir / *replaced, ec)) return dir / *replaced;
  fail(ErrorKind::io, "checkpoint: " + (dir / latest_file).string() + " names '" + *latest +
                          "', which is not in " + dir.string());
}

// Where DIR/latest's next contents wait to be renamed into place: the tag once the save is
// complete, and (when the latest tag is saved over) .TAG.partial while the directories swap.
inline constexpr const char* next_latest_file = ".latest.next";
inline constexpr const char* swap_latest_file = ".latest.swap";

inline void finish_replacement(const std::filesystem::path& dir, const std::string& tag,
                               const std::filesystem::path& staged_latest = {});

// What killed or failed saves left in DIR: .TAG.partial directories (except the one DIR/latest
// names), .TAG.replaced ones, the staged DIR/latest and the temporaries of small files.
inline void remove_leftovers(const std::filesystem::path& dir) {
  const auto latest = latest_tag(dir);
  std::vector<std::filesystem::path> leftovers;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool partial = replaced_tag(name) && name != latest;
    const bool replaced = name.front() == '.' && name.ends_with(".replaced");
    const bool staged = name.starts_with(".latest.") || name == std::string(latest_file) + ".tmp";
    if (partial || replaced || staged) leftovers.push_back(it->path());
  }
  for (const auto& path : leftovers) {
    std::filesystem::remove_all(path, ec);
    if (ec) fail(ErrorKind::io, "checkpoint: cannot remove " + path.string() + ": " + ec.message());
  }
}

// Rank 0, after a save of TAG failed on some rank (once every rank's writer has stopped): removes
// what the save wrote, so that a failure, a full disk say, leaves DIR as it was. Keeps a
// .TAG.partial that DIR/latest names (complete, in the middle of a swap). Never throws: the
// save's own error is the one to report.
inline void abandon(const std::filesystem::path& dir, const std::string& tag) noexcept {
  try {
    check_tag(tag);
    const auto partial = partial_dir(dir, tag);
    std::error_code ignored;
    if (latest_tag(dir) != partial.filename().string())
      std::filesystem::remove_all(partial, ignored);
    for (const char* staged : {next_latest_file, swap_latest_file})
      for (const char* suffix : {"", ".tmp"})
        std::filesystem::remove(dir / (std::string(staged) + suffix), ignored);
  } catch (...) { // a bad tag: nothing was written
  }
}

// Rank 0, before anything is written: DIR exists, TAG may be written, DIR/.TAG.partial is new.
inline void prepare(const std::filesystem::path& dir, const std::string& tag) {
  check_tag(tag);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(ErrorKind::io, "checkpoint: cannot create " + dir.string() + ": " + ec.message());
  // DIR/latest points into a replacement that was interrupted: finish it first.
  if (const auto latest = latest_tag(dir))
    if (const auto replaced = replaced_tag(*latest)) finish_replacement(dir, *replaced);
  remove_leftovers(dir); // of saves that were killed: they may hold much of the disk
  const auto partial = partial_dir(dir, tag);
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

// DIR/latest's next contents, written (durable) as DIR/`slot` for move_latest to rename.
inline std::filesystem::path stage_latest(const std::filesystem::path& dir, const std::string& name,
                                          const char* slot) {
  const std::string line = name + "\n";
  write_small_file(dir / slot, std::as_bytes(std::span<const char>(line)));
  return dir / slot;
}
inline void move_latest(const std::filesystem::path& dir, const std::filesystem::path& staged) {
  if (::rename(staged.c_str(), (dir / latest_file).c_str()) != 0)
    fail_io("cannot rename " + staged.string() + " to", dir / latest_file);
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
  const bool replacing = latest_tag(dir) == tag && std::filesystem::exists(dir / tag, ec);
  // The last writes: from here on, publishing only renames (no space needed).
  const auto next = stage_latest(dir, tag, next_latest_file);
  const auto during_swap = replacing
                               ? stage_latest(dir, partial.filename().string(), swap_latest_file)
                               : std::filesystem::path();
  if (replacing) {
    // Replacing the latest: while the directories swap, DIR/latest names the new, complete copy.
    move_latest(dir, during_swap);
    crash_point("latest-moved", 0);
  }
  finish_replacement(dir, tag, next);
}

// DIR/.TAG.partial (complete) becomes DIR/TAG, and DIR/latest names it: `staged_latest` renamed
// into place, or (without one) written now.
inline void finish_replacement(const std::filesystem::path& dir, const std::string& tag,
                               const std::filesystem::path& staged_latest) {
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
  if (staged_latest.empty())
    point_latest_at(dir, tag);
  else
    move_latest(dir, staged_latest);
  std::filesystem::remove_all(replaced, ec);
}

} // namespace zero::checkpoint
