// Buffer, View, DType and Work: ownership, alignment, conversions between views, errors naming
// what is wrong, and the rule that a Work handle must be waited for.

#include <zero/comm/self_communicator.hpp>
#include <zero/core/buffer.hpp>
#include <zero/core/dtype.hpp>
#include <zero/core/view.hpp>
#include <zero/core/work.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace {

TEST(Buffer, IsAlignedZeroedAndOwning) {
  zero::Buffer<float> b(1000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % zero::buffer_alignment, 0u);
  for (float x : b)
    EXPECT_EQ(x, 0.0f);
  zero::Buffer<double> filled(3, 2.5);
  EXPECT_EQ(filled[2], 2.5);
  zero::Buffer<int> empty(0);
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(Buffer, MovesAndNeverCopiesImplicitly) {
  static_assert(!std::is_copy_constructible_v<zero::Buffer<float>>);
  static_assert(!std::is_copy_assignable_v<zero::Buffer<float>>);
  static_assert(std::is_nothrow_move_constructible_v<zero::Buffer<float>>);
  zero::Buffer<int> a(4, 7);
  const int* storage = a.data();
  zero::Buffer<int> b = std::move(a);
  EXPECT_EQ(b.data(), storage);
  EXPECT_EQ(a.size(), 0u);
  zero::Buffer<int> c = b.clone();
  EXPECT_NE(c.data(), b.data());
  EXPECT_EQ(c[3], 7);
  c = std::move(b);
  EXPECT_EQ(c.data(), storage);
}

TEST(Buffer, PinnedHostIsHostAccessible) {
  zero::Buffer<float, zero::pinned_host> p(16, 1.0f);
  EXPECT_EQ(p[15], 1.0f);
  static_assert(zero::HostAccessibleSpace<zero::pinned_host>);
  static_assert(!zero::HostAccessibleSpace<zero::cuda>);
}

TEST(View, ConvertsFromContiguousHostRanges) {
  std::vector<float> v{1, 2, 3, 4};
  zero::View<float> view = v;
  EXPECT_EQ(view.size(), 4u);
  zero::View<const float> constant = view;
  EXPECT_EQ(constant[3], 4.0f);
  auto deduced = zero::view(v);
  static_assert(std::is_same_v<decltype(deduced), zero::View<float, zero::host>>);
  const std::vector<float>& cv = v;
  static_assert(std::is_same_v<decltype(zero::view(cv)), zero::View<const float, zero::host>>);
  zero::Buffer<int> b(5, 1);
  zero::View<int> from_buffer = b;
  EXPECT_EQ(from_buffer.data(), b.data());
  std::span<float> s = view.span();
  EXPECT_EQ(s.size(), 4u);
  // Device memory is not a host range.
  static_assert(!std::is_constructible_v<zero::View<float, zero::cuda>, std::vector<float>&>);
  static_assert(!std::is_constructible_v<zero::View<float>, const std::vector<float>&>);
}

TEST(View, SubviewChecksItsBounds) {
  std::vector<int> v(10);
  zero::View<int> view = v;
  EXPECT_EQ(view.subview(8, 2).data(), v.data() + 8);
  EXPECT_EQ(view.subview(10, 0).size(), 0u);
  try {
    (void)view.subview(8, 3);
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("subview [8, 11) out of a view of 10"), std::string::npos)
        << e.what();
  }
}

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(zero::dtype_of<zero::half>, zero::DType::float16);
  EXPECT_EQ(zero::size_of(zero::DType::bfloat16), 2u);
  EXPECT_EQ(zero::parse_dtype("bf16"), zero::DType::bfloat16);
  EXPECT_EQ(zero::parse_dtype("float"), zero::DType::float32);
  EXPECT_THROW(zero::parse_dtype("fp8"), zero::Error);
  static_assert(zero::Element<zero::bfloat16>);
  static_assert(!zero::Element<char>);
  static_assert(std::is_same_v<zero::accumulate_t<zero::half>, float>);
}

TEST(Work, EmptyHandleIsComplete) {
  zero::Work w;
  EXPECT_FALSE(w.pending());
  EXPECT_TRUE(w.test());
  w.wait();
}

TEST(Work, WaitEmptiesTheHandle) {
  zero::SelfCommunicator self;
  std::vector<float> v(3, 1.0f);
  zero::Work w = self.all_reduce(v, zero::ReduceOp::sum);
  EXPECT_TRUE(w.pending());
  w.wait();
  EXPECT_FALSE(w.pending());
}

TEST(WorkDeathTest, DroppingAnUnwaitedHandleTerminatesWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  zero::SelfCommunicator self;
  std::vector<float> v(3, 1.0f);
  EXPECT_DEATH(
      {
        zero::Work w = self.all_reduce(v, zero::ReduceOp::sum);
        (void)w;
      },
      "Work for all_reduce\\(3 x float, sum\\) was destroyed without wait\\(\\)");
}

TEST(WorkDeathTest, OverwritingAnUnwaitedHandleTerminates) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  zero::SelfCommunicator self;
  std::vector<int> v(2);
  EXPECT_DEATH(
      {
        zero::Work w = self.broadcast(v, 0);
        w = self.broadcast(v, 0);
        w.wait();
      },
      "Work for broadcast\\(2 x int32, root 0\\) was destroyed without wait\\(\\)");
}

TEST(Work, UnwindingOnlyWaits) {
  zero::SelfCommunicator self;
  std::vector<int> v(2);
  try {
    zero::Work w = self.broadcast(v, 0);
    throw std::runtime_error("unrelated");
  } catch (const std::runtime_error&) {
    SUCCEED() << "no termination while unwinding";
  }
}

TEST(SelfCommunicator, IsACommunicatorOfOne) {
  zero::SelfCommunicator self;
  EXPECT_EQ(self.size(), 1);
  std::vector<zero::half> in{zero::half(1.5f)}, out(1);
  self.all_reduce(in, out, zero::ReduceOp::avg).wait();
  EXPECT_EQ(out[0].bits, in[0].bits);
  std::vector<std::int32_t> ints{7};
  self.all_reduce(ints, zero::ReduceOp::avg).wait();
  EXPECT_EQ(ints[0], 7);
  self.barrier();
  EXPECT_EQ(self.split(3, 1).size(), 1);
}

} // namespace
