#pragma once
// zero::nvme: the NVMe tier as a place where model states can live (ZeRO-Infinity). It is not a
// memory space: its bytes are not addressable, they move through bounce buffers in host memory
// (see nvme/). A placement names it like a memory space; a ShardedTensor kept on it is read and
// written a layer block at a time. The object carries the tier (directory, I/O thread) its files
// go to, so that a storage policy holding it can create them.

#include "zero/core/memory_space.hpp"

#include <concepts>
#include <string>

namespace zero {

class NvmeTier; // nvme/nvme_tier.hpp

struct nvme {
  using storage_space = nvme;
  static constexpr bool host_accessible = false;
  static constexpr const char* space_name = "nvme";
  NvmeTier* tier = nullptr;    // where the files go
  std::string name = "tensor"; // of the file, within the tier's directory
};

// Where a model state can live: a memory space, or the NVMe tier.
template <class S>
concept StorageSpace = MemorySpace<S> || std::same_as<S, nvme>;

template <class T, MemorySpace Space>
class Buffer;
template <class T>
class NvmeSlice; // nvme/nvme_slice.hpp: include it to keep a ShardedTensor on NVMe

namespace detail {
// What holds one rank's slice of a ShardedTensor in each place.
template <class T, class Space>
struct slice_storage {
  using type = Buffer<T, Space>;
};
template <class T>
struct slice_storage<T, nvme> {
  using type = NvmeSlice<T>;
};
} // namespace detail

} // namespace zero
