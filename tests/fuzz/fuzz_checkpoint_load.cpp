// Fuzz target: everything that reads a checkpoint directory, as zero-checkpoint inspect and
// consolidate and the engine's load_checkpoint read it: DIR/latest (resolve), the manifest, every
// state file's checksums (VerifiedReader), the user state (read_small_file), and every element of
// every tensor through the StateReader. A bad directory must be a zero::Error that names what is
// wrong; no read may leave the checkpoint's directory.
//
// The input is a directory in one file, each file of it after a line "%%file NAME" (NAME: a file,
// or TAG/FILE; letters, digits, '.', '_', '-'). The seeds are real checkpoints, so the fuzzer
// changes a manifest's numbers while its files still match their checksums.

#include <zero/checkpoint/directory.hpp>
#include <zero/checkpoint/files.hpp>
#include <zero/checkpoint/manifest.hpp>
#include <zero/checkpoint/reshard.hpp>
#include <zero/checkpoint/state_file.hpp>

#include "fuzz_target.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace ck = zero::checkpoint;

constexpr std::string_view file_marker = "%%file ";

constexpr std::string_view scratch_prefix = "zero-fuzz-checkpoint-";

// The scratch directories of runs that are gone: each input's directory is removed after it, but
// not after a crash (libFuzzer leaves with _Exit).
void remove_stale_scratch(const fs::path& base) {
  std::vector<fs::path> stale;
  std::error_code error;
  for (fs::directory_iterator it(base, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(scratch_prefix)) continue;
    const int pid = std::atoi(name.c_str() + scratch_prefix.size());
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(it->path());
  }
  for (const fs::path& path : stale)
    fs::remove_all(path, error);
}

// The directory of this process's inputs, on tmpfs where there is one.
const fs::path& scratch() {
  static const fs::path dir = [] {
    const fs::path base =
        fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    remove_stale_scratch(base);
    return base / (std::string(scratch_prefix) + std::to_string(::getpid()));
  }();
  return dir;
}

bool plain(std::string_view part) {
  return !part.empty() && part.size() <= 64 && part != "." && part != ".." &&
         part.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                "0123456789._-") == std::string_view::npos;
}

// NAME of a "%%file NAME" line when it names a file the target may write: FILE or TAG/FILE.
std::optional<fs::path> file_name(std::string_view name) {
  const std::size_t slash = name.find('/');
  if (slash == std::string_view::npos)
    return plain(name) ? std::optional<fs::path>(name) : std::nullopt;
  const std::string_view tag = name.substr(0, slash), file = name.substr(slash + 1);
  if (!plain(tag) || !plain(file)) return std::nullopt;
  return fs::path(tag) / file;
}

void write_directory(const fs::path& dir, std::string_view input) {
  fs::create_directories(dir);
  std::size_t at = input.starts_with(file_marker) ? 0 : input.find("\n" + std::string(file_marker));
  while (at != std::string_view::npos) {
    at += input[at] == '\n' ? 1 : 0;
    const std::size_t name_end = input.find('\n', at);
    if (name_end == std::string_view::npos) return;
    const std::string_view name =
        input.substr(at + file_marker.size(), name_end - at - file_marker.size());
    const std::size_t next = input.find("\n" + std::string(file_marker), name_end);
    const std::string_view contents =
        input.substr(name_end + 1,
                     next == std::string_view::npos ? std::string_view::npos : next - name_end - 1);
    const auto path = file_name(name);
    std::error_code error; // a file and a directory of one name: the second is left out
    if (path) fs::create_directories((dir / *path).parent_path(), error);
    if (path && !error)
      std::ofstream(dir / *path, std::ios::binary)
          .write(contents.data(), static_cast<std::streamsize>(contents.size()));
    at = next;
  }
}

// Reads what consolidation reads, in bounded pieces and at most `budget` elements in all (a
// manifest may describe a large model over small files: pieces may share records).
void read_tensors(ck::StateReader& reader, const ck::Manifest& m) {
  std::vector<float> piece(4096);
  std::size_t budget = std::size_t(1) << 20;
  for (std::size_t t = 0; t < m.tensors(); ++t)
    for (std::size_t p = 0; p < m.parameters.size(); ++p) {
      reader.read_parameter(t, p, {0, 0}, piece.data()); // an empty read, as of an empty tensor
      for (std::size_t at = 0; at < m.parameters[p].numel && budget > 0;) {
        const std::size_t n = std::min({piece.size(), m.parameters[p].numel - at, budget});
        reader.read_parameter(t, p, {at, at + n}, piece.data());
        at += n;
        budget -= n;
      }
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path& dir = scratch();
  write_directory(dir, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const fs::path checkpoint = ck::resolve(dir, std::nullopt);
    const fs::path inside = checkpoint.lexically_relative(dir); // "." or TAG
    zero_fuzz::promise(!inside.empty() && *inside.begin() != ".." &&
                           std::distance(inside.begin(), inside.end()) <= 1,
                       "resolve stays in the checkpoint directory");
    const ck::Manifest m = ck::read_manifest(checkpoint);
    for (const ck::StateFile& f : m.files)
      ck::VerifiedReader(checkpoint, f).verify_all();
    if (m.user_state) ck::read_small_file(checkpoint, *m.user_state);
    ck::StateReader reader(checkpoint, m);
    read_tensors(reader, m);
  } catch (const zero::Error& e) {
    zero_fuzz::expected(e);
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return 0;
}
