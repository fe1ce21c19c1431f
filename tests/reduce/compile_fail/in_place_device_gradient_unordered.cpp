// Must not compile: stage 0's in-place all-reduce of a gradient in device memory with a
// communicator that does not start after the caller's stream (nothing else would order the
// all-reduce after backward's writes). Registered with the static_assert's text in CMakeLists.txt.

#include "unordered_device_communicator.hpp"

#include <zero/core/host_stream_space.hpp>
#include <zero/reduce/in_place_all_reduce.hpp>

int main() {
  return sizeof(zero::InPlaceAllReduce<zero::testing::UnorderedDeviceCommunicator, float,
                                       zero::DeviceTwinSpace>) > 0
             ? 0
             : 1;
}
