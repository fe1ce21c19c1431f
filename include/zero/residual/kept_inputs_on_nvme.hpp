#pragma once
// KeptInputsOnNvme: a checkpointed loop's kept segment inputs on the NVMe tier (ZeRO-Infinity's
// disk, through io_uring with O_DIRECT and checksums: nvme/nvme_tier.hpp). Each input has a
// slot in one swap file. keep() copies the input into one of two staging buffers and starts its
// write, so forward runs on while the previous one is written; backward prefetches the input it
// wants next into one of two read buffers while the current segment computes. Host memory: four
// buffers of one input each, whatever the number of checkpoints.
//
//   zero::KeptInputsOnNvme tier({.path = "/local_nvme", .owner = "activations"}, rank);
//   zero::ActivationCheckpointing options{.number_checkpoints = 8, .kept_inputs = &tier};

#include "zero/core/error.hpp"
#include "zero/nvme/nvme_tier.hpp"
#include "zero/residual/kept_input_tier.hpp"

#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

namespace zero {

class KeptInputsOnNvme final : public KeptInputTier {
 public:
  KeptInputsOnNvme(NvmeTierOptions options, int rank) : tier_(std::move(options), rank) {}
  ~KeptInputsOnNvme() override {
    for (Work& w : writes_)
      detail::wait_quietly(w);
    for (Read& r : reads_)
      detail::wait_quietly(r.work);
  }

  void reserve(std::size_t count, std::size_t elements) override {
    const std::size_t bytes = round_up(elements * sizeof(float));
    if (count <= count_ && bytes == slot_bytes_) return;
    synchronize();
    slot_bytes_ = bytes;
    count_ = count;
    elements_ = elements;
    file_ = SwapFile{}; // its name is taken until it is gone
    file_ = tier_.create_file("kept_inputs", count * bytes);
    writing_ = tier_.make_bounce_buffers(2, bytes);
    reading_ = tier_.make_bounce_buffers(2, bytes);
    reads_ = {};
  }

  void keep(std::size_t i, View<const float> input) override {
    check(i, input.size());
    const std::size_t b = next_write_++ % 2;
    writes_[b].wait(); // the staging buffer's last write
    std::memcpy(writing_[b].data(), input.data(), input.size_bytes());
    writes_[b] = file_.write(i * slot_bytes_, writing_[b]);
  }

  void prefetch(std::size_t i) override {
    require(i < count_, "KeptInputsOnNvme: input " + std::to_string(i) + " was not reserved");
    if (find(i)) return;
    for (Work& w : writes_)
      w.wait(); // the input may still be on its way to the disk
    Read& r = reads_[next_read_++ % 2];
    r.work.wait();
    r.work = file_.read(i * slot_bytes_, reading_[std::size_t(&r - reads_.data())]);
    r.input = i;
  }

  void restore(std::size_t i, View<float> into) override {
    check(i, into.size());
    if (!find(i)) prefetch(i);
    Read& r = *find(i);
    r.work.wait(); // rethrows an I/O or checksum error
    std::memcpy(into.data(), reading_[std::size_t(&r - reads_.data())].data(), into.size_bytes());
    r.input.reset();
  }

  void synchronize() override {
    for (Work& w : writes_)
      w.wait();
    for (Read& r : reads_)
      r.work.wait();
  }

  std::size_t buffer_bytes() const override { return 4 * slot_bytes_; }
  std::size_t bytes_written() const override { return tier_.stats().bytes_written; }
  std::size_t bytes_read() const override { return tier_.stats().bytes_read; }
  const NvmeTier& tier() const noexcept { return tier_; }

 private:
  struct Read {
    Work work;
    std::optional<std::size_t> input;
  };

  static std::size_t round_up(std::size_t bytes) {
    constexpr std::size_t unit = SwapFile::alignment;
    return (bytes + unit - 1) / unit * unit;
  }
  void check(std::size_t i, std::size_t elements) const {
    require(i < count_, "KeptInputsOnNvme: input " + std::to_string(i) + " was not reserved");
    require(elements == elements_, "KeptInputsOnNvme: input " + std::to_string(i) + " has " +
                                       std::to_string(elements) + " elements, the slots " +
                                       std::to_string(elements_));
  }
  Read* find(std::size_t i) {
    for (Read& r : reads_)
      if (r.input == i) return &r;
    return nullptr;
  }

  NvmeTier tier_;
  SwapFile file_;
  BounceBuffers writing_, reading_;
  std::array<Work, 2> writes_;
  std::array<Read, 2> reads_;
  std::size_t count_ = 0, elements_ = 0, slot_bytes_ = 0, next_write_ = 0, next_read_ = 0;
};

} // namespace zero
