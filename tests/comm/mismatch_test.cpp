// Ranks that call different collectives: every collective, with every way its calls can disagree
// (element count, per-rank counts, element type, reduction, root, the kind of call, which is what
// calls in a different order or a skipped call look like at the first call that differs), at a
// size Open MPI's own calls carry and at one the pipelines carry. Rank 0 calls one thing, the
// others another; every rank must throw a mismatch error that says what each rank called, and the
// communicator must keep working. CTest runs this with validation on and off, over shared memory
// and over the MPI transport (ZERO_VALIDATE, ZERO_MPI_TRANSPORT); without the signature checks each
// case hangs, fails inside MPI, or finishes with unlike data mixed.

#include "comm_test.hpp"

#include <zero/core/bfloat16.hpp>
#include <zero/core/half.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace {

using zero::MpiCommunicator;
using zero::ReduceOp;

MpiCommunicator& comm() {
  return zero::testing::world();
}

std::string str(std::size_t n) {
  return std::to_string(n);
}

std::size_t ranks() {
  return static_cast<std::size_t>(comm().size());
}

// Per-rank counts for blocks of different sizes: n, n + 1, n + 1, ... on rank 0 and n + 1, n,
// n + 1, ... on the others (the same total: only the lists differ).
std::vector<std::size_t> uneven_counts(bool odd, std::size_t n) {
  std::vector<std::size_t> counts(ranks(), n + 1);
  counts[odd ? 0 : 1] = n;
  return counts;
}

std::string counts_text(bool odd, std::size_t n) {
  return zero::CollectiveArgs::describe_counts(uneven_counts(odd, n));
}

struct Mismatch {
  std::string name;
  // Calls the collective as rank 0 (odd) or as the other ranks do, on about n elements, and waits.
  std::function<void(bool odd, std::size_t n)> call;
  // What the message must say rank 0 and rank 1 called.
  std::function<std::pair<std::string, std::string>(std::size_t n)> calls;
};

void PrintTo(const Mismatch& m, std::ostream* out) {
  *out << m.name;
}

template <class T>
std::vector<T> buffer(std::size_t n) {
  return std::vector<T>(n, T(1.0f));
}

std::vector<Mismatch> mismatches() {
  std::vector<Mismatch> m;
  // all_reduce
  m.push_back({"all_reduce.count",
               [](bool odd, std::size_t n) {
                 auto d = buffer<float>(odd ? n : n + 1);
                 comm().all_reduce(d, ReduceOp::sum).wait();
               },
               [](std::size_t n) {
                 return std::pair{"all_reduce(" + str(n) + " x float, sum)",
                                  "all_reduce(" + str(n + 1) + " x float, sum)"};
               }});
  m.push_back({"all_reduce.nothing_against_something",
               [](bool odd, std::size_t n) {
                 auto d = buffer<float>(odd ? 0 : n);
                 comm().all_reduce(d, ReduceOp::sum).wait();
               },
               [](std::size_t n) {
                 return std::pair{std::string("all_reduce(0 x float, sum)"),
                                  "all_reduce(" + str(n) + " x float, sum)"};
               }});
  m.push_back({"all_reduce.dtype_of_the_same_size",
               [](bool odd, std::size_t n) {
                 if (odd) {
                   auto d = buffer<float>(n);
                   comm().all_reduce(d, ReduceOp::sum).wait();
                 } else {
                   std::vector<std::int32_t> d(n, 1);
                   comm().all_reduce(d, ReduceOp::sum).wait();
                 }
               },
               [](std::size_t n) {
                 return std::pair{"all_reduce(" + str(n) + " x float, sum)",
                                  "all_reduce(" + str(n) + " x int32, sum)"};
               }});
  m.push_back({"all_reduce.half_against_bfloat16",
               [](bool odd, std::size_t n) {
                 if (odd) {
                   auto d = buffer<zero::half>(n);
                   comm().all_reduce(d, ReduceOp::sum).wait();
                 } else {
                   auto d = buffer<zero::bfloat16>(n);
                   comm().all_reduce(d, ReduceOp::sum).wait();
                 }
               },
               [](std::size_t n) {
                 return std::pair{"all_reduce(" + str(n) + " x half, sum)",
                                  "all_reduce(" + str(n) + " x bfloat16, sum)"};
               }});
  m.push_back({"all_reduce.op",
               [](bool odd, std::size_t n) {
                 auto d = buffer<float>(n);
                 comm().all_reduce(d, odd ? ReduceOp::max : ReduceOp::sum).wait();
               },
               [](std::size_t n) {
                 return std::pair{"all_reduce(" + str(n) + " x float, max)",
                                  "all_reduce(" + str(n) + " x float, sum)"};
               }});
  // reduce
  m.push_back({"reduce.count",
               [](bool odd, std::size_t n) {
                 auto d = buffer<float>(odd ? n : n + 1);
                 comm().reduce(d, ReduceOp::sum, 0).wait();
               },
               [](std::size_t n) {
                 return std::pair{"reduce(" + str(n) + " x float, sum, root 0)",
                                  "reduce(" + str(n + 1) + " x float, sum, root 0)"};
               }});
  m.push_back({"reduce.op",
               [](bool odd, std::size_t n) {
                 auto d = buffer<double>(n);
                 comm().reduce(d, odd ? ReduceOp::min : ReduceOp::sum, 0).wait();
               },
               [](std::size_t n) {
                 return std::pair{"reduce(" + str(n) + " x double, min, root 0)",
                                  "reduce(" + str(n) + " x double, sum, root 0)"};
               }});
  m.push_back({"reduce.root",
               [](bool odd, std::size_t n) {
                 auto d = buffer<float>(n);
                 comm().reduce(d, ReduceOp::sum, odd ? 0 : 1).wait();
               },
               [](std::size_t n) {
                 return std::pair{"reduce(" + str(n) + " x float, sum, root 0)",
                                  "reduce(" + str(n) + " x float, sum, root 1)"};
               }});
  // reduce_scatter, equal blocks and blocks of different sizes
  m.push_back({"reduce_scatter.count",
               [](bool odd, std::size_t n) {
                 auto d = buffer<float>((odd ? n : n + 1) * ranks());
                 comm().reduce_scatter(d, ReduceOp::sum).wait();
               },
               [](std::size_t n) {
                 return std::pair{"reduce_scatter(" + str(n) + " x float, sum)",
                                  "reduce_scatter(" + str(n + 1) + " x float, sum)"};
               }});
  m.push_back({"reduce_scatter.dtype_of_the_same_size",
               [](bool odd, std::size_t n) {
                 if (odd) {
                   auto d = buffer<float>(n * ranks());
                   comm().reduce_scatter(d, ReduceOp::sum).wait();
                 } else {
                   std::vector<std::int32_t> d(n * ranks(), 1);
                   comm().reduce_scatter(d, ReduceOp::sum).wait();
                 }
               },
               [](std::size_t n) {
                 return std::pair{"reduce_scatter(" + str(n) + " x float, sum)",
                                  "reduce_scatter(" + str(n) + " x int32, sum)"};
               }});
  m.push_back({"reduce_scatter.op",
               [](bool odd, std::size_t n) {
                 auto d = buffer<float>(n * ranks());
                 comm().reduce_scatter(d, odd ? ReduceOp::avg : ReduceOp::sum).wait();
               },
               [](std::size_t n) {
                 return std::pair{"reduce_scatter(" + str(n) + " x float, avg)",
                                  "reduce_scatter(" + str(n) + " x float, sum)"};
               }});
  m.push_back({"reduce_scatter.per_rank_counts",
               [](bool odd, std::size_t n) {
                 const auto counts = uneven_counts(odd, n);
                 auto in = buffer<float>(std::accumulate(counts.begin(), counts.end(), 0ul));
                 auto out = buffer<float>(counts[static_cast<std::size_t>(comm().rank())]);
                 comm().reduce_scatter(in, out, counts, ReduceOp::sum).wait();
               },
               [](std::size_t n) {
                 return std::pair{"reduce_scatter(" + counts_text(true, n) + " x float, sum)",
                                  "reduce_scatter(" + counts_text(false, n) + " x float, sum)"};
               }});
  // all_gather, equal blocks and blocks of different sizes
  m.push_back({"all_gather.count",
               [](bool odd, std::size_t n) {
                 auto d = buffer<float>((odd ? n : n + 1) * ranks());
                 comm().all_gather(d).wait();
               },
               [](std::size_t n) {
                 return std::pair{"all_gather(" + str(n) + " x float)",
                                  "all_gather(" + str(n + 1) + " x float)"};
               }});
  m.push_back({"all_gather.dtype_of_the_same_size",
               [](bool odd, std::size_t n) {
                 if (odd) {
                   auto d = buffer<float>(n * ranks());
                   comm().all_gather(d).wait();
                 } else {
                   std::vector<std::int32_t> d(n * ranks(), 1);
                   comm().all_gather(d).wait();
                 }
               },
               [](std::size_t n) {
                 return std::pair{"all_gather(" + str(n) + " x float)",
                                  "all_gather(" + str(n) + " x int32)"};
               }});
  m.push_back({"all_gather.per_rank_counts",
               [](bool odd, std::size_t n) {
                 const auto counts = uneven_counts(odd, n);
                 auto in = buffer<float>(counts[static_cast<std::size_t>(comm().rank())]);
                 auto out = buffer<float>(std::accumulate(counts.begin(), counts.end(), 0ul));
                 comm().all_gather(in, out, counts).wait();
               },
               [](std::size_t n) {
                 return std::pair{"all_gather(" + counts_text(true, n) + " x float)",
                                  "all_gather(" + counts_text(false, n) + " x float)"};
               }});
  // broadcast
  m.push_back({"broadcast.count",
               [](bool odd, std::size_t n) {
                 auto d = buffer<float>(odd ? n : n + 1);
                 comm().broadcast(d, 0).wait();
               },
               [](std::size_t n) {
                 return std::pair{"broadcast(" + str(n) + " x float, root 0)",
                                  "broadcast(" + str(n + 1) + " x float, root 0)"};
               }});
  m.push_back({"broadcast.dtype_of_the_same_size",
               [](bool odd, std::size_t n) {
                 if (odd) {
                   auto d = buffer<float>(n);
                   comm().broadcast(d, 0).wait();
                 } else {
                   std::vector<std::int32_t> d(n, 1);
                   comm().broadcast(d, 0).wait();
                 }
               },
               [](std::size_t n) {
                 return std::pair{"broadcast(" + str(n) + " x float, root 0)",
                                  "broadcast(" + str(n) + " x int32, root 0)"};
               }});
  m.push_back({"broadcast.root",
               [](bool odd, std::size_t n) {
                 auto d = buffer<float>(n);
                 comm().broadcast(d, odd ? 0 : 1).wait();
               },
               [](std::size_t n) {
                 return std::pair{"broadcast(" + str(n) + " x float, root 0)",
                                  "broadcast(" + str(n) + " x float, root 1)"};
               }});
  // Calls in a different order, and a skipped call: the first call that differs is a different
  // kind of collective.
  m.push_back({"order.all_gather_before_reduce_scatter",
               [](bool odd, std::size_t n) {
                 auto d = buffer<float>(n * ranks());
                 if (odd)
                   comm().all_gather(d).wait();
                 else
                   comm().reduce_scatter(d, ReduceOp::sum).wait();
               },
               [](std::size_t n) {
                 return std::pair{"all_gather(" + str(n) + " x float)",
                                  "reduce_scatter(" + str(n) + " x float, sum)"};
               }});
  m.push_back(
      {"order.barrier_before_all_reduce",
       [](bool odd, std::size_t n) {
         auto d = buffer<float>(n);
         if (odd)
           comm().barrier();
         else
           comm().all_reduce(d, ReduceOp::sum).wait();
       },
       [](std::size_t n) {
         return std::pair{std::string("barrier()"), "all_reduce(" + str(n) + " x float, sum)"};
       }});
  m.push_back({"skip.all_reduce_then_broadcast",
               [](bool odd, std::size_t n) {
                 auto d = buffer<float>(n);
                 if (odd)
                   comm().broadcast(d, 0).wait(); // rank 0 skipped the all_reduce
                 else
                   comm().all_reduce(d, ReduceOp::sum).wait();
               },
               [](std::size_t n) {
                 return std::pair{"broadcast(" + str(n) + " x float, root 0)",
                                  "all_reduce(" + str(n) + " x float, sum)"};
               }});
  return m;
}

// A size Open MPI's own calls carry on one node, and one past every hand-over threshold (the
// pipelines of both transports carry it, in many chunks).
const std::size_t sizes[] = {10, (std::size_t{4} << 20) / sizeof(float) + 3};

class Mismatched : public ::testing::TestWithParam<std::tuple<Mismatch, std::size_t>> {};

TEST_P(Mismatched, ThrowsOnEveryRankSayingWhatEachCalled) {
  const auto& [mismatch, n] = GetParam();
  const bool odd = comm().rank() == 0;
  const auto [first, second] = mismatch.calls(n);
  try {
    mismatch.call(odd, n);
    ADD_FAILURE() << "no mismatch error";
  } catch (const zero::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), zero::ErrorKind::mismatch) << what;
    const std::string needles[] = {"collective mismatch", "rank 0 called " + first,
                                   "rank 1 called " + second};
    for (const std::string& needle : needles)
      EXPECT_NE(what.find(needle), std::string::npos) << "no '" << needle << "' in: " << what;
  }
  // Every rank threw at the same call, and the communicator goes on working.
  std::vector<int> one{1};
  comm().all_reduce(one, ReduceOp::sum).wait();
  EXPECT_EQ(one[0], comm().size());
}

INSTANTIATE_TEST_SUITE_P(EveryCollective, Mismatched,
                         ::testing::Combine(::testing::ValuesIn(mismatches()),
                                            ::testing::ValuesIn(sizes)),
                         [](const auto& test) {
                           std::string name =
                               std::get<0>(test.param).name + "_" + str(std::get<1>(test.param));
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

// The settings CTest chose are the ones in force (else a run could pass on another path).
TEST(MismatchSettings, AreTheOnesCTestAskedFor) {
  if (const char* validate = std::getenv("ZERO_VALIDATE")) {
    EXPECT_EQ(comm().options().validate, std::string(validate) == "1");
  }
  if (const char* transport = std::getenv("ZERO_MPI_TRANSPORT")) {
    EXPECT_EQ(std::string(comm().transport()), transport);
  }
}

} // namespace
