#pragma once
// NvmeTier: the disk below host memory (ZeRO-Infinity), one per store and rank. It owns the
// rank's swap directory `<path>/zero_swap/[<owner>/]rank<r>/` (locked for its lifetime), the files
// it creates there, and the I/O threads that move data between them and host memory through
// io_uring with O_DIRECT, so that the page cache neither doubles the memory used nor slows the
// transfers. The engine keeps tensors in SwapFiles and moves them through BounceBuffers.
//
//   zero::NvmeTier tier({.path = "/local_nvme", .aio = AioOptions::from_config(config)}, rank);
//   zero::SwapFile master = tier.create_file("optimizer.master", bytes);
//   zero::Work w = master.write(0, buffers[0]); // runs while the caller computes
//   w.wait();                                   // rethrows an I/O error
//
// The destructor waits for transfers still in flight and removes the swap files and the
// directory, also while an exception unwinds; after SIGKILL they stay, and the next tier on that
// directory refuses them (or deletes them, with remove_stale). A tier is used from one thread;
// several tiers may live in one process, on different paths, owners or ranks.

#include "zero/core/error.hpp"
#include "zero/nvme/aio_options.hpp"
#include "zero/nvme/bounce_buffers.hpp"
#include "zero/nvme/detail/io_engine.hpp"
#include "zero/nvme/detail/swap_directory.hpp"
#include "zero/nvme/detail/swap_file_state.hpp"
#include "zero/nvme/io_stats.hpp"
#include "zero/nvme/swap_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zero {

struct NvmeTierOptions {
  std::filesystem::path path; // DeepSpeed's nvme_path: a directory that must exist
  // A sub-directory of zero_swap/ for this tier's files, so that several tiers (the optimizer
  // store's and the parameters') can share one nvme_path and rank; empty: none.
  std::string owner{};
  bool pin_memory = false; // lock the bounce buffers in RAM (mlock)
  // Checksum every 4096-byte unit written and check it when read back (1/1024 of the swapped
  // bytes in host memory): a disk or a process that alters a swap file is an error, not noise.
  bool verify_checksums = true;
  bool remove_stale = false; // delete swap files left by a run that died, instead of refusing
  // What the caller calls remove_stale, for the error that refuses stale files.
  std::string remove_stale_name = "remove_stale";
  AioOptions aio{};
};

class NvmeTier {
 public:
  NvmeTier(NvmeTierOptions options, int rank) : options_(std::move(options)) {
    options_.aio.validate();
    require(!options_.path.empty(), "NvmeTier: the path (DeepSpeed's nvme_path) is empty");
    directory_ = std::make_unique<detail::SwapDirectory>(
        options_.path, options_.owner, rank, options_.remove_stale, options_.remove_stale_name);
    direct_io_ = directory_->accepts_direct_io();
    if (!direct_io_)
      detail::log_error(directory_->path().string() +
                        " does not support O_DIRECT (tmpfs?); the NVMe tier falls back to "
                        "buffered I/O there");
    engine_ = std::make_shared<detail::IoEngine>(options_.aio);
  }

  NvmeTier(NvmeTier&& other) noexcept = default;
  NvmeTier& operator=(NvmeTier&& other) noexcept {
    if (this != &other) {
      close();
      options_ = std::move(other.options_);
      directory_ = std::move(other.directory_);
      direct_io_ = other.direct_io_;
      engine_ = std::move(other.engine_);
      files_ = std::move(other.files_);
    }
    return *this;
  }
  NvmeTier(const NvmeTier&) = delete;
  NvmeTier& operator=(const NvmeTier&) = delete;
  ~NvmeTier() { close(); }

  // A new swap file `<directory>/<name>.swp` of `bytes` bytes (a multiple of 4096), allocated on
  // disk now: a disk too small fails here, naming the bytes needed and free.
  SwapFile create_file(const std::string& name, std::size_t bytes) {
    require(directory_ != nullptr, "NvmeTier::create_file: this tier was moved from");
    const bool plain_name = !name.empty() && name != "." && name != ".." &&
                            name.find_first_of(std::string("/\0", 2)) == std::string::npos;
    require(plain_name,
            "NvmeTier::create_file: \"" + name + "\" is not a file name (non-empty, without '/')");
    require(bytes > 0 && bytes % SwapFile::alignment == 0,
            "NvmeTier::create_file(\"" + name + "\"): the size must be a positive multiple of " +
                std::to_string(SwapFile::alignment) + ", got " + std::to_string(bytes));
    const std::string file_name = name + detail::swap_file_suffix;
    directory_->record(file_name); // before it exists: remove_stale then knows it as ours
    auto state = detail::create_swap_file(directory_->directory(), file_name, bytes, direct_io_,
                                          options_.verify_checksums);
    std::erase_if(files_, [](const auto& file) { return file.expired(); });
    files_.push_back(state);
    return SwapFile(std::move(state), engine_);
  }

  // Buffers sized for this tier's transfers, locked in RAM when the options ask for pin_memory.
  BounceBuffers make_bounce_buffers(std::size_t count, std::size_t bytes_each) const {
    return BounceBuffers(count, bytes_each, options_.pin_memory);
  }

  bool direct_io() const noexcept { return direct_io_; } // false: O_DIRECT refused, buffered I/O
  const std::filesystem::path& directory() const {
    require(directory_ != nullptr, "NvmeTier::directory: this tier was moved from");
    return directory_->path();
  }
  const NvmeTierOptions& options() const noexcept { return options_; }
  IoStats stats() const { return engine_ ? engine_->stats() : IoStats{}; }

 private:
  // Lets the transfers in flight finish, then removes the files and the directory.
  void close() noexcept {
    if (engine_) engine_->shutdown();
    for (const auto& file : files_)
      if (auto state = file.lock()) state->remove();
    files_.clear();
    directory_.reset();
  }

  NvmeTierOptions options_;
  std::unique_ptr<detail::SwapDirectory> directory_;
  bool direct_io_ = false;
  std::shared_ptr<detail::IoEngine> engine_;
  std::vector<std::weak_ptr<detail::SwapFileState>> files_;
};

} // namespace zero
