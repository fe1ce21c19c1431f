#pragma once
// The model of the device store and reducer tests: five layers of a weight and a bias each, one of
// them empty, one large enough to be cut into several runs and buckets; and the three layouts they
// run on (in order, per-parameter chunks, unequal whole parameters).

#include <zero/shard.hpp>

#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

namespace zero::testing {

inline std::vector<zero::ParameterSpec> device_test_model(std::size_t large_layer) {
  std::vector<zero::ParameterSpec> params;
  const std::size_t sizes[][2] = {{3, 1}, {0, 0}, {1031, 17}, {large_layer, 3}, {64, 8}};
  for (int layer = 0; layer < 5; ++layer) {
    params.push_back({"w" + std::to_string(layer), sizes[layer][0], DType::float32, layer});
    params.push_back({"b" + std::to_string(layer), sizes[layer][1], DType::float32, layer});
  }
  return params;
}

// The engine tests' model (tests/engine): layers of awkward sizes, a weight and a bias each, for
// the optimizer store's and the engine's device tests.
inline std::vector<zero::ParameterSpec> engine_test_model() {
  const std::size_t shapes[][2] = {{12 * 7, 12}, {5, 1}, {40 * 33, 40}, {3, 3}, {257 * 8, 8}};
  std::vector<zero::ParameterSpec> params;
  for (int l = 0; l < 5; ++l) {
    params.push_back({"w" + std::to_string(l), shapes[l][0], DType::float32, l});
    params.push_back({"b" + std::to_string(l), shapes[l][1], DType::float32, l});
  }
  return params;
}

// The large layer's size for a case's bucket: buckets of a few elements cut the usual layer into
// thousands of collectives (seconds at three ranks sharing two cores or one GPU) and cover nothing
// that a tenth of it does not.
inline std::size_t large_layer_for(std::size_t bucket_elements, std::size_t usual) {
  return bucket_elements < 100 ? usual / 10 : usual;
}

// The partitioner of each layout, with the alignments the tests use.
template <class Partitioner>
Partitioner test_partitioner() {
  if constexpr (std::is_same_v<Partitioner, zero::FlatContiguous>)
    return {.alignment = 4};
  else if constexpr (std::is_same_v<Partitioner, zero::PerParameter>)
    return {.alignment = 2};
  else
    return {};
}

} // namespace zero::testing
