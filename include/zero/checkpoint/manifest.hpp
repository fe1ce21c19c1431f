#pragma once
// The manifest of a checkpoint (manifest.json): everything needed to resume a run from its files,
// at any world size, stage or partitioner. One per checkpoint, written last by rank 0.
//
// A state file holds one saving rank's share of the fp32 master weights and optimizer moments as
// a sequence of records, each `count` values of one tensor (0: master weights, then the moments in
// the optimizer's order) at positions [shard_begin, shard_begin + count) of the saving rank's
// shard: `count` floats, or (8-bit moments) `count` codes of a DynamicMap followed by one fp32
// scale per block of quantized_moment_block values, the blocks counted from the record's first
// value. Its pieces say which parameter elements sit at which shard positions (the saved layout),
// so a reader finds any element of any tensor without knowing how the saver was laid out. Every
// file carries the XXH3 checksum of each `chunk_bytes` chunk and of the whole file.

#include "zero/core/error.hpp"
#include "zero/optim/dynamic_map.hpp"
#include "zero/optim/quantized_moments.hpp"
#include "zero/precision/loss_scaler.hpp"
#include "zero/shard/parameter.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace zero::checkpoint {

inline constexpr const char* format_name = "zero-checkpoint";
// Version 2 added 8-bit records; a checkpoint without them is written as version 1, which zero
// before them reads.
inline constexpr int format_version = 2;
inline constexpr const char* manifest_file = "manifest.json";
inline constexpr const char* latest_file = "latest";
inline constexpr const char* user_state_file = "user_state.bin";
// Under tensor parallelism a checkpoint holds one checkpoint per tensor rank, each in a
// sub-directory (tensor_rank_directory), beside this file, which says how many.
inline constexpr const char* tensor_parallel_file = "tensor_parallel.json";
inline constexpr std::size_t default_chunk_bytes = std::size_t(1) << 20;

struct SavedParameter {
  std::string name;
  std::vector<std::size_t> shape; // empty: one dimension of numel
  std::size_t numel = 0;
  int layer = 0;
  // Under tensor parallelism (ParameterSpec's): held whole by every tensor rank, or a slice.
  bool replicated_over_tensor_parallel = false;
  std::optional<TensorParallelSplit> tensor_parallel_split;
  friend bool operator==(const SavedParameter&, const SavedParameter&) = default;
};

// How a record keeps its values: fp32, or the codes of DynamicMap::signed_map() (the first moment)
// or of DynamicMap::unsigned_map() (the second) and a scale per block. The numbers are the
// format's.
enum class RecordEncoding : std::size_t { fp32 = 0, signed_8bit = 1, unsigned_8bit = 2 };

inline RecordEncoding encoding_of(const DynamicMap& map) noexcept {
  return map.is_signed() ? RecordEncoding::signed_8bit : RecordEncoding::unsigned_8bit;
}
inline const DynamicMap& map_of(RecordEncoding encoding) {
  return encoding == RecordEncoding::signed_8bit ? DynamicMap::signed_map()
                                                 : DynamicMap::unsigned_map();
}

// `count` values of tensor `tensor` at shard positions [shard_begin, shard_begin + count), stored
// at byte `file_offset` as `encoding` says.
struct Record {
  std::size_t tensor = 0;
  std::size_t shard_begin = 0;
  std::size_t count = 0;
  std::size_t file_offset = 0;
  RecordEncoding encoding = RecordEncoding::fp32;

  // The bytes a record of `count` values takes.
  static std::size_t bytes_of(RecordEncoding encoding, std::size_t count) noexcept {
    return encoding == RecordEncoding::fp32 ? count * sizeof(float)
                                            : count + quantized_blocks(count) * sizeof(float);
  }
  std::size_t bytes() const noexcept { return bytes_of(encoding, count); }
};

// `length` elements of parameter `parameter` from `parameter_offset`, at shard position
// `shard_offset` of the file's saving rank.
struct Piece {
  std::size_t parameter = 0;
  std::size_t parameter_offset = 0;
  std::size_t length = 0;
  std::size_t shard_offset = 0;
};

struct StateFile {
  std::string name; // relative to the checkpoint directory
  std::size_t bytes = 0;
  std::uint64_t xxh3 = 0; // of the whole file
  std::size_t chunk_bytes = default_chunk_bytes;
  std::vector<std::uint64_t> chunks; // XXH3 of each chunk
  std::vector<Record> records;
  std::vector<Piece> pieces;
};

struct OtherFile {
  std::string name;
  std::size_t bytes = 0;
  std::uint64_t xxh3 = 0;
};

struct Manifest {
  int version = format_version;
  std::string tag;
  int world_size = 1;
  int stage = 0;
  std::string partitioner; // the saved layout's policy
  int shard_ranks = 1;     // ranks sharing one copy of the states
  // Under tensor parallelism: the tensor-parallel group's size and the tensor rank whose slices
  // this checkpoint holds (world_size and shard_ranks are then those of its data-parallel group).
  int tensor_parallel_size = 1;
  int tensor_parallel_rank = 0;
  std::string compute_dtype;
  std::vector<SavedParameter> parameters;
  std::string optimizer;
  std::vector<std::string> optimizer_states; // names of tensors 1.. (tensor 0: master weights)
  std::int64_t optimizer_step = 0;
  double lr = 0;
  nlohmann::json hyperparameters = nlohmann::json::object();
  LossScalerState scaler;
  std::optional<std::int64_t> lr_scheduler_last_batch_iteration;
  std::string lr_scheduler_type;
  std::optional<OtherFile> user_state;
  std::vector<StateFile> files;

  std::size_t tensors() const noexcept { return 1 + optimizer_states.size(); }
  std::size_t numel() const noexcept {
    std::size_t n = 0;
    for (const auto& p : parameters)
      n += p.numel;
    return n;
  }
};

// The version a checkpoint of these files is written as: the first that reads all of them.
inline int version_for(const std::vector<StateFile>& files) noexcept {
  for (const StateFile& f : files)
    for (const Record& r : f.records)
      if (r.encoding != RecordEncoding::fp32) return 2;
  return 1;
}

inline std::string hex64(std::uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}
inline std::uint64_t parse_hex64(const std::string& text, const std::string& where) {
  require(text.size() == 16 && text.find_first_not_of("0123456789abcdef") == std::string::npos,
          where + ": not a 16-digit checksum: '" + text + "'", ErrorKind::io);
  return std::stoull(text, nullptr, 16);
}

// --- to JSON ------------------------------------------------------------------------------------
inline nlohmann::json to_json(const StateFile& f) {
  nlohmann::json chunks = nlohmann::json::array();
  for (auto c : f.chunks)
    chunks.push_back(hex64(c));
  nlohmann::json records = nlohmann::json::array();
  for (const Record& r : f.records) {
    records.push_back({r.tensor, r.shard_begin, r.count, r.file_offset});
    if (r.encoding != RecordEncoding::fp32)
      records.back().push_back(static_cast<std::size_t>(r.encoding));
  }
  nlohmann::json pieces = nlohmann::json::array();
  for (const Piece& p : f.pieces)
    pieces.push_back({p.parameter, p.parameter_offset, p.length, p.shard_offset});
  return {{"name", f.name},        {"bytes", f.bytes},
          {"xxh3", hex64(f.xxh3)}, {"chunk_bytes", f.chunk_bytes},
          {"chunks", chunks},      {"records", records},
          {"pieces", pieces}};
}

inline nlohmann::json to_json(const Manifest& m) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : m.parameters) {
    params.push_back(
        {{"name", p.name}, {"shape", p.shape}, {"numel", p.numel}, {"layer", p.layer}});
    // Only where set: checkpoints without tensor parallelism read and write as before.
    if (p.replicated_over_tensor_parallel) params.back()["replicated_over_tensor_parallel"] = true;
    if (const auto& split = p.tensor_parallel_split)
      params.back()["tensor_parallel_split"] = {{"dimension", split->dimension},
                                                {"blocks", split->blocks},
                                                {"whole_extent", split->whole_extent}};
  }
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : m.files)
    files.push_back(to_json(f));
  nlohmann::json j = {
      {"format", format_name},
      {"version", m.version},
      {"tag", m.tag},
      {"world_size", m.world_size},
      {"plan",
       {{"stage", m.stage}, {"partitioner", m.partitioner}, {"shard_ranks", m.shard_ranks}}},
      {"compute_dtype", m.compute_dtype},
      {"parameters", params},
      {"optimizer",
       {{"type", m.optimizer},
        {"states", m.optimizer_states},
        {"step", m.optimizer_step},
        {"lr", m.lr},
        {"hyperparameters", m.hyperparameters}}},
      {"loss_scaler",
       {{"kind", m.scaler.dynamic ? "dynamic" : "static"},
        {"scale", m.scaler.scale},
        {"iteration", m.scaler.iteration},
        {"last_overflow_iteration", m.scaler.last_overflow_iteration},
        {"hysteresis_left", m.scaler.hysteresis_left},
        {"last_step_skipped", m.scaler.last_step_skipped}}},
      {"files", files}};
  if (m.tensor_parallel_size > 1)
    j["tensor_parallel"] = {{"size", m.tensor_parallel_size}, {"rank", m.tensor_parallel_rank}};
  j["lr_scheduler"] =
      m.lr_scheduler_last_batch_iteration
          ? nlohmann::json{{"type", m.lr_scheduler_type},
                           {"last_batch_iteration", *m.lr_scheduler_last_batch_iteration}}
          : nlohmann::json(nullptr);
  j["user_state"] = m.user_state ? nlohmann::json{{"name", m.user_state->name},
                                                  {"bytes", m.user_state->bytes},
                                                  {"xxh3", hex64(m.user_state->xxh3)}}
                                 : nlohmann::json(nullptr);
  return j;
}

// --- from JSON ----------------------------------------------------------------------------------
// A manifest is outside data: every number is checked to fit its type and to point inside its
// files (without overflow), and every file name is a plain name in the checkpoint's directory.
inline constexpr int manifest_max_depth = 32; // a manifest nests 5 levels (files[].records[][])

namespace detail {
inline const nlohmann::json& member(const nlohmann::json& j, const char* key,
                                    const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    fail(ErrorKind::io, where + ": the key \"" + key + "\" is missing");
  return j.at(key);
}

// nlohmann's get<T> would read -1 as 2^64 - 1 and convert 1e300 without a word (undefined
// behaviour); a whole number of T's range is what a count, an offset or a size must be.
template <class T>
T whole_number(const nlohmann::json& value, const char* key, const std::string& where) {
  if (value.is_number_unsigned()) {
    if (const auto v = value.get<std::uint64_t>(); std::in_range<T>(v)) return static_cast<T>(v);
  } else if (value.is_number_integer()) {
    if (const auto v = value.get<std::int64_t>(); std::in_range<T>(v)) return static_cast<T>(v);
  }
  fail(ErrorKind::io, where + ": \"" + key + "\" is not a whole number from " +
                          std::to_string(std::numeric_limits<T>::min()) + " to " +
                          std::to_string(std::numeric_limits<T>::max()));
}

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& value = member(j, key, where);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return whole_number<T>(value, key, where);
  } else {
    try {
      return value.get<T>();
    } catch (const nlohmann::json::exception&) {
      fail(ErrorKind::io, where + ": \"" + key + "\" has the wrong type");
    }
  }
}

// An array of sizes (a shape), or of `Width` sizes each (pieces), or from `Width` to `Most`
// (records: 4, or 5 with an encoding).
inline std::vector<std::size_t> sizes(const nlohmann::json& list, const char* key,
                                      const std::string& where) {
  if (!list.is_array()) fail(ErrorKind::io, where + ": \"" + key + "\" is not an array");
  std::vector<std::size_t> values;
  for (const nlohmann::json& value : list)
    values.push_back(whole_number<std::size_t>(value, key, where));
  return values;
}
template <std::size_t Width, std::size_t Most = Width>
std::vector<std::array<std::size_t, Most>> size_tuples(const nlohmann::json& j, const char* key,
                                                       const std::string& where) {
  const nlohmann::json& list = member(j, key, where);
  if (!list.is_array()) fail(ErrorKind::io, where + ": \"" + key + "\" is not an array");
  std::vector<std::array<std::size_t, Most>> tuples;
  for (const nlohmann::json& item : list) {
    const std::vector<std::size_t> values = sizes(item, key, where);
    if (values.size() < Width || values.size() > Most)
      fail(ErrorKind::io,
           where + ": an entry of \"" + key + "\" does not hold " + std::to_string(Width) +
               (Most > Width ? " or " + std::to_string(Most) : std::string()) + " numbers");
    std::array<std::size_t, Most> tuple{};
    std::copy(values.begin(), values.end(), tuple.begin());
    tuples.push_back(tuple);
  }
  return tuples;
}

// A file the manifest names: a plain name in the checkpoint's directory, never a path out of it.
inline std::string file_name(const nlohmann::json& j, const std::string& where) {
  std::string name = field<std::string>(j, "name", where);
  if (name.empty() || name == "." || name == ".." ||
      name.find_first_of(std::string("/\0", 2)) != std::string::npos)
    fail(ErrorKind::io, where + ": the file name '" + name +
                            "' is not a plain name in the checkpoint's directory");
  return name;
}
} // namespace detail

inline StateFile state_file_from_json(const nlohmann::json& j, const std::string& where) {
  using detail::field;
  constexpr std::size_t most = std::numeric_limits<std::size_t>::max();
  StateFile f;
  f.name = detail::file_name(j, where);
  const std::string at = where + " (file " + f.name + ")";
  f.bytes = field<std::size_t>(j, "bytes", at);
  f.xxh3 = parse_hex64(field<std::string>(j, "xxh3", at), at);
  f.chunk_bytes = field<std::size_t>(j, "chunk_bytes", at);
  require(f.chunk_bytes > 0 && f.chunk_bytes % sizeof(float) == 0, at + ": bad chunk_bytes",
          ErrorKind::io);
  for (const auto& c : field<std::vector<std::string>>(j, "chunks", at))
    f.chunks.push_back(parse_hex64(c, at));
  require(f.chunks.size() == f.bytes / f.chunk_bytes + (f.bytes % f.chunk_bytes != 0 ? 1 : 0),
          at + ": the number of chunk checksums does not match the file size", ErrorKind::io);
  for (const auto& r : detail::size_tuples<4, 5>(j, "records", at)) {
    require(r[4] <= static_cast<std::size_t>(RecordEncoding::unsigned_8bit),
            at + ": a record's encoding " + std::to_string(r[4]) +
                " is none this library knows (0: fp32, 1 and 2: 8-bit codes)",
            ErrorKind::io);
    const Record record{r[0], r[1], r[2], r[3], static_cast<RecordEncoding>(r[4])};
    // The record's bytes fit between its offset and the file's end, counted without overflow.
    const bool inside = [&] {
      if (record.file_offset > f.bytes) return false;
      const std::size_t room = f.bytes - record.file_offset;
      if (record.encoding == RecordEncoding::fp32) return record.count <= room / sizeof(float);
      return record.count <= room &&
             quantized_blocks(record.count) * sizeof(float) <= room - record.count;
    }();
    require(inside, at + ": a record lies beyond the file's end", ErrorKind::io);
    require(record.count <= most - record.shard_begin,
            at + ": a record's shard positions run past the largest size", ErrorKind::io);
    f.records.push_back(record);
  }
  for (const auto& p : detail::size_tuples<4>(j, "pieces", at)) {
    const Piece piece{p[0], p[1], p[2], p[3]};
    require(piece.length <= most - piece.shard_offset,
            at + ": a piece's shard positions run past the largest size", ErrorKind::io);
    f.pieces.push_back(piece);
  }
  return f;
}

inline Manifest manifest_from_json(const nlohmann::json& j, const std::string& where) {
  using detail::field;
  Manifest m;
  if (!j.is_object() || j.value("format", std::string()) != format_name)
    fail(ErrorKind::io, where + ": not a zero checkpoint manifest (no \"format\": \"" +
                            std::string(format_name) + "\")");
  m.version = field<int>(j, "version", where);
  if (m.version > format_version)
    fail(ErrorKind::unsupported, where + ": format version " + std::to_string(m.version) +
                                     " is newer than this library reads (" +
                                     std::to_string(format_version) + "); update zero to load it");
  m.tag = field<std::string>(j, "tag", where);
  m.world_size = field<int>(j, "world_size", where);
  const auto plan = field<nlohmann::json>(j, "plan", where);
  m.stage = field<int>(plan, "stage", where + ": plan");
  m.partitioner = field<std::string>(plan, "partitioner", where + ": plan");
  m.shard_ranks = field<int>(plan, "shard_ranks", where + ": plan");
  m.compute_dtype = field<std::string>(j, "compute_dtype", where);
  if (j.contains("tensor_parallel")) {
    const auto tp = field<nlohmann::json>(j, "tensor_parallel", where);
    m.tensor_parallel_size = field<int>(tp, "size", where + ": tensor_parallel");
    m.tensor_parallel_rank = field<int>(tp, "rank", where + ": tensor_parallel");
    require(m.tensor_parallel_size >= 1 && m.tensor_parallel_rank >= 0 &&
                m.tensor_parallel_rank < m.tensor_parallel_size,
            where + ": tensor_parallel: rank " + std::to_string(m.tensor_parallel_rank) + " of " +
                std::to_string(m.tensor_parallel_size),
            ErrorKind::io);
  }
  for (const auto& p : field<nlohmann::json>(j, "parameters", where)) {
    SavedParameter s;
    s.name = field<std::string>(p, "name", where + ": parameters");
    s.shape = detail::sizes(detail::member(p, "shape", where + ": parameter " + s.name), "shape",
                            where + ": parameter " + s.name);
    s.numel = field<std::size_t>(p, "numel", where + ": parameter " + s.name);
    s.layer = field<int>(p, "layer", where + ": parameter " + s.name);
    if (p.contains("replicated_over_tensor_parallel"))
      s.replicated_over_tensor_parallel =
          field<bool>(p, "replicated_over_tensor_parallel", where + ": parameter " + s.name);
    if (p.contains("tensor_parallel_split")) {
      const std::string at = where + ": parameter " + s.name + ": tensor_parallel_split";
      const auto split = field<nlohmann::json>(p, "tensor_parallel_split", at);
      s.tensor_parallel_split = TensorParallelSplit{field<std::size_t>(split, "dimension", at),
                                                    field<std::size_t>(split, "blocks", at),
                                                    field<std::size_t>(split, "whole_extent", at)};
      const std::size_t dims = s.shape.empty() ? 1 : s.shape.size();
      require(s.tensor_parallel_split->dimension < dims && s.tensor_parallel_split->blocks >= 1,
              at + ": dimension " + std::to_string(s.tensor_parallel_split->dimension) +
                  " of a tensor of " + std::to_string(dims) + ", " +
                  std::to_string(s.tensor_parallel_split->blocks) + " blocks",
              ErrorKind::io);
    }
    m.parameters.push_back(std::move(s));
  }
  const auto opt = field<nlohmann::json>(j, "optimizer", where);
  m.optimizer = field<std::string>(opt, "type", where + ": optimizer");
  m.optimizer_states = field<std::vector<std::string>>(opt, "states", where + ": optimizer");
  m.optimizer_step = field<std::int64_t>(opt, "step", where + ": optimizer");
  m.lr = field<double>(opt, "lr", where + ": optimizer");
  m.hyperparameters = field<nlohmann::json>(opt, "hyperparameters", where + ": optimizer");
  const auto sc = field<nlohmann::json>(j, "loss_scaler", where);
  const std::string sw = where + ": loss_scaler";
  const std::string kind = field<std::string>(sc, "kind", sw);
  require(kind == "dynamic" || kind == "static", sw + ": kind is neither dynamic nor static",
          ErrorKind::io);
  m.scaler = {kind == "dynamic",
              field<double>(sc, "scale", sw),
              field<std::int64_t>(sc, "iteration", sw),
              field<std::int64_t>(sc, "last_overflow_iteration", sw),
              field<int>(sc, "hysteresis_left", sw),
              field<bool>(sc, "last_step_skipped", sw)};
  if (j.contains("lr_scheduler") && !j.at("lr_scheduler").is_null()) {
    const auto& s = j.at("lr_scheduler");
    m.lr_scheduler_type = field<std::string>(s, "type", where + ": lr_scheduler");
    m.lr_scheduler_last_batch_iteration =
        field<std::int64_t>(s, "last_batch_iteration", where + ": lr_scheduler");
  }
  if (j.contains("user_state") && !j.at("user_state").is_null()) {
    const auto& u = j.at("user_state");
    m.user_state = OtherFile{
        detail::file_name(u, where + ": user_state"),
        field<std::size_t>(u, "bytes", where + ": user_state"),
        parse_hex64(field<std::string>(u, "xxh3", where + ": user_state"), where + ": user_state")};
  }
  for (const auto& f : field<nlohmann::json>(j, "files", where))
    m.files.push_back(state_file_from_json(f, where));
  require(version_for(m.files) <= m.version,
          where + ": version " + std::to_string(m.version) +
              " holds no 8-bit records, but a file lists some (a corrupt manifest)",
          ErrorKind::io);
  for (const StateFile& f : m.files)
    for (const Piece& p : f.pieces)
      require(p.parameter < m.parameters.size() &&
                  p.parameter_offset <= m.parameters[p.parameter].numel &&
                  p.length <= m.parameters[p.parameter].numel - p.parameter_offset,
              where + ": file " + f.name + " has a piece outside its parameter", ErrorKind::io);
  return m;
}

// Reads the text of a manifest; `path` names it in errors.
inline Manifest parse_manifest(std::string_view text, const std::string& path) {
  nlohmann::json j;
  try {
    // Copying a document recurses once per level: nesting is bounded before anything copies it.
    j = nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > manifest_max_depth)
        fail(ErrorKind::io, "checkpoint: " + path + " nests deeper than " +
                                std::to_string(manifest_max_depth) + " levels");
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::io, "checkpoint: " + path + " is not valid JSON: " + e.what());
  }
  try {
    return manifest_from_json(j, path);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(ErrorKind::io, "checkpoint: " + path + ": " + e.what());
  }
}

// Reads DIR/manifest.json; errors name the directory and what is wrong with it.
inline Manifest read_manifest(const std::filesystem::path& dir) {
  const auto path = dir / manifest_file;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    fail(ErrorKind::io, "checkpoint: " + dir.string() + " is not a directory");
  if (!std::filesystem::exists(path, ec))
    fail(ErrorKind::io,
         "checkpoint: " + dir.string() + " is not a checkpoint (it has no " + manifest_file + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::io, "checkpoint: cannot open " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return parse_manifest(text.str(), path.string());
}

// --- tensor parallelism ---------------------------------------------------------------------

// Tensor rank `rank`'s checkpoint in a checkpoint of `size` tensor ranks: tensor_rank_01_of_03.
inline std::string tensor_rank_directory(int rank, int size) {
  const std::size_t width = std::max<std::size_t>(2, std::to_string(size).size());
  const auto padded = [width](int n) {
    std::string text = std::to_string(n);
    return std::string(width - std::min(width, text.size()), '0') + text;
  };
  return "tensor_rank_" + padded(rank) + "_of_" + padded(size);
}

inline std::string tensor_parallel_text(int size) {
  return nlohmann::json{{"format", format_name}, {"tensor_parallel_size", size}}.dump() + "\n";
}

// The tensor-parallel size DIR was saved at: what DIR/tensor_parallel.json says, 1 without one
// (a checkpoint saved without tensor parallelism).
inline int saved_tensor_parallel_size(const std::filesystem::path& dir) {
  const auto path = dir / tensor_parallel_file;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return 1;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::io, "checkpoint: cannot open " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  try {
    const auto j = nlohmann::json::parse(text.str());
    if (!j.is_object() || j.value("format", std::string()) != format_name)
      fail(ErrorKind::io, "checkpoint: " + path.string() + " is not a zero checkpoint's");
    const int size = detail::field<int>(j, "tensor_parallel_size", path.string());
    require(size >= 1,
            "checkpoint: " + path.string() + " names a tensor-parallel size of " +
                std::to_string(size),
            ErrorKind::io);
    return size;
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::io, "checkpoint: " + path.string() + " is not valid JSON: " + e.what());
  }
}

} // namespace zero::checkpoint
