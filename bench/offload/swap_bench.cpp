// Swap bandwidth of the NVMe tier: writes a file of --size bytes through a SwapFile, then reads
// it back, with the given aio options, and reports GB/s (1e9 bytes per second) for each.
//
//   zero_bench_swap --dir=/tmp --size=2G --block-size=1M --queue-depth=8 [--rounds=3]
//                   [--transfer=64M --buffers=4] [--single-submit] [--no-overlap-events]
//                   [--intra-op-parallelism=N] [--no-checksums] [--pin-memory] [--json]
//
// The engine's pattern, at full speed: --buffers bounce buffers of --transfer bytes each, one
// transfer per buffer in flight; a buffer is reused once its previous transfer completed. With
// checksums (the default) the read side includes their verification. Each round writes and
// reads the whole file; --json prints one JSON object per round and direction (for
// bench/offload/compare_fio.py), otherwise a line of text each.

#include <zero/nvme/nvme_tier.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct Arguments {
  std::string dir = "/tmp";
  std::size_t size = std::size_t{2} << 30;
  std::size_t transfer = std::size_t{64} << 20;
  std::size_t buffers = 4;
  int rounds = 1;
  bool checksums = true;
  bool pin_memory = false;
  bool json = false;
  zero::AioOptions aio;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "zero_bench_swap: %s\nusage: zero_bench_swap [--dir=PATH] [--size=BYTES] "
               "[--block-size=BYTES] [--queue-depth=N] [--intra-op-parallelism=N] "
               "[--single-submit] [--no-overlap-events] [--transfer=BYTES] [--buffers=N] "
               "[--rounds=N] [--no-checksums] [--pin-memory] [--json]\n"
               "  BYTES may end in K, M or G (powers of 1024)\n",
               problem.c_str());
  std::exit(2);
}

std::size_t parse_bytes(std::string_view flag, const std::string& text) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  std::size_t scale = 1;
  const std::string_view suffix(end);
  if (suffix == "K" || suffix == "k")
    scale = std::size_t{1} << 10;
  else if (suffix == "M" || suffix == "m")
    scale = std::size_t{1} << 20;
  else if (suffix == "G" || suffix == "g")
    scale = std::size_t{1} << 30;
  else if (!suffix.empty() || end == text.c_str())
    usage(std::string(flag) + ": expected a number of bytes, got \"" + text + "\"");
  return static_cast<std::size_t>(value) * scale;
}

int parse_count(std::string_view flag, const std::string& text) {
  const std::size_t value = parse_bytes(flag, text);
  if (value == 0 || value > 1'000'000) usage(std::string(flag) + ": expected a positive count");
  return static_cast<int>(value);
}

Arguments parse_arguments(int argc, char** argv) {
  Arguments args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::size_t equals = arg.find('=');
    const std::string flag = arg.substr(0, equals);
    const std::string value = equals == std::string::npos ? "" : arg.substr(equals + 1);
    if (flag == "--dir")
      args.dir = value;
    else if (flag == "--size")
      args.size = parse_bytes(flag, value);
    else if (flag == "--block-size")
      args.aio.block_size = parse_bytes(flag, value);
    else if (flag == "--queue-depth")
      args.aio.queue_depth = parse_count(flag, value);
    else if (flag == "--intra-op-parallelism")
      args.aio.intra_op_parallelism = parse_count(flag, value);
    else if (flag == "--single-submit")
      args.aio.single_submit = true;
    else if (flag == "--no-overlap-events")
      args.aio.overlap_events = false;
    else if (flag == "--transfer")
      args.transfer = parse_bytes(flag, value);
    else if (flag == "--buffers")
      args.buffers = static_cast<std::size_t>(parse_count(flag, value));
    else if (flag == "--rounds")
      args.rounds = parse_count(flag, value);
    else if (flag == "--no-checksums")
      args.checksums = false;
    else if (flag == "--pin-memory")
      args.pin_memory = true;
    else if (flag == "--json")
      args.json = true;
    else
      usage("unknown argument " + arg);
  }
  if (args.transfer == 0 || args.size % args.transfer != 0)
    usage("--size must be a multiple of --transfer");
  return args;
}

// Moves the whole file in transfers of one buffer each, keeping every buffer busy; seconds.
double stream(zero::SwapFile& file, zero::BounceBuffers& buffers, bool write) {
  std::vector<zero::Work> in_flight(buffers.count());
  const std::size_t transfers = file.size() / buffers.bytes();
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < transfers; ++i) {
    zero::Work& slot = in_flight[i % in_flight.size()];
    slot.wait(); // the buffer's previous transfer
    const std::size_t offset = i * buffers.bytes();
    slot = write ? file.write(offset, buffers[i % buffers.count()])
                 : file.read(offset, buffers[i % buffers.count()]);
  }
  zero::wait_all(in_flight);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void report(const Arguments& args, int round, const char* direction, double seconds,
            bool direct_io) {
  const double gbps = static_cast<double>(args.size) / seconds / 1e9;
  if (args.json)
    std::printf("{\"round\": %d, \"direction\": \"%s\", \"bytes\": %zu, \"seconds\": %.6f, "
                "\"GBps\": %.4f, \"block_size\": %zu, \"queue_depth\": %d, "
                "\"intra_op_parallelism\": %d, \"checksums\": %s, \"direct_io\": %s}\n",
                round, direction, args.size, seconds, gbps, args.aio.block_size,
                args.aio.queue_depth, args.aio.intra_op_parallelism,
                args.checksums ? "true" : "false", direct_io ? "true" : "false");
  else
    std::printf("round %d %-5s %zu bytes in %.3f s: %.3f GB/s\n", round, direction, args.size,
                seconds, gbps);
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  const Arguments args = parse_arguments(argc, argv);
  try {
    zero::NvmeTierOptions options;
    options.path = args.dir;
    options.pin_memory = args.pin_memory;
    options.verify_checksums = args.checksums;
    options.remove_stale = true; // a benchmark killed before has nothing worth keeping
    options.aio = args.aio;
    zero::NvmeTier tier(options, 0);
    zero::SwapFile file = tier.create_file("bench", args.size);
    zero::BounceBuffers buffers = tier.make_bounce_buffers(args.buffers, args.transfer);
    // Random bytes, as fio writes: a virtual disk that compresses or deduplicates must not make
    // one program look faster than the other.
    std::uint64_t state = 0x9E3779B97F4A7C15ull;
    for (std::size_t i = 0; i < buffers.count(); ++i)
      for (std::size_t b = 0; b < buffers.bytes(); b += sizeof state) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        std::memcpy(buffers[i].data() + b, &state, sizeof state);
      }
    if (!args.json)
      std::printf("%s: %s, block %zu, queue depth %d, %d I/O thread(s), checksums %s\n",
                  file.path().c_str(), tier.direct_io() ? "O_DIRECT" : "buffered",
                  args.aio.block_size, args.aio.queue_depth, args.aio.intra_op_parallelism,
                  args.checksums ? "on" : "off");
    for (int round = 0; round < args.rounds; ++round) {
      report(args, round, "write", stream(file, buffers, true), tier.direct_io());
      report(args, round, "read", stream(file, buffers, false), tier.direct_io());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero_bench_swap: %s\n", e.what());
    return 1;
  }
  return 0;
}
