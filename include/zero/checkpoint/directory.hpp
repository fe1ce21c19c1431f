#pragma once
// A checkpoint directory and how a save becomes visible atomically:
//
//   DIR/latest               the tag of the newest complete checkpoint (replaced last, by rename)
//   DIR/TAG/manifest.json    written by rank 0 once every state file is durable
//   DIR/TAG/states.rankR.bin one per saving rank
//   DIR/.TAG.partial/        where a save is written; renamed to DIR/TAG when complete
//
// Under tensor parallelism DIR/TAG holds tensor_parallel.json and one sub-directory per tensor
// rank (tensor_rank_01_of_03, ...), each the manifest and state files of that tensor rank's
// data-parallel group, written as above; the whole is published by the one rename.
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
//
// DIR may be on a shared disk: a save writes and deletes only through descriptors of DIR and of
// DIR/.TAG.partial, both required to be private (owned by the user, writable by no one else;
// core/directory_handle.hpp), and creates files with O_EXCL without following links.

#include "zero/checkpoint/files.hpp"
#include "zero/checkpoint/manifest.hpp"
#include "zero/core/error.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>
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
  const auto path = dir / latest_file;
  // Never through a link: its target's first line would show in the error below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return std::nullopt;
  if (fd < 0)
    fail(ErrorKind::io, "checkpoint: cannot read " + path.string() + ": " +
                            (errno == ELOOP ? std::string("it is a symbolic link, which zero does "
                                                          "not follow there")
                                            : ::zero::detail::system_text(errno)));
  std::string text(max_tag_size + 16, '\0'); // a line longer than any tag is not one
  const FileHandle file(fd, path);
  text.resize(file.read_some(text.data(), text.size(), 0));
  std::string tag = text.substr(0, text.find('\n'));
  const auto replaced = replaced_tag(tag);
  if (!is_plain_tag(tag) && !(replaced && is_plain_tag(*replaced)))
    fail(ErrorKind::io,
         "checkpoint: " + path.string() + " names '" + tag + "', which is not a checkpoint's tag");
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
  if (std::filesystem::exists(dir / manifest_file, ec) ||
      std::filesystem::exists(dir / tensor_parallel_file, ec))
    return dir;
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

inline void finish_replacement(const DirectoryHandle& dir, const std::string& tag,
                               const std::string& staged_latest = {});

inline constexpr const char* private_advice =
    "Save into a directory only you can write: one you create, or `chmod go-w` one of yours";

// DIR for a save, created (0755: others may read checkpoints) where missing, and private.
inline DirectoryHandle open_for_saving(const std::filesystem::path& dir, bool create) {
  DirectoryHandle handle =
      DirectoryHandle::open_named(dir, "checkpoint directory", create ? 0755 : -1);
  handle.require_private("checkpoint directory", private_advice);
  return handle;
}

// DIR/.TAG.partial of a save rank 0 prepared, where every saving rank writes its state file.
inline DirectoryHandle open_partial(const DirectoryHandle& dir, const std::string& tag) {
  return dir.open_private_existing(partial_dir(dir.path(), tag).filename().string(),
                                   "checkpoint directory", private_advice);
}

// What killed or failed saves left in DIR: .TAG.partial directories (except the one DIR/latest
// names), .TAG.replaced ones, the staged DIR/latest and the temporaries of small files.
inline void remove_leftovers(const DirectoryHandle& dir) {
  const auto latest = latest_tag(dir.path());
  for (const std::string& name : dir.entries()) {
    const bool partial = replaced_tag(name) && name != latest;
    const bool replaced = name.front() == '.' && name.ends_with(".replaced");
    const bool staged = name.starts_with(".latest.") || name == std::string(latest_file) + ".tmp";
    if (partial || replaced || staged) dir.remove_tree(name);
  }
}

// Rank 0, after a save of TAG failed on some rank (once every rank's writer has stopped): removes
// what the save wrote, so that a failure, a full disk say, leaves DIR as it was. Keeps a
// .TAG.partial that DIR/latest names (complete, in the middle of a swap). Never throws: the
// save's own error is the one to report.
inline void abandon(const DirectoryHandle& dir, const std::string& tag) noexcept {
  try {
    check_tag(tag);
    const std::string partial = partial_dir(dir.path(), tag).filename().string();
    if (latest_tag(dir.path()) != partial) dir.remove_tree(partial);
    for (const char* staged : {next_latest_file, swap_latest_file})
      dir.remove_file(staged);
  } catch (...) { // a bad tag: nothing was written; or it cannot be removed: the next save will
  }
}

// Rank 0, before anything is written: DIR may be written, TAG is a tag, DIR/.TAG.partial is new.
inline void prepare(const DirectoryHandle& dir, const std::string& tag) {
  check_tag(tag);
  // DIR/latest points into a replacement that was interrupted: finish it first.
  if (const auto latest = latest_tag(dir.path()))
    if (const auto replaced = replaced_tag(*latest)) finish_replacement(dir, *replaced);
  remove_leftovers(dir); // of saves that were killed: they may hold much of the disk
  const std::string partial = partial_dir(dir.path(), tag).filename().string();
  if (::mkdirat(dir.fd(), partial.c_str(), 0755) != 0)
    fail_io(errno == EEXIST ? "cannot create (it exists)" : "cannot create", dir / partial);
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

inline void point_latest_at(const DirectoryHandle& dir, const std::string& name) {
  const std::string line = name + "\n";
  write_small_file(dir, latest_file, std::as_bytes(std::span<const char>(line)));
  dir.sync();
}

// DIR/latest's next contents, written (durable) as DIR/`slot` for move_latest to rename.
inline std::string stage_latest(const DirectoryHandle& dir, const std::string& name,
                                const char* slot) {
  const std::string line = name + "\n";
  write_small_file(dir, slot, std::as_bytes(std::span<const char>(line)));
  return slot;
}
inline void move_latest(const DirectoryHandle& dir, const std::string& staged) {
  dir.rename(staged, latest_file);
  dir.sync();
}

// Rank 0 of a save under tensor parallelism, once DIR/.TAG.partial exists: the tensor ranks'
// sub-directories and the file that says how many.
inline void prepare_tensor_ranks(const DirectoryHandle& partial, int tensor_parallel_size) {
  for (int t = 0; t < tensor_parallel_size; ++t)
    partial.open_private(tensor_rank_directory(t, tensor_parallel_size), 0755,
                         "checkpoint directory", private_advice);
  const std::string text = tensor_parallel_text(tensor_parallel_size);
  write_small_file(partial, tensor_parallel_file, std::as_bytes(std::span<const char>(text)));
  partial.sync();
}

// Once every saving rank's state file and its description (a .json beside it) are durable in
// `partial` (DIR/.TAG.partial, or a tensor rank's sub-directory of it): the manifest listing them.
inline void write_manifest(const DirectoryHandle& partial, Manifest manifest, int saving_ranks) {
  for (int r = 0; r < saving_ranks; ++r) {
    const auto described = partial / (state_file_name(r) + ".json");
    std::ifstream in(described);
    if (!in) fail(ErrorKind::io, "checkpoint: " + described.string() + " is missing");
    nlohmann::json j;
    in >> j;
    manifest.files.push_back(state_file_from_json(j, described.string()));
  }
  manifest.version = version_for(manifest.files);
  const std::string text = to_json(manifest).dump(1);
  write_small_file(partial, manifest_file, std::as_bytes(std::span<const char>(text)));
  for (int r = 0; r < saving_ranks; ++r)
    partial.remove_file(state_file_name(r) + ".json");
  partial.sync();
}

// Rank 0, once DIR/.TAG.partial is complete (its manifests durable): the rename, and DIR/latest.
inline void publish(const DirectoryHandle& dir, const std::string& tag) {
  const DirectoryHandle partial = open_partial(dir, tag);
  crash_point("manifest-written", 0);
  const bool replacing = latest_tag(dir.path()) == tag && dir.contains(tag);
  // The last writes: from here on, publishing only renames (no space needed).
  const auto next = stage_latest(dir, tag, next_latest_file);
  const auto during_swap =
      replacing ? stage_latest(dir, partial.path().filename().string(), swap_latest_file)
                : std::string();
  if (replacing) {
    // Replacing the latest: while the directories swap, DIR/latest names the new, complete copy.
    move_latest(dir, during_swap);
    crash_point("latest-moved", 0);
  }
  finish_replacement(dir, tag, next);
}

// Rank 0 of a save without tensor parallelism: the manifest, the rename, and DIR/latest.
inline void commit(const DirectoryHandle& dir, const std::string& tag, Manifest manifest,
                   int saving_ranks) {
  write_manifest(open_partial(dir, tag), std::move(manifest), saving_ranks);
  publish(dir, tag);
}

// DIR/.TAG.partial (complete) becomes DIR/TAG, and DIR/latest names it: `staged_latest` renamed
// into place, or (without one) written now.
inline void finish_replacement(const DirectoryHandle& dir, const std::string& tag,
                               const std::string& staged_latest) {
  const std::string partial = partial_dir(dir.path(), tag).filename().string();
  const std::string replaced = "." + tag + ".replaced";
  if (dir.contains(partial)) {
    dir.remove_tree(replaced);
    if (dir.contains(tag)) dir.rename(tag, replaced);
    dir.rename(partial, tag);
    dir.sync();
  }
  crash_point("renamed", 0);
  if (staged_latest.empty())
    point_latest_at(dir, tag);
  else
    move_latest(dir, staged_latest);
  try {
    dir.remove_tree(replaced);
  } catch (const Error&) { // published already; the next save removes it (remove_leftovers)
  }
}

} // namespace zero::checkpoint
