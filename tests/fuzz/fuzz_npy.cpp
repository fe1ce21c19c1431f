// Fuzz target: the examples' .npy reader (npy::read, what npy::load reads a file with), and the
// check that the values are finite that train_mlp and train_gpt run on what they load. A bad
// file must be a zero::Error naming it, and a header may not make it allocate more than the
// file holds.

#include "common/finite_values.hpp"
#include "fuzz_target.hpp"
#include "train_mlp/npy.hpp"

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const npy::Array a = npy::read(in, "fuzz.npy");
    zero_fuzz::promise(a.shape.size() == 1 || a.shape.size() == 2, "a 1-D or 2-D array");
    zero_fuzz::promise(a.data.size() == a.rows() * a.cols() &&
                           (a.rows() == 0 || a.data.size() / a.rows() == a.cols()),
                       "as many values as its shape says");
    examples::require_finite("fuzz.npy", a.data, a.cols());
  } catch (const zero::Error& e) {
    zero_fuzz::expected(e);
  }
  return 0;
}
