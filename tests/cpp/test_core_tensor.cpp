// Tensors, devices, streams, errors and the profiler on the CPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <numeric>

#include "xpuruntime/error.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/profiler.h"
#include "xpuruntime/stream.h"
#include "xpuruntime/tensor.h"

namespace xpuruntime {
namespace {

TEST(DType, NamesRoundTripAndAliasesParse) {
  for (int i = 0; i < kNumDTypes; ++i) {
    auto t = static_cast<DType>(i);
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  }
  EXPECT_EQ(dtype_from_name("fp16"), DType::kFloat16);
  EXPECT_EQ(dtype_from_name("bf16"), DType::kBFloat16);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  try {
    dtype_from_name("float128");
    FAIL();
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("valid dtypes"), std::string::npos);
  }
}

TEST(Device, ParsesAndRejects) {
  const DeviceKind cuda = DeviceKind::named("cuda");
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:3"), (Device{cuda, 3}));
  EXPECT_EQ(Device::parse("cuda"), (Device{cuda, 0}));
  EXPECT_EQ(Device::parse("gpu:1"), (Device{cuda, 1})) << "the plugin table's alias";
  EXPECT_EQ((Device{cuda, 2}).str(), "cuda:2");
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_THROW(Device::parse("tpu:0"), InvalidArgumentError);
  EXPECT_THROW(Device::parse("cuda:x"), InvalidArgumentError);
  EXPECT_THROW(Device::parse("cpu:1"), InvalidArgumentError);
}

TEST(DeviceKind, InternedFromThePluginTable) {
  const std::vector<DeviceKind> kinds = DeviceKind::all();
  ASSERT_FALSE(kinds.empty());
  EXPECT_EQ(kinds.back(), DeviceKind::cpu()) << "accelerators first";
  EXPECT_EQ(DeviceKind::accelerator(), kinds.front());
  for (DeviceKind k : kinds) {
    EXPECT_EQ(DeviceKind::named(k.name()), k);
    EXPECT_EQ(k.is_cpu(), k.name() == "cpu");
  }
  EXPECT_EQ(DeviceKind::cpu(), DeviceKind());
  try {
    DeviceKind::named("warpdrive");
    FAIL() << "an unknown kind";
  } catch (const InvalidArgumentError& e) {
    for (DeviceKind k : kinds) EXPECT_NE(std::string(e.what()).find(std::string(k.name())), std::string::npos);
  }
}

TEST(DeviceBackend, CpuAnswersByKeyAndCopiesStrided) {
  DeviceBackend& cpu = DeviceManager::instance().backend(DeviceKind::cpu());
  EXPECT_EQ(cpu.kind(), DeviceKind::cpu());
  EXPECT_EQ(cpu.attribute(0, "capability"), "");
  EXPECT_EQ(cpu.dlpack_device_type(), kDLPackCPU);
  EXPECT_EQ(DeviceManager::instance().device_from_dlpack(kDLPackCPU, 0), Device::cpu());
  EXPECT_THROW(DeviceManager::instance().device_from_dlpack(987, 0), UnsupportedOperationError);
  // A 2x3 transpose through copy_strided, against the index arithmetic.
  const float src[6] = {1, 2, 3, 4, 5, 6};
  float dst[6] = {};
  const int64_t shape[2] = {3, 2}, dst_strides[2] = {2, 1}, src_strides[2] = {1, 3};
  cpu.copy_strided(0, dst, dst_strides, src, src_strides, shape, sizeof(float), nullptr);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) EXPECT_EQ(dst[i * 2 + j], src[j * 3 + i]);
}

TEST(DeviceManager, EnumeratesCpuAndExplainsMissingCuda) {
  auto& dm = DeviceManager::instance();
  auto all = dm.get_all_devices();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.back().device_type, DeviceKind::cpu());
  EXPECT_GT(all.back().total_memory, 0u);
  EXPECT_GT(all.back().sm_count, 0);
  EXPECT_EQ(static_cast<int>(all.size()), dm.get_device_count() + 1);
  if (dm.get_device_count() == 0) {
    EXPECT_FALSE(dm.accelerator_unavailable_reason().empty());
    EXPECT_EQ(dm.get_current_device(), Device::cpu());
    EXPECT_THROW(dm.get_device_info(0), InvalidArgumentError);
    EXPECT_THROW(dm.backend(DeviceKind::named("cuda")), BackendUnavailableError);
    EXPECT_THROW(Tensor::empty({4}, DType::kFloat32, Device::parse("cuda:0")), InvalidArgumentError);
  }
  EXPECT_THROW(dm.set_current_device(Device::parse("cuda:99")), InvalidArgumentError);
}

TEST(Tensor, EmptyIsContiguousAndSized) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::kFloat32, Device::cpu());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
}

TEST(Tensor, TransposeCopyAndContiguous) {
  Tensor t = Tensor::empty({3, 5}, DType::kInt32, Device::cpu());
  std::iota(t.data<int32_t>(), t.data<int32_t>() + 15, 0);
  Tensor tt = t.transpose(0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.data_ptr(), t.data_ptr());  // a view
  Tensor c = tt.contiguous();
  ASSERT_TRUE(c.is_contiguous());
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(c.data<int32_t>()[i * 3 + j], j * 5 + i);
  Tensor r = tt.reshape({15});  // non-contiguous reshape copies
  EXPECT_EQ(r.data<int32_t>()[1], 5);
}

TEST(Tensor, ViewsOutsideTheirStorageAreRejected) {
  Tensor t = Tensor::empty({4}, DType::kFloat32, Device::cpu());
  EXPECT_THROW(Tensor(t.storage(), {5}, {1}, 0, DType::kFloat32), InvalidArgumentError);
  EXPECT_THROW(Tensor(t.storage(), {2}, {1}, 3, DType::kFloat32), InvalidArgumentError);
  EXPECT_THROW(Tensor(t.storage(), {2}, {1, 1}, 0, DType::kFloat32), InvalidArgumentError);
  EXPECT_NO_THROW(Tensor(t.storage(), {2}, {2}, 1, DType::kFloat32));
  EXPECT_THROW(t.reshape({3}), InvalidArgumentError);
}

TEST(Tensor, StorageReleasesThroughTheAllocator) {
  auto before = MemoryManager::instance().stats(Device::cpu());
  {
    Tensor t = Tensor::empty({1024}, DType::kFloat64, Device::cpu());
    auto during = MemoryManager::instance().stats(Device::cpu());
    EXPECT_EQ(during.allocated_bytes, before.allocated_bytes + 8192);
  }
  EXPECT_EQ(MemoryManager::instance().stats(Device::cpu()).allocated_bytes, before.allocated_bytes);
}

TEST(Streams, CpuEventsMeasureElapsedTimeInOrder) {
  auto s = StreamManager::instance().create_stream(Device::cpu());
  Event a(Device::cpu()), b(Device::cpu());
  a.record(*s);
  volatile double x = 0;
  for (int i = 0; i < 200000; ++i) x = x + i * 0.5;
  b.record(*s);
  EXPECT_GE(b.elapsed_ms_since(a), 0.0f);
  Event c(Device::cpu());
  EXPECT_THROW(c.elapsed_ms_since(a), InvalidArgumentError);  // c never recorded
  EXPECT_THROW(GraphCapture{s}, UnsupportedOperationError);  // no CPU graphs
}

TEST(Profiler, RecordsRangesCountersAndExportsChromeTrace) {
  Profiler& p = Profiler::instance();
  p.enable();
  {
    ProfileRange outer("outer");
    ProfileRange inner("inner");
    p.record_copy("h2d", 128);
    p.record_sync("stream");
  }
  { Tensor t = Tensor::empty({16}, DType::kFloat32, Device::cpu()); }
  p.disable();
  { ProfileRange ignored("after-disable"); }
  auto c = p.counters();
  EXPECT_EQ(c.copies_h2d, 1u);
  EXPECT_EQ(c.bytes_h2d, 128u);
  EXPECT_EQ(c.syncs, 1u);
  EXPECT_GE(c.allocs, 1u);
  auto doc = nlohmann::json::parse(p.chrome_trace_json());
  int ranges = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") {
      ++ranges;
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      EXPECT_NE(e["name"], "after-disable");
    }
  }
  EXPECT_EQ(ranges, 2);
  EXPECT_EQ(doc["otherData"]["counters"]["bytes_h2d"], 128);
  EXPECT_NE(p.summary().find("outer"), std::string::npos);
}

TEST(Errors, CarrySourceLocation) {
  try {
    XRT_THROW(UnsupportedOperationError, "op ", "x", " unsupported");
  } catch (const XpuRuntimeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("op x unsupported"), std::string::npos);
    EXPECT_NE(msg.find("test_core_tensor.cpp:"), std::string::npos);
  }
}

}  // namespace
}  // namespace xpuruntime
