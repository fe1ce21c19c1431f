#pragma once
// Reading and writing float32 .npy files (NumPy's format, version 1 and 2), so that runs can be
// set up and checked from Python. Only C-order little-endian float32 arrays of rank 1 or 2.

#include <zero/core/error.hpp>

#include "../common/write_file.hpp"

#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <istream>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

namespace npy {

struct Array {
  std::vector<std::size_t> shape;
  std::vector<float> data;
  std::size_t rows() const { return shape.empty() ? 0 : shape[0]; }
  std::size_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
};

inline void bad(const std::string& path, const std::string& what) {
  zero::fail(zero::ErrorKind::io, path + ": " + what);
}

// The header as an error shows it: its start, where a broken one may be long.
inline std::string shown(const std::string& header) {
  return header.size() <= 200 ? header : header.substr(0, 200) + "...";
}

// Reads an array from `in`, which must be seekable; `path` names it in errors. The header's
// lengths are checked against the bytes there before anything is allocated.
inline Array read(std::istream& in, const std::string& path) {
  const std::streamoff start = in.tellg();
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  in.seekg(start);
  if (start < 0 || end < start) bad(path, "cannot find its size (not a regular file?)");
  const auto left = [&] { return static_cast<std::uint64_t>(end - in.tellg()); };
  char magic[8] = {};
  in.read(magic, 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) bad(path, "not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(magic[6]);
  std::uint32_t header_length = 0;
  if (major == 1) {
    std::uint16_t length = 0;
    in.read(reinterpret_cast<char*>(&length), 2);
    header_length = length;
  } else if (major == 2 || major == 3) {
    in.read(reinterpret_cast<char*>(&header_length), 4);
  } else {
    bad(path, "unsupported .npy version " + std::to_string(major));
  }
  if (!in || header_length > left())
    bad(path, "truncated header: it says " + std::to_string(header_length) + " bytes");
  std::string header(header_length, '\0');
  in.read(header.data(), header_length);
  if (!in) bad(path, "truncated header");
  if (header.find("'descr': '<f4'") == std::string::npos)
    bad(path, "expected float32 ('<f4') data, header is " + shown(header));
  if (header.find("'fortran_order': False") == std::string::npos)
    bad(path, "Fortran-order arrays are not supported");
  const auto open = header.find('(');
  const auto close = header.find(')', open);
  if (open == std::string::npos || close == std::string::npos)
    bad(path, "no shape in header " + shown(header));
  Array a;
  const std::string dims = header.substr(open + 1, close - open - 1);
  std::size_t pos = 0;
  while (pos < dims.size()) {
    while (pos < dims.size() && (dims[pos] == ' ' || dims[pos] == ','))
      ++pos;
    if (pos >= dims.size()) break;
    std::size_t extent = 0;
    const auto [next, error] =
        std::from_chars(dims.data() + pos, dims.data() + dims.size(), extent);
    if (error != std::errc()) bad(path, "bad shape (" + shown(dims) + ") in the header");
    a.shape.push_back(extent);
    pos = static_cast<std::size_t>(next - dims.data());
  }
  if (a.shape.empty() || a.shape.size() > 2)
    bad(path, "expected a 1-D or 2-D array, shape (" + shown(dims) + ")");
  std::size_t count = 1;
  for (auto d : a.shape) {
    if (d != 0 && count > std::numeric_limits<std::size_t>::max() / sizeof(float) / d)
      bad(path, "shape (" + shown(dims) + ") is larger than any file");
    count *= d;
  }
  if (count * sizeof(float) > left())
    bad(path, "truncated data: expected " + std::to_string(count) + " float32 values");
  if (count * sizeof(float) < left())
    bad(path, "trailing bytes after " + std::to_string(count) + " values");
  a.data.resize(count);
  in.read(reinterpret_cast<char*>(a.data.data()),
          static_cast<std::streamsize>(count * sizeof(float)));
  if (!in) bad(path, "truncated data: expected " + std::to_string(count) + " float32 values");
  return a;
}

inline Array load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path, "cannot open");
  return read(in, path);
}

inline void save(const std::string& path, const std::vector<std::size_t>& shape,
                 const float* data) {
  std::string dims;
  std::size_t count = 1;
  for (auto d : shape) {
    dims += std::to_string(d) + ",";
    count *= d;
  }
  if (shape.size() > 1) dims.pop_back();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  const auto length = static_cast<std::uint16_t>(header.size());
  examples::write_file_atomically(
      path, {std::span<const char>("\x93NUMPY\x01\x00", 8),
             std::span<const char>(reinterpret_cast<const char*>(&length), 2),
             std::span<const char>(header.data(), header.size()),
             std::span<const char>(reinterpret_cast<const char*>(data), count * sizeof(float))});
}

} // namespace npy
