// CommOptions::from_environment: every documented ZERO_* setting of the host communicators is read
// (ZERO_NATIVE_GATHERS and ZERO_NATIVE_BELOW_BYTES were documented for a long time and never read),
// and a bad value is refused naming the variable.

#include "zero/comm/options.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

class Environment {
 public:
  Environment(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~Environment() { unsetenv(name_); }
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

 private:
  const char* name_;
};

TEST(CommOptions, DefaultsSendOnlyLargeGathersToOpenMpi) {
  const zero::CommOptions o;
  EXPECT_TRUE(o.native_gathers);
  EXPECT_EQ(o.native_gathers_from_bytes, std::size_t{1} << 20);
  EXPECT_EQ(o.gathers_to_mpi_from_bytes(), std::size_t{1} << 20);
  EXPECT_EQ(o.native_below_bytes, 0u);
  EXPECT_FALSE(o.native_when_oversubscribed);
}

TEST(CommOptions, ReadsEveryNativeSetting) {
  const Environment gathers("ZERO_NATIVE_GATHERS", "0");
  const Environment from("ZERO_NATIVE_GATHERS_FROM_BYTES", "4096");
  const Environment below("ZERO_NATIVE_BELOW_BYTES", "65536");
  const Environment oversubscribed("ZERO_NATIVE_WHEN_OVERSUBSCRIBED", "1");
  const zero::CommOptions o = zero::CommOptions::from_environment();
  EXPECT_FALSE(o.native_gathers);
  EXPECT_EQ(o.native_gathers_from_bytes, 4096u);
  EXPECT_EQ(o.gathers_to_mpi_from_bytes(), SIZE_MAX) << "ZERO_NATIVE_GATHERS=0 keeps every gather";
  EXPECT_EQ(o.native_below_bytes, 65536u);
  EXPECT_TRUE(o.native_when_oversubscribed);
}

TEST(CommOptions, RefusesABadValueNamingTheVariable) {
  const Environment bad("ZERO_NATIVE_GATHERS", "sometimes");
  try {
    (void)zero::CommOptions::from_environment();
    FAIL() << "expected an error";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ZERO_NATIVE_GATHERS"), std::string::npos) << e.what();
  }
}

} // namespace
