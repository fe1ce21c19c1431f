#pragma once
// The token stream: the bytes of a file, each byte a token. The global batch of step s is `batch`
// sequences; sequence b starts at o = ((s * batch + b) * seq) mod (length - seq - 1), its inputs
// are bytes [o, o + seq) and its targets [o + 1, o + seq + 1). Rank r of N takes the r-th
// contiguous 1/N of the sequences (reference.py's batch() is the same rule in Python).

#include <zero/core/error.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace train_gpt {

struct Tokens {
  std::vector<std::uint8_t> bytes;

  static Tokens from_file(const std::string& path, std::size_t seq) {
    std::ifstream in(path, std::ios::binary);
    zero::require(bool(in), "--data " + path + ": cannot open", zero::ErrorKind::io);
    Tokens t;
    t.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    zero::require(t.bytes.size() > seq + 1,
                  "--data " + path + ": " + std::to_string(t.bytes.size()) +
                      " bytes, too few for sequences of " + std::to_string(seq) + " tokens");
    return t;
  }

  // Inputs and targets ([sequences, seq] each) of sequences [first, first + count) of step s.
  void batch(int step, std::size_t global_batch, std::size_t seq, std::size_t first,
             std::size_t count, std::uint8_t* inputs, std::uint8_t* targets) const {
    const std::size_t span = bytes.size() - seq - 1;
    for (std::size_t b = 0; b < count; ++b) {
      const std::size_t o = ((std::size_t(step) * global_batch + first + b) * seq) % span;
      std::copy_n(bytes.data() + o, seq, inputs + b * seq);
      std::copy_n(bytes.data() + o + 1, seq, targets + b * seq);
    }
  }
};

} // namespace train_gpt
