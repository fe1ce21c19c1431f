#pragma once
// How the examples write their outputs (.npy weights, --json): whole under a fresh temporary name
// (created with O_EXCL, never through a link), flushed to the disk, then renamed within the folder
// opened once (zero/core/directory_handle.hpp). A full disk or an I/O error leaves no partial file
// under the final name, and the error names the path and the system's reason; a name planted in a
// shared folder such as /tmp is replaced, never written through.

#include <zero/core/directory_handle.hpp>

#include <cstddef>
#include <filesystem>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace examples {

// Writes the pieces one after the other into `path`.
inline void write_file_atomically(const std::string& path,
                                  std::initializer_list<std::span<const char>> pieces) {
  const std::filesystem::path file(path);
  const std::filesystem::path parent = file.parent_path();
  const zero::DirectoryHandle folder = zero::DirectoryHandle::open_named(
      parent.empty() ? std::filesystem::path(".") : parent, "the folder of " + path);
  std::vector<std::span<const std::byte>> bytes;
  for (std::span<const char> piece : pieces)
    bytes.push_back(std::as_bytes(piece));
  folder.write_file_atomically(file.filename().string(), bytes);
}

} // namespace examples
