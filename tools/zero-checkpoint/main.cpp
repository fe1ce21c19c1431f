// zero-checkpoint: look inside a zero checkpoint and turn it into files other tools read.
//
//   zero-checkpoint inspect DIR [--tag TAG] [--no-verify]
//       the manifest in short, each file's size, and every checksum verified
//   zero-checkpoint consolidate DIR [--tag TAG] --to OUT.safetensors [--moments]
//   zero-checkpoint consolidate DIR [--tag TAG] --to OUTDIR [--moments]
//       the full fp32 weights (and the optimizer's moments, as NAME.exp_avg, ...) as one
//       safetensors file, or as one .npy per tensor; streamed in bounded pieces, so memory stays
//       small whatever the model's size. Each file is written under NAME.partial and renamed once
//       whole: a full disk leaves no partial file, and the error names the path and the reason.
//
// DIR is a checkpoint directory (its `latest` is used unless --tag) or one checkpoint. A
// checkpoint of a tensor-parallel run (one sub-directory per tensor rank) is consolidated into
// whole tensors: the slices joined as their manifests say, the replicated parameters taken once.
// Exit status: 0, 1 for a bad or corrupt checkpoint (the message names the file), 2 for bad usage.

#include "arguments.hpp"

#include <zero/checkpoint/directory.hpp>
#include <zero/checkpoint/files.hpp>
#include <zero/checkpoint/manifest.hpp>
#include <zero/checkpoint/reshard.hpp>
#include <zero/checkpoint/safetensors.hpp>
#include <zero/checkpoint/state_file.hpp>
#include <zero/core/directory_handle.hpp>
#include <zero/tensor_parallel/slices.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace ck = zero::checkpoint;

constexpr std::size_t piece_elements = std::size_t(16) << 20; // 64 MiB of floats at a time

using zero_checkpoint::Arguments;

std::string gigabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f GB", bytes / 1e9);
  return text;
}

std::vector<std::size_t> shape_of(const ck::SavedParameter& p) {
  return p.shape.empty() ? std::vector<std::size_t>{p.numel} : p.shape;
}

void inspect(const Arguments& a) {
  const fs::path dir = ck::resolve(a.dir, a.tag);
  const ck::Manifest m = ck::read_manifest(dir);
  std::printf("checkpoint %s (tag %s, format version %d)\n", dir.c_str(), m.tag.c_str(), m.version);
  std::printf("  saved by   %d rank(s), ZeRO stage %d, %s, %d rank(s) per shard group\n",
              m.world_size, m.stage, m.partitioner.c_str(), m.shard_ranks);
  std::printf("  model      %zu parameters, %zu elements, compute type %s\n", m.parameters.size(),
              m.numel(), m.compute_dtype.c_str());
  std::string states = "master weights";
  for (const auto& s : m.optimizer_states)
    states += ", " + s;
  std::printf("  optimizer  %s, step %lld, lr %g; states: %s\n", m.optimizer.c_str(),
              static_cast<long long>(m.optimizer_step), m.lr, states.c_str());
  // 8-bit moments: how many of each moment's values are saved as codes (the rest as fp32).
  std::vector<std::size_t> eight_bit(m.tensors()), values(m.tensors());
  for (const auto& f : m.files)
    for (const auto& r : f.records) {
      values[r.tensor] += r.count;
      if (r.encoding != ck::RecordEncoding::fp32) eight_bit[r.tensor] += r.count;
    }
  std::string coded;
  for (std::size_t t = 1; t < m.tensors(); ++t)
    if (eight_bit[t] > 0)
      coded += (coded.empty() ? "" : ", ") + m.optimizer_states[t - 1] + " " +
               std::to_string(eight_bit[t]) + " of " + std::to_string(values[t]) + " values";
  if (!coded.empty()) std::printf("  8-bit      %s (codes, a scale per 2048)\n", coded.c_str());
  std::printf("  loss scale %s %g (iteration %lld, hysteresis left %d)\n",
              m.scaler.dynamic ? "dynamic" : "static", m.scaler.scale,
              static_cast<long long>(m.scaler.iteration), m.scaler.hysteresis_left);
  if (m.lr_scheduler_last_batch_iteration)
    std::printf("  schedule   %s at step %lld\n", m.lr_scheduler_type.c_str(),
                static_cast<long long>(*m.lr_scheduler_last_batch_iteration));
  if (m.user_state) std::printf("  user state %zu bytes\n", m.user_state->bytes);
  std::size_t total = 0;
  for (const auto& f : m.files) {
    std::printf("  %-24s %s\n", f.name.c_str(), gigabytes(double(f.bytes)).c_str());
    total += f.bytes;
  }
  std::printf("  total      %s in %zu state file(s)\n", gigabytes(double(total)).c_str(),
              m.files.size());
  if (!a.verify) return;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& f : m.files)
    ck::VerifiedReader(dir, f).verify_all();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("  verified   every checksum of %zu file(s) in %.2f s (%.2f GB/s)\n", m.files.size(),
              seconds, double(total) / 1e9 / std::max(seconds, 1e-9));
}

// The tensors a consolidation writes, in order: every parameter's master weights, then (with
// --moments) every parameter's moments.
struct Output {
  std::string name;
  std::size_t parameter, tensor;
};

std::vector<Output> outputs(const ck::Manifest& m, bool moments) {
  std::vector<Output> list;
  for (std::size_t t = 0; t < (moments ? m.tensors() : 1); ++t)
    for (std::size_t p = 0; p < m.parameters.size(); ++p)
      list.push_back(
          {t == 0 ? m.parameters[p].name : m.parameters[p].name + "." + m.optimizer_states[t - 1],
           p, t});
  return list;
}

// Parameter p's tensor t, piece by piece, written at `offset` of `file`.
void stream(ck::StateReader& reader, const ck::Manifest& m, const Output& o,
            const ck::FileHandle& file, std::size_t offset) {
  const std::size_t numel = m.parameters[o.parameter].numel;
  std::vector<float> piece(std::min(numel, piece_elements));
  for (std::size_t at = 0; at < numel; at += piece.size()) {
    const std::size_t n = std::min(piece.size(), numel - at);
    reader.read_parameter(o.tensor, o.parameter, {at, at + n}, piece.data());
    file.write_all(piece.data(), n * sizeof(float), offset + at * sizeof(float));
  }
}

// What a consolidation reads: one checkpoint, streamed tensor by tensor in bounded pieces, or the
// checkpoints of the ranks of a tensor-parallel group, whose slices of each tensor are read whole
// and joined (ParameterSpec::tensor_parallel_split, recorded in the manifests): memory then holds
// one whole tensor and its slices at a time.
class Source {
 public:
  explicit Source(const fs::path& dir) : size_(ck::saved_tensor_parallel_size(dir)) {
    manifests_.reserve(std::size_t(size_)); // each reader keeps a reference to its manifest
    for (int r = 0; r < size_; ++r) {
      const fs::path part = size_ > 1 ? dir / ck::tensor_rank_directory(r, size_) : dir;
      manifests_.push_back(ck::read_manifest(part));
      readers_.push_back(std::make_unique<ck::StateReader>(part, manifests_.back()));
    }
    if (size_ > 1) check_slices(dir);
  }

  // Rank 0's manifest: the names, the optimizer, the step.
  const ck::Manifest& manifest() const { return manifests_[0]; }

  std::vector<std::size_t> shape(const Output& o) const {
    const ck::SavedParameter& p = manifests_[0].parameters[o.parameter];
    if (size_ == 1 || !p.tensor_parallel_split) return shape_of(p);
    return zero::whole_shape(p.shape, p.numel, *p.tensor_parallel_split, size_, p.name);
  }
  std::size_t numel(const Output& o) const {
    std::size_t n = 1;
    for (std::size_t d : shape(o))
      n *= d;
    return n;
  }

  // The tensor's floats, written at `offset` of `file`.
  void write(const Output& o, const ck::FileHandle& file, std::size_t offset) {
    const ck::SavedParameter& p = manifests_[0].parameters[o.parameter];
    if (size_ == 1 || !p.tensor_parallel_split) {
      stream(*readers_[0], manifests_[0], o, file, offset); // whole, or replicated: rank 0's
      return;
    }
    std::vector<std::vector<float>> slices;
    for (int r = 0; r < size_; ++r) {
      slices.emplace_back(p.numel);
      readers_[std::size_t(r)]->read_parameter(o.tensor, o.parameter, {0, p.numel},
                                               slices.back().data());
    }
    const std::vector<float> whole =
        zero::join_split(slices, p.shape, *p.tensor_parallel_split, p.name);
    file.write_all(whole.data(), whole.size() * sizeof(float), offset);
  }

 private:
  // Every tensor rank's checkpoint holds the same parameters, each either replicated or a slice
  // whose joining is recorded: a slice without it cannot be consolidated (its rank 0's part alone
  // would pass for the whole tensor).
  void check_slices(const fs::path& dir) const {
    const ck::Manifest& first = manifests_[0];
    for (int r = 1; r < size_; ++r) {
      const ck::Manifest& m = manifests_[std::size_t(r)];
      zero::require(m.parameters.size() == first.parameters.size() &&
                        m.optimizer_states == first.optimizer_states,
                    "consolidate: " + dir.string() + ": tensor ranks 0 and " + std::to_string(r) +
                        " saved different parameters or optimizer states",
                    zero::ErrorKind::io);
      for (std::size_t i = 0; i < m.parameters.size(); ++i)
        zero::require(m.parameters[i].name == first.parameters[i].name &&
                          m.parameters[i].numel == first.parameters[i].numel &&
                          m.parameters[i].tensor_parallel_split ==
                              first.parameters[i].tensor_parallel_split,
                      "consolidate: " + dir.string() + ": parameter #" + std::to_string(i) +
                          " differs between tensor ranks 0 and " + std::to_string(r) + " ('" +
                          first.parameters[i].name + "', '" + m.parameters[i].name + "')",
                      zero::ErrorKind::io);
    }
    for (const ck::SavedParameter& p : first.parameters)
      zero::require(p.replicated_over_tensor_parallel || p.tensor_parallel_split,
                    "consolidate: " + dir.string() + " was saved by " + std::to_string(size_) +
                        " tensor ranks, and its parameter '" + p.name +
                        "' is neither replicated nor a slice whose joining was recorded "
                        "(ParameterSpec::tensor_parallel_split): its whole tensor is unknown",
                    zero::ErrorKind::invalid_argument);
  }

  int size_;
  std::vector<ck::Manifest> manifests_;
  std::vector<std::unique_ptr<ck::StateReader>> readers_;
};

std::string shape_text(const std::vector<std::size_t>& shape, const char* open, const char* close) {
  std::string s = open;
  for (std::size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1 && std::string(open) == "(") s += ",";
  return s + close;
}

// Writes `name` in `dir` whole under a fresh temporary name (write(file) fills it), flushes it and
// renames it: a full disk or an I/O error leaves neither a part under `name` nor the temporary, and
// the error names the path and the system's reason. The temporary is created with O_EXCL and
// without following links, so a name planted in a shared directory is never written through.
template <class Write>
void write_whole(const zero::DirectoryHandle& dir, const std::string& name, Write&& write) {
  const auto [fd, temporary] = dir.create_temporary(name);
  try {
    {
      const ck::FileHandle file(fd, dir / name); // errors name the file the user asked for
      write(file);
      file.sync();
    }
    dir.rename(temporary, name);
  } catch (...) {
    ::unlinkat(dir.fd(), temporary.c_str(), 0);
    throw;
  }
}

// The directory that holds the file `to`, opened once (core/directory_handle.hpp).
zero::DirectoryHandle folder_of(const fs::path& to) {
  const fs::path parent = to.parent_path();
  return zero::DirectoryHandle::open_named(parent.empty() ? fs::path(".") : parent,
                                           "the folder of " + to.string());
}

// Two tensors of one name (a parameter "w.exp_avg" beside w's first moment) would overwrite each
// other in a directory and make a safetensors header with a duplicate key.
void require_unique_names(const std::vector<Output>& list) {
  std::set<std::string> seen;
  for (const Output& o : list)
    zero::require(seen.insert(o.name).second,
                  "consolidate: two tensors are named '" + o.name +
                      "' (a parameter's name ends "
                      "with an optimizer state's)",
                  zero::ErrorKind::invalid_argument);
}

// Each tensor's file in OUTDIR is named after it: a name that is not a plain file name (a '/',
// "..", a NUL: a user's name, or a manifest someone edited) would write outside OUTDIR.
void require_plain_file_names(const std::vector<Output>& list, const fs::path& to) {
  for (const Output& o : list) {
    const bool plain = !o.name.empty() && o.name != "." && o.name != ".." &&
                       o.name.find_first_of(std::string("/\0", 2)) == std::string::npos;
    zero::require(plain,
                  "consolidate: the tensor name '" + o.name + "' cannot be a file name in " +
                      to.string() + " (write a .safetensors file, which keeps names as they are)",
                  zero::ErrorKind::invalid_argument);
  }
}

void to_safetensors(Source& source, const Arguments& a) {
  const ck::Manifest& m = source.manifest();
  const auto list = outputs(m, a.moments);
  require_unique_names(list);
  std::vector<zero::SafetensorsEntry> entries;
  std::size_t data = 0;
  for (const Output& o : list) {
    entries.push_back({o.name, source.shape(o)});
    data += source.numel(o) * sizeof(float);
  }
  const std::string preamble =
      zero::safetensors_preamble(entries,
                                 {{"zero.tag", m.tag},
                                  {"zero.optimizer", m.optimizer},
                                  {"zero.optimizer_step", std::to_string(m.optimizer_step)}},
                                 a.to);
  write_whole(folder_of(a.to), a.to.filename().string(), [&](const ck::FileHandle& file) {
    file.write_all(preamble.data(), preamble.size(), 0);
    std::size_t offset = preamble.size();
    for (const Output& o : list) {
      source.write(o, file, offset);
      offset += source.numel(o) * sizeof(float);
    }
  });
  std::printf("wrote %s: %zu tensors, %s\n", a.to.c_str(), list.size(),
              gigabytes(double(data)).c_str());
}

void to_npy_directory(Source& source, const Arguments& a) {
  const ck::Manifest& m = source.manifest();
  const auto list = outputs(m, a.moments);
  require_unique_names(list);
  require_plain_file_names(list, a.to);
  const zero::DirectoryHandle out = zero::DirectoryHandle::open_named(a.to, "--to", 0755);
  std::size_t total = 0;
  for (const Output& o : list) {
    const auto shape = source.shape(o);
    std::string header =
        "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text(shape, "(", ")") + ", }";
    // Magic, version 1.0, a 2-byte header length; the whole preamble a multiple of 64 bytes.
    const std::size_t preamble = 10 + header.size() + 1;
    header.append((64 - preamble % 64) % 64, ' ');
    header += '\n';
    std::string start = "\x93NUMPY\x01";
    start += '\0';
    start += static_cast<char>(header.size() & 0xff);
    start += static_cast<char>(header.size() >> 8);
    start += header;
    write_whole(out, o.name + ".npy", [&](const ck::FileHandle& file) {
      file.write_all(start.data(), start.size(), 0);
      source.write(o, file, start.size());
    });
    total += source.numel(o) * sizeof(float);
  }
  std::printf("wrote %zu .npy files to %s, %s\n", list.size(), a.to.c_str(),
              gigabytes(double(total)).c_str());
}

void consolidate(const Arguments& a) {
  Source source(ck::resolve(a.dir, a.tag));
  if (a.to.extension() == ".safetensors")
    to_safetensors(source, a);
  else
    to_npy_directory(source, a);
}

} // namespace

int main(int argc, char** argv) {
  Arguments a;
  try {
    a = zero_checkpoint::parse_arguments(argc, argv);
  } catch (const zero_checkpoint::UsageError& e) {
    std::fprintf(stderr, "zero-checkpoint: %s\n%s", e.what(), zero_checkpoint::usage);
    return 2;
  }
  if (a.help) {
    std::fputs(zero_checkpoint::help_text().c_str(), stdout);
    return 0;
  }
  try {
    if (a.command == "inspect")
      inspect(a);
    else
      consolidate(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
