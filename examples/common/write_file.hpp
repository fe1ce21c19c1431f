#pragma once
// How the examples write their outputs (.npy weights, --json): whole under a temporary name,
// flushed to the disk, then renamed. A full disk or an I/O error leaves no partial file under the
// final name, and the error names the path and the system's reason.

#include <zero/core/error.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

namespace examples {

// Writes the pieces one after the other into `path`.
inline void write_file_atomically(const std::string& path,
                                  std::initializer_list<std::span<const char>> pieces) {
  const std::string temporary = path + ".partial";
  auto failed = [&](const char* what, int error) {
    std::remove(temporary.c_str());
    zero::fail(zero::ErrorKind::io, path + ": " + what + " (" + std::strerror(error) + ")");
  };
  std::FILE* out = std::fopen(temporary.c_str(), "wb");
  if (!out) {
    failed("cannot write", errno);
    return;
  }
  bool written = true;
  for (std::span<const char> piece : pieces)
    written = written && std::fwrite(piece.data(), 1, piece.size(), out) == piece.size();
  written = written && std::fflush(out) == 0 && ::fsync(::fileno(out)) == 0;
  const int error = errno;
  const bool closed = std::fclose(out) == 0;
  if (!written || !closed) failed("write failed", written ? errno : error);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) failed("cannot rename into place", errno);
}

} // namespace examples
