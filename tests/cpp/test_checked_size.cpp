// Checked size arithmetic (issue 19 §3): the helpers against exact 128-bit
// arithmetic on random operands, and the allocations and tensor views that use them
// refusing sizes that used to wrap (raw_alloc(2**64-1) returned a pointer to a tiny block).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "xpuruntime/checked.h"
#include "xpuruntime/error.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/tensor.h"

namespace xpuruntime {
namespace {

using i128 = __int128;
using u128 = unsigned __int128;

TEST(CheckedSize, MulAndAddAgreeWithExactArithmetic) {
  std::mt19937_64 rng(19);
  auto pick = [&]() -> uint64_t {
    // Mix of small, near-boundary and random values, where wraps happen.
    switch (rng() % 4) {
      case 0:
        return rng() % 1000;
      case 1:
        return std::numeric_limits<uint64_t>::max() - rng() % 1000;
      case 2:
        return uint64_t{1} << (rng() % 64);
      default:
        return rng();
    }
  };
  for (int i = 0; i < 20000; ++i) {
    uint64_t a = pick(), b = pick();
    u128 p = static_cast<u128>(a) * b, s = static_cast<u128>(a) + b;
    auto m = try_mul(a, b);
    auto d = try_add(a, b);
    ASSERT_EQ(m.has_value(), p <= std::numeric_limits<uint64_t>::max()) << a << " * " << b;
    ASSERT_EQ(d.has_value(), s <= std::numeric_limits<uint64_t>::max()) << a << " + " << b;
    if (m) ASSERT_EQ(static_cast<u128>(*m), p);
    if (d) ASSERT_EQ(static_cast<u128>(*d), s);
    auto sa = static_cast<int64_t>(a), sb = static_cast<int64_t>(b);
    i128 sp = static_cast<i128>(sa) * sb;
    auto sm = try_mul(sa, sb);
    ASSERT_EQ(sm.has_value(), sp >= std::numeric_limits<int64_t>::min() &&
                                  sp <= std::numeric_limits<int64_t>::max());
    if (sm) ASSERT_EQ(static_cast<i128>(*sm), sp);
  }
  EXPECT_THROW(checked_mul(uint64_t{1} << 32, uint64_t{1} << 32, "bytes"), InvalidArgumentError);
  EXPECT_THROW(checked_add<OutOfMemoryError>(~uint64_t{0}, uint64_t{1}, "bytes"), OutOfMemoryError);
  EXPECT_EQ(checked_mul(uint64_t{3}, uint64_t{5}, "bytes"), 15u);
  EXPECT_EQ(try_round_up(~std::size_t{0}, 512), std::nullopt);
  EXPECT_EQ(try_round_up(1000, 512), std::optional<std::size_t>(1024));
}

TEST(CheckedSize, NumelAndNbytes) {
  std::vector<int64_t> shape = {3, 0, int64_t{1} << 62, 4};
  EXPECT_EQ(checked_numel(shape, "t"), 0);  // a zero dim makes any product empty
  EXPECT_EQ(checked_numel(std::vector<int64_t>{}, "t"), 1);
  EXPECT_EQ(checked_numel(std::vector<int64_t>{2, 3, 7}, "t"), 42);
  EXPECT_THROW(checked_numel(std::vector<int64_t>{int64_t{1} << 32, int64_t{1} << 32}, "t"),
               InvalidArgumentError);
  EXPECT_THROW(checked_numel(std::vector<int64_t>{2, -3}, "t"), InvalidArgumentError);
  EXPECT_THROW(checked_numel(std::vector<int64_t>{0, -3}, "t"), InvalidArgumentError);
  EXPECT_EQ(checked_nbytes(std::vector<int64_t>{2, 3}, 4, "t"), 24u);
  // 2**61 float64 elements is 2**64 bytes: the count fits, the bytes do not.
  EXPECT_THROW(checked_nbytes(std::vector<int64_t>{int64_t{1} << 61}, 8, "t"),
               InvalidArgumentError);
  try {
    checked_numel(std::vector<int64_t>(1000, int64_t{1} << 40), "huge");
    ADD_FAILURE();
  } catch (const InvalidArgumentError& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u);  // a hostile shape is not echoed whole
  }
}

TEST(CheckedSize, AllocationsThatWouldWrapAreOutOfMemory) {
  CachingAllocator alloc(DeviceManager::instance().backend(DeviceKind::cpu()), Device::cpu());
  for (std::size_t n : {~std::size_t{0}, ~std::size_t{0} - 4096, kMaxAllocationBytes + 1}) {
    EXPECT_THROW(alloc.allocate(n), OutOfMemoryError) << n;
    EXPECT_THROW(round_size_class(n), OutOfMemoryError) << n;
    EXPECT_THROW(MemoryManager::instance().allocate_pinned(n), OutOfMemoryError) << n;
  }
  EXPECT_EQ(alloc.stats().num_ooms, 3u);
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
  void* p = alloc.allocate(100);  // and the allocator stays usable
  EXPECT_NE(p, nullptr);
  alloc.free(p);
  EXPECT_GE(round_size_class(kMaxAllocationBytes), kMaxAllocationBytes);
}

TEST(CheckedSize, TensorShapesAndViewsThatWouldWrapAreRefused) {
  EXPECT_THROW(Tensor::empty({int64_t{1} << 32, int64_t{1} << 32}, DType::kFloat32, Device::cpu()),
               InvalidArgumentError);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 62}, DType::kFloat32, Device::cpu()),
               InvalidArgumentError);
  Tensor t = Tensor::empty({4}, DType::kFloat32, Device::cpu());
  // A stride chosen so (size-1)*stride wraps to a small number used to pass the
  // bounds check and address memory outside the 16-byte storage.
  const int64_t wrap = int64_t{1} << 62;
  EXPECT_THROW(Tensor(t.storage(), {5}, {wrap}, 0, DType::kFloat32), InvalidArgumentError);
  EXPECT_THROW(Tensor(t.storage(), {2, 2}, {wrap, wrap}, 0, DType::kFloat32), InvalidArgumentError);
  EXPECT_THROW(Tensor(t.storage(), {2}, {1}, std::numeric_limits<int64_t>::max(), DType::kFloat32),
               InvalidArgumentError);
  // Broadcast views (stride 0) whose element count passes int64 are refused too.
  EXPECT_THROW(
      Tensor(t.storage(), {int64_t{1} << 40, int64_t{1} << 40}, {0, 0}, 0, DType::kFloat32),
      InvalidArgumentError);
  EXPECT_NO_THROW(Tensor(t.storage(), {1000, 4}, {0, 1}, 0, DType::kFloat32));
  EXPECT_THROW(t.reshape({int64_t{1} << 32, int64_t{1} << 32, 0, -1}), InvalidArgumentError);
  EXPECT_EQ(t.reshape({2, 2}).numel(), 4);
}

}  // namespace
}  // namespace xpuruntime
