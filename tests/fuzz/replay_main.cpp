// The main of a fuzz target where libFuzzer is not linked in (g++, or ZERO_BUILD_FUZZERS off):
// runs LLVMFuzzerTestOneInput once on every file named on the command line and on every file in
// the directories named there (their corpus and the regressions), so that the normal test suite
// replays them. Arguments that start with '-' are libFuzzer's flags and are ignored, so that one
// command line serves both builds. An input that escapes its target with an exception, or crashes
// it, fails the run; the terminate handler names the input.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

std::string current_input; // for the terminate handler

std::vector<std::filesystem::path> inputs_in(const std::filesystem::path& path) {
  if (!std::filesystem::is_directory(path)) return {path};
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(path))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

} // namespace

int main(int argc, char** argv) {
  std::set_terminate([] {
    std::fprintf(stderr, "replay: terminated while running %s\n", current_input.c_str());
    if (const std::exception_ptr error = std::current_exception()) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "replay: uncaught exception: %s\n", e.what());
      } catch (...) {
        std::fprintf(stderr, "replay: uncaught exception of an unknown type\n");
      }
    }
    std::abort();
  });
  std::size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    if (!std::filesystem::exists(argv[i])) {
      std::fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      return 2;
    }
    for (const std::filesystem::path& file : inputs_in(argv[i])) {
      current_input = file.string();
      std::ifstream in(file, std::ios::binary);
      const std::vector<char> bytes{std::istreambuf_iterator<char>(in),
                                    std::istreambuf_iterator<char>()};
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      ++replayed;
    }
  }
  std::printf("replay: %zu inputs, none escaped or crashed\n", replayed);
  return 0;
}
