#pragma once
// The safetensors format (Hugging Face's safetensors package): an 8-byte little-endian header
// length, a JSON header of name -> dtype, shape and byte offsets, then the data, 8-byte aligned.
// Python's safetensors.torch.load_file turns such a file into a state_dict.
//   safetensors_preamble: the length and header of float32 tensors laid end to end, for a writer
//     that streams the data itself (zero-checkpoint consolidate);
//   write_safetensors: tensors in memory, written whole or not at all
//     (DirectoryHandle::write_file_atomically: a reader never sees half a file, and a name planted
//     in a shared folder is never written through).

#include "zero/core/directory_handle.hpp"
#include "zero/core/error.hpp"
#include "zero/core/view.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace zero {

struct SafetensorsEntry {
  std::string name;
  std::vector<std::size_t> shape; // its elements are the product (one dimension: {numel})
};

inline std::size_t element_count(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (const std::size_t d : shape)
    n *= d;
  return n;
}

// The bytes before the data: the header's length and the header itself, padded so that the data
// starts 8-byte aligned. Names must be unique (the file says where `file` is, for the error).
inline std::string safetensors_preamble(const std::vector<SafetensorsEntry>& entries,
                                        const std::map<std::string, std::string>& metadata,
                                        const std::filesystem::path& file) {
  nlohmann::ordered_json header;
  nlohmann::ordered_json meta = {{"format", "pt"}};
  for (const auto& [key, value] : metadata)
    meta[key] = value;
  header["__metadata__"] = meta;
  std::set<std::string> names;
  std::size_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    if (e.name == "__metadata__")
      fail(ErrorKind::invalid_argument,
           "safetensors: a tensor cannot be named '__metadata__' (the header's own key) in " +
               file.string());
    if (!names.insert(e.name).second)
      fail(ErrorKind::invalid_argument,
           "safetensors: two tensors are named '" + e.name + "' in " + file.string());
    const std::size_t bytes = element_count(e.shape) * sizeof(float);
    header[e.name] = {
        {"dtype", "F32"}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string preamble(8, '\0');
  for (std::size_t i = 0; i < 8; ++i)
    preamble[i] = static_cast<char>(std::uint64_t(text.size()) >> (8 * i)); // little-endian
  return preamble + text;
}

struct NamedTensor {
  std::string name;
  std::vector<std::size_t> shape;
  View<const float> values; // element_count(shape) of them
};

inline void write_safetensors(const std::filesystem::path& file,
                              const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  std::vector<SafetensorsEntry> entries;
  for (const NamedTensor& t : tensors) {
    require(element_count(t.shape) == t.values.size(), "write_safetensors: '" + t.name + "' has " +
                                                           std::to_string(t.values.size()) +
                                                           " values, not the product of its shape");
    entries.push_back({t.name, t.shape});
  }
  const std::string preamble = safetensors_preamble(entries, metadata, file);
  std::vector<std::span<const std::byte>> pieces = {std::as_bytes(std::span(preamble))};
  for (const NamedTensor& t : tensors)
    pieces.push_back(std::as_bytes(std::span(t.values.data(), t.values.size())));
  const std::filesystem::path folder = file.has_parent_path() ? file.parent_path() : ".";
  DirectoryHandle::open_named(folder, "the folder of " + file.string())
      .write_file_atomically(file.filename().string(), pieces);
}

} // namespace zero
