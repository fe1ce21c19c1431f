#pragma once
// How a test binary tells CTest what happened, so that no failure reads as "Skipped" and no skip
// reads as "Passed". Every main of zero's tests ends with exit_status():
//  - a failed test (on any rank): 1;
//  - no test ran (a filter that matches nothing): 1, naming the filter;
//  - every test that ran skipped: 77, which zero's CTest helpers register as SKIP_RETURN_CODE, so
//    the summary lists the binary under "did not run", with the reasons in its output;
//  - some tests passed and others skipped because the machine cannot do what they need (mount a
//    file system, lock memory): 1, naming them. CTest could only say "Passed" for such a run, so
//    tests that may skip run as a CTest test of their own (zero_add_test(... CAN_SKIP ...)),
//    where they skip together or not at all;
//  - a skip that says the test does not apply to this run's shape (`not_applicable`: one rank,
//    one node), which the same binary's other registrations run, is listed and allowed beside
//    passes.

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace zero::testing {

// The first words of a skip that is about the run's shape, not the machine:
//   GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
inline constexpr const char* not_applicable = "not applicable to this run: ";

// Counts the outcomes of the tests that ran, with each skip's reason.
class TestOutcome : public ::testing::EmptyTestEventListener {
 public:
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const ::testing::TestResult& result = *info.result();
    const std::string name = std::string(info.test_suite_name()) + "." + info.name();
    if (result.Failed()) {
      ++failed_;
    } else if (result.Skipped()) {
      std::string reason;
      for (int i = 0; i < result.total_part_count(); ++i)
        if (result.GetTestPartResult(i).skipped()) reason = result.GetTestPartResult(i).message();
      const bool shape = reason.find(not_applicable) != std::string::npos;
      (shape ? shape_skips_ : machine_skips_).push_back(name + " (" + reason + ")");
    } else {
      ++passed_;
    }
  }

  enum class Verdict { passed = 0, all_skipped = 1, failed = 2 };

  // The local verdict; prints why a run that looks like a pass is not one.
  Verdict verdict(int gtest_status) const {
    const std::size_t skipped = machine_skips_.size() + shape_skips_.size();
    if (gtest_status != 0 || failed_ > 0) return Verdict::failed;
    if (passed_ == 0 && skipped == 0) {
      std::fprintf(stderr, "zero tests: no test ran (--gtest_filter=%s matched nothing)\n",
                   std::string(GTEST_FLAG_GET(filter)).c_str());
      return Verdict::failed;
    }
    if (passed_ == 0) return Verdict::all_skipped;
    if (!machine_skips_.empty()) {
      std::fprintf(stderr,
                   "zero tests: %zu test(s) skipped in a run whose other tests passed, which CTest "
                   "would report as passed; register them as a CTest test of their own "
                   "(zero_add_test/zero_add_mpi_test CAN_SKIP):\n",
                   machine_skips_.size());
      for (const std::string& skip : machine_skips_)
        std::fprintf(stderr, "  %s\n", skip.c_str());
      return Verdict::failed;
    }
    return Verdict::passed;
  }

  void print_shape_skips() const {
    for (const std::string& skip : shape_skips_)
      std::printf("zero tests: skipped %s\n", skip.c_str());
  }

 private:
  int passed_ = 0;
  int failed_ = 0;
  std::vector<std::string> machine_skips_;
  std::vector<std::string> shape_skips_;
};

inline int exit_status(TestOutcome::Verdict verdict) {
  switch (verdict) {
  case TestOutcome::Verdict::passed:
    return 0;
  case TestOutcome::Verdict::all_skipped:
    return 77;
  case TestOutcome::Verdict::failed:
    return 1;
  }
  return 1;
}

// Installs the listener (owned by GoogleTest) and returns it.
inline TestOutcome& record_outcomes() {
  auto* outcome = new TestOutcome;
  ::testing::UnitTest::GetInstance()->listeners().Append(outcome);
  return *outcome;
}

} // namespace zero::testing
