// GoogleTest main for tests that run on several MPI ranks: every rank runs every test, rank 0
// prints the usual report, other ranks print only their failures (prefixed by the rank), and after
// each test the ranks agree on its outcome so that a failure on any rank is reported by rank 0 and
// fails the run. The exit status follows test_outcome.hpp, agreed by all ranks: 77 only when every
// test skipped on every rank. An MPI handle left allocated once the binary's communicators are
// released (mpi_handle_ledger.hpp) fails the run too.

#include "comm_test.hpp"
#include "mpi_handle_ledger.hpp"
#include "test_outcome.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

namespace {

class RankReporter : public testing::EmptyTestEventListener {
 public:
  RankReporter(int rank, int size) : rank_(rank), size_(size) {}

  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (rank_ == 0 || !result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

  void OnTestEnd(const testing::TestInfo& info) override {
    const int failed = info.result()->Failed() ? 1 : 0;
    std::vector<int> all(static_cast<std::size_t>(size_));
    MPI_Allgather(&failed, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::string ranks;
    for (int r = 0; r < size_; ++r)
      if (all[std::size_t(r)]) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    if (!ranks.empty()) {
      any_failed_ = true;
      if (rank_ == 0)
        std::fprintf(stderr, "[  FAILED  ] %s.%s on rank(s) %s of %d\n", info.test_suite_name(),
                     info.name(), ranks.c_str(), size_);
    }
  }

  bool any_failed() const { return any_failed_; }

 private:
  int rank_;
  int size_;
  bool any_failed_ = false;
};

} // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  zero::initialize_mpi(&argc, &argv);
  const zero::testing::MpiHandleLedger ledger;
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  auto* reporter = new RankReporter(rank, size);
  listeners.Append(reporter);
  const zero::testing::TestOutcome& outcome = zero::testing::record_outcomes();

  const int local = RUN_ALL_TESTS();
  using Verdict = zero::testing::TestOutcome::Verdict;
  Verdict verdict = reporter->any_failed() ? Verdict::failed : outcome.verdict(local);
  zero::testing::release_world();
  if (ledger.report_left_allocated(rank) > 0) verdict = Verdict::failed;
  // Ranks that disagree on "all skipped" (one skipped everything, another passed) fail too.
  int mine[2] = {int(verdict), -int(verdict)}; // max, and -min
  MPI_Allreduce(MPI_IN_PLACE, mine, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  const int worst = mine[0], best = -mine[1];
  verdict = worst == best ? Verdict(worst) : Verdict::failed;
  if (rank == 0) {
    outcome.print_shape_skips();
    if (worst == int(Verdict::failed))
      std::fprintf(stderr, "zero tests: FAILED on at least one of %d ranks\n", size);
    else if (worst != best)
      std::fprintf(stderr, "zero tests: every test skipped on some ranks and not on others\n");
  }
  return zero::testing::exit_status(verdict);
}
