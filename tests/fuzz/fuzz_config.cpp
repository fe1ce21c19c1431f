// Fuzz target: the DeepSpeed JSON config reader (zero::config::from_json_string), as the
// estimator calls it (features that are not built yet accepted) and then as a training run checks
// it (require_built). Bad text must be a zero::Error that says what is wrong.

#include <zero/config/json.hpp>

#include "fuzz_target.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  zero::config::ParseOptions options;
  options.unbuilt = zero::config::UnbuiltFeatures::accept;
  options.warn = [](std::string_view) {};
  options.source = "fuzz.json";
  try {
    const zero::config::Config config = zero::config::from_json_string(text, options);
    zero::config::require_built(config);
  } catch (const zero::Error& e) {
    zero_fuzz::expected(e);
  }
  return 0;
}
