// Fuzz target: the checkpoint manifest reader (zero::checkpoint::parse_manifest, what
// read_manifest reads DIR/manifest.json with). A bad manifest must be a zero::Error that names
// it; an accepted one names only files in the checkpoint's directory, and its numbers point inside
// its files and parameters, with no sum that overflows (what the loaders rely on).

#include <zero/checkpoint/manifest.hpp>

#include "fuzz_target.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace {

namespace ck = zero::checkpoint;

bool plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

// a + b <= limit, without overflow.
bool fits(std::size_t a, std::size_t b, std::size_t limit) {
  return a <= limit && b <= limit - a;
}

// Whether record r's bytes lie inside a file of `file_bytes`, from the format's definition:
// `count` floats, or `count` codes and then a 4-byte scale per 2048 codes begun.
bool inside(const ck::Record& r, std::size_t file_bytes) {
  if (r.file_offset > file_bytes) return false;
  const std::size_t room = file_bytes - r.file_offset;
  if (r.encoding == ck::RecordEncoding::fp32) return r.count <= room / sizeof(float);
  const std::size_t scales = (r.count / 2048 + (r.count % 2048 != 0 ? 1 : 0)) * sizeof(float);
  return r.count <= room && scales <= room - r.count;
}

void check(const ck::Manifest& m) {
  constexpr std::size_t most = std::numeric_limits<std::size_t>::max();
  if (m.user_state) zero_fuzz::promise(plain_name(m.user_state->name), "plain user state name");
  for (const ck::StateFile& f : m.files) {
    zero_fuzz::promise(plain_name(f.name), "plain state file names");
    zero_fuzz::promise(f.chunk_bytes > 0 && f.chunks.size() == f.bytes / f.chunk_bytes +
                                                                   (f.bytes % f.chunk_bytes != 0),
                       "a checksum per chunk");
    for (const ck::Record& r : f.records) {
      zero_fuzz::promise(r.encoding == ck::RecordEncoding::fp32 ||
                             r.encoding == ck::RecordEncoding::signed_8bit ||
                             r.encoding == ck::RecordEncoding::unsigned_8bit,
                         "known record encodings");
      zero_fuzz::promise(r.encoding == ck::RecordEncoding::fp32 || m.version >= 2,
                         "8-bit records only from version 2");
      zero_fuzz::promise(inside(r, f.bytes), "records inside their file");
      zero_fuzz::promise(fits(r.shard_begin, r.count, most), "record shard positions");
    }
    for (const ck::Piece& p : f.pieces) {
      zero_fuzz::promise(p.parameter < m.parameters.size(), "pieces of known parameters");
      zero_fuzz::promise(fits(p.parameter_offset, p.length, m.parameters[p.parameter].numel),
                         "pieces inside their parameter");
      zero_fuzz::promise(fits(p.shard_offset, p.length, most), "piece shard positions");
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    check(ck::parse_manifest(text, "manifest.json"));
  } catch (const zero::Error& e) {
    zero_fuzz::expected(e);
  }
  return 0;
}
