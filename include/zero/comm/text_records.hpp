#pragma once
// Text across ranks: strings travel in fixed-size records, so that every rank's contribution to
// an all_gather has the same size (an error message, a parameter's description).

#include "zero/comm/communicator.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace zero::detail {

inline constexpr std::size_t record_bytes = 192;

inline std::vector<std::uint8_t> to_record(std::string_view text,
                                           std::size_t bytes = record_bytes) {
  std::vector<std::uint8_t> record(bytes, 0);
  std::memcpy(record.data(), text.data(), std::min(text.size(), bytes - 1));
  return record;
}
inline std::string from_record(const std::uint8_t* record, std::size_t bytes = record_bytes) {
  const auto* chars = reinterpret_cast<const char*>(record);
  return std::string(chars, std::find(chars, chars + bytes, '\0'));
}

// Collective: every rank's `mine`, cut to `bytes` - 1 characters.
template <GatheringCommunicator Comm>
std::vector<std::string> gather_text(Comm& comm, std::string_view mine,
                                     std::size_t bytes = record_bytes) {
  const auto ranks = static_cast<std::size_t>(comm.size());
  const auto record = to_record(mine, bytes);
  std::vector<std::uint8_t> all(bytes * ranks);
  comm.all_gather(record, all).wait();
  std::vector<std::string> texts;
  for (std::size_t r = 0; r < ranks; ++r)
    texts.push_back(from_record(all.data() + r * bytes, bytes));
  return texts;
}

inline std::string rank_list(const std::vector<std::string>& per_rank) {
  std::string text;
  for (std::size_t r = 0; r < per_rank.size(); ++r)
    text += (r == 0 ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + per_rank[r];
  return text;
}

// An Error's message without the "zero: " every message starts with.
inline std::string without_prefix(std::string_view message) {
  constexpr std::string_view prefix = "zero: ";
  if (message.starts_with(prefix)) message.remove_prefix(prefix.size());
  return std::string(message);
}

} // namespace zero::detail
