#pragma once
// write_safetensors: float tensors by name into one safetensors file (the format of Hugging Face's
// safetensors package: an 8-byte little-endian header length, a JSON header of name -> dtype,
// shape and byte offsets, then the data), which Python's safetensors.torch.load_file turns into a
// state_dict. Written whole or not at all (DirectoryHandle::write_file_atomically): a reader never
// sees half a file, and a name planted in a shared folder is never written through.

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

struct NamedTensor {
  std::string name;
  std::vector<std::size_t> shape; // its elements are the product (one dimension: {numel})
  View<const float> values;
};

inline void write_safetensors(const std::filesystem::path& file,
                              const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json header;
  nlohmann::ordered_json meta = {{"format", "pt"}};
  for (const auto& [key, value] : metadata)
    meta[key] = value;
  header["__metadata__"] = meta;
  std::set<std::string> names;
  std::size_t offset = 0;
  for (const NamedTensor& t : tensors) {
    require(t.name != "__metadata__" && names.insert(t.name).second,
            "write_safetensors: two tensors are named '" + t.name + "' in " + file.string());
    std::size_t numel = 1;
    for (const std::size_t d : t.shape)
      numel *= d;
    require(numel == t.values.size(), "write_safetensors: '" + t.name + "' has " +
                                          std::to_string(t.values.size()) +
                                          " values, not the product of its shape");
    const std::size_t bytes = numel * sizeof(float);
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // the data starts 8-byte aligned
  std::byte length[8];
  for (std::size_t i = 0; i < 8; ++i)
    length[i] = static_cast<std::byte>(std::uint64_t(text.size()) >> (8 * i)); // little-endian
  std::vector<std::span<const std::byte>> pieces = {std::as_bytes(std::span(length)),
                                                    std::as_bytes(std::span(text))};
  for (const NamedTensor& t : tensors)
    pieces.push_back(std::as_bytes(std::span(t.values.data(), t.values.size())));
  const std::filesystem::path folder = file.has_parent_path() ? file.parent_path() : ".";
  DirectoryHandle::open_named(folder, "the folder of " + file.string())
      .write_file_atomically(file.filename().string(), pieces);
}

} // namespace zero
