// A fuzz target that is broken on purpose: it reads one byte past its input whenever the input
// starts with "crash", which AddressSanitizer reports, and its stored corpus holds such an input.
// So libFuzzer stops while it reads the corpus, before its INITED line, as it would for a reader
// that a stored input still breaks. tools/zero-fuzz must fail on it: tools/zero-test runs
// `tools/zero-fuzz --targets-dir tests/fuzz/selftest` and requires exit status 1 and a CRASHED
// line. It lives out of tests/fuzz/fuzz_*.cpp so that no real run ever fuzzes it.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const char marker[] = "crash";
  const std::size_t marker_size = sizeof marker - 1;
  if (size < marker_size || std::memcmp(data, marker, marker_size) != 0) return 0;
  const std::vector<std::uint8_t> input(data, data + size);
  volatile std::uint8_t past_the_end = input.data()[size]; // the deliberate heap overflow
  (void)past_the_end;
  return 0;
}
