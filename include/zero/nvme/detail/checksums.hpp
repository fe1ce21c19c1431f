#pragma once
// ChecksumTable: a 32-bit checksum for every 4096-byte unit of a swap file, so that what comes
// back from the disk is what was written, never silently something else. A unit's checksum is
// recorded when it is written and checked when it is read back; a unit that was never written has
// no checksum (0), and reading it is a bug in the caller, reported as such.
//
// The checksum is XXH3 (xxHash) folded to 32 bits: about 20 GB/s on one core, so the I/O thread
// keeps up with any disk, and 4 bytes per 4096, so the table costs 1/1024 of the swapped bytes.

#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace zero::detail {

class ChecksumTable {
 public:
  static constexpr std::size_t unit = 4096;

  explicit ChecksumTable(std::size_t file_bytes) : sums_(file_bytes / unit, 0) {}

  // The checksum of one unit; never 0, which marks a unit not yet written.
  static std::uint32_t checksum(const std::byte* data) noexcept {
    const XXH64_hash_t hash = XXH3_64bits(data, unit);
    const auto folded = static_cast<std::uint32_t>(hash ^ (hash >> 32));
    return folded == 0 ? 1 : folded;
  }

  // Before [offset, offset + length) of the file is written from `data`.
  void record(std::size_t offset, const std::byte* data, std::size_t length) noexcept {
    for (std::size_t done = 0; done < length; done += unit)
      sums_[(offset + done) / unit] = checksum(data + done);
  }

  // After [offset, offset + length) was read into `data`: the problem with the first bad unit.
  std::optional<std::string> verify(const std::filesystem::path& file, std::size_t offset,
                                    const std::byte* data, std::size_t length) const {
    for (std::size_t done = 0; done < length; done += unit) {
      const std::size_t at = offset + done;
      const std::uint32_t expected = sums_[at / unit];
      if (expected == 0)
        return "swap file " + file.string() + ": byte " + std::to_string(at) +
               " was read before anything was written there (a bug in the caller: read only "
               "what was written)";
      const std::uint32_t found = checksum(data + done);
      if (found != expected)
        return "swap file " + file.string() + " changed under us at byte " + std::to_string(at) +
               ": its " + std::to_string(unit) + "-byte unit was written with checksum " +
               hex(expected) + " and reads back as " + hex(found) +
               " (the disk, the file system or another process altered it)";
    }
    return std::nullopt;
  }

 private:
  static std::string hex(std::uint32_t value) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08x", static_cast<unsigned>(value));
    return text;
  }

  std::vector<std::uint32_t> sums_;
};

} // namespace zero::detail
