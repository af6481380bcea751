// The execution-provider seam (xpuruntime/provider.h), shown rather than claimed: a
// provider for a device kind that exists only in this test ("counting") is
// registered at run time and runs plans built for it, with nothing under graph/
// knowing it. It runs the CPU kernels but keeps its own arena and "device"
// memory, so every input and output crosses the plan's edge through its copies,
// which it counts. Plus: the unknown-device error, plan save/load re-preparing,
// and a conv's im2col GEMM recorded as a sub-decision.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "graph/plan_verify.h"
#include "ops/matmul/matmul_op.h"
#include "xpuruntime/error.h"
#include "xpuruntime/graph/compiler.h"
#include "xpuruntime/graph/executor.h"
#include "xpuruntime/profiler.h"
#include "xpuruntime/provider.h"

namespace xpuruntime::graph {
namespace {

struct Counters {
  std::atomic<int> uploads{0};         // upload_constants calls
  std::atomic<int> constant_bytes{0};  // bytes uploaded
  std::atomic<int> runs{0};            // begin_run calls
  std::atomic<int> to_device{0}, to_host{0};
  std::atomic<int> allocations{0};  // arena, workspace and dynamic buffers
  std::atomic<int> live{0};         // buffers not yet freed
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<void, FreeDeleter>;

Buffer device_alloc(std::size_t bytes, Counters& c) {
  ++c.allocations;
  ++c.live;
  const std::size_t n = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  return Buffer(std::aligned_alloc(64, n));
}

class CountingConstants final : public DeviceConstants {
 public:
  CountingConstants(const std::vector<HostTensor>& host, const std::vector<bool>& read, Counters& c)
      : c_(c) {
    for (std::size_t i = 0; i < host.size(); ++i) {
      const HostTensor& t = host[i];
      if (!read.at(i)) {  // only packed copies of it are read: left off the "device"
        copies_.emplace_back();
        continue;
      }
      copies_.push_back(device_alloc(t.nbytes(), c));
      if (t.nbytes()) std::memcpy(copies_.back().get(), t.data, t.nbytes());
      c.constant_bytes += static_cast<int>(t.nbytes());
    }
  }
  ~CountingConstants() override {
    for (const Buffer& b : copies_) c_.live -= b ? 1 : 0;
  }
  void* data(int i) const override { return copies_.at(static_cast<std::size_t>(i)).get(); }

 private:
  Counters& c_;
  std::vector<Buffer> copies_;
};

class CountingRun final : public RunResources {
 public:
  CountingRun(Counters& c, std::size_t arena, std::size_t workspace) : c_(c) {
    arena_ = device_alloc(arena, c);
    if (workspace) workspace_ = device_alloc(workspace, c);
  }
  ~CountingRun() override {
    c_.live -= static_cast<int>(dynamic_.size()) + 1 + (workspace_ ? 1 : 0);
  }
  NativeStream stream() const override { return nullptr; }
  void* arena() const override { return arena_.get(); }
  void* workspace() const override { return workspace_.get(); }
  void* allocate(std::size_t bytes) override {
    dynamic_.push_back(device_alloc(bytes, c_));
    return dynamic_.back().get();
  }
  void release(void* p) override {
    auto it = std::find_if(dynamic_.begin(), dynamic_.end(),
                           [&](const Buffer& b) { return b.get() == p; });
    ASSERT_NE(it, dynamic_.end()) << "release of a pointer this run did not allocate";
    dynamic_.erase(it);
    --c_.live;
  }
  void copy_to_device(void* dst, const void* src, std::size_t n) override {
    ++c_.to_device;
    std::memcpy(dst, src, n);
    if (Profiler::instance().enabled()) Profiler::instance().record_copy("h2d", n);
  }
  void copy_to_host(void* dst, const void* src, std::size_t n) override {
    ++c_.to_host;
    std::memcpy(dst, src, n);
    if (Profiler::instance().enabled()) Profiler::instance().record_copy("d2h", n);
  }
  void synchronize() override {}

 private:
  Counters& c_;
  Buffer arena_, workspace_;
  std::vector<Buffer> dynamic_;
};

class CountingProvider final : public ExecutionProvider {
 public:
  explicit CountingProvider(FusionSupport f = {}) : fusions_(f) {}
  const std::string& name() const override { return name_; }
  DeviceKind kernel_device() const override { return DeviceKind::cpu(); }  // runs the CPU kernels
  Device device() const override { return Device::cpu(); }
  FusionSupport fusions() const override { return fusions_; }
  bool host_memory() const override { return false; }  // its own memory: copies at the edges
  std::shared_ptr<const DeviceConstants> upload_constants(
      const std::vector<HostTensor>& constants,
      const std::vector<bool>& read_on_device) const override {
    ++counters.uploads;
    return std::make_shared<CountingConstants>(constants, read_on_device, counters);
  }
  std::unique_ptr<RunResources> begin_run(std::size_t arena, std::size_t workspace) const override {
    ++counters.runs;
    return std::make_unique<CountingRun>(counters, arena, workspace);
  }

  mutable Counters counters;

 private:
  std::string name_ = "counting";
  FusionSupport fusions_;
};

HostTensor randn(Shape s, unsigned seed) {
  HostTensor t = HostTensor::alloc(DType::kFloat32, std::move(s));
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = d(rng);
  return t;
}

HostTensor ints(std::vector<int64_t> v) {
  HostTensor t = HostTensor::alloc(DType::kInt64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.ptr<int64_t>());
  return t;
}

int input(Graph& g, const std::string& name, DType dt, Shape s) {
  int id = g.value_id(name);
  g.values[id].dtype = dt;
  g.values[id].dtype_known = true;
  std::vector<Dim> dims;
  for (int64_t d : s) dims.push_back(Dim{d, ""});
  g.values[id].declared = dims;
  g.inputs.push_back(id);
  return id;
}

void node(Graph& g, const std::string& op, std::vector<std::string> in,
          std::vector<std::string> out, std::map<std::string, Attr> attrs = {}) {
  Node n;
  n.name = op + "_" + std::to_string(g.nodes.size());
  n.op_type = op;
  for (auto& s : in) n.inputs.push_back(g.value_id(s));
  for (auto& s : out) n.outputs.push_back(g.value_id(s));
  n.attrs = std::move(attrs);
  g.add_node(std::move(n));
}

// h = relu(x @ w + b); t = Tile(exp(h) * 0.5, reps) (shaped only at run time,
// from an input's value); y = softmax(t); outputs y and h.
Graph small_model(const HostTensor& w, const HostTensor& b) {
  Graph g;
  input(g, "x", DType::kFloat32, {4, 3});
  input(g, "reps", DType::kInt64, {2});
  g.values[g.value_id("w")].constant = w;
  g.values[g.value_id("b")].constant = b;
  g.values[g.value_id("half")].constant = [] {
    HostTensor t = HostTensor::alloc(DType::kFloat32, {});
    *t.ptr<float>() = 0.5f;
    return t;
  }();
  node(g, "MatMul", {"x", "w"}, {"mm"});
  node(g, "Add", {"mm", "b"}, {"pre"});
  node(g, "Relu", {"pre"}, {"h"});
  node(g, "Exp", {"h"}, {"e"});
  node(g, "Mul", {"e", "half"}, {"s"});
  node(g, "Tile", {"s", "reps"}, {"t"});
  node(g, "Softmax", {"t"}, {"y"}, {{"axis", Attr::of_int(-1)}});
  g.outputs = {g.find("y"), g.find("h")};
  return g;
}

// Nothing registers the CPU here: the registry starts the core (the built-in CPU
// plugin adds its kernels and provider) when asked for a kind it does not hold.
struct SeamTest : ::testing::Test {
  void TearDown() override { ProviderRegistry::instance().remove("counting"); }
};

TEST_F(SeamTest, PlanRunsOnARuntimeRegisteredProviderLikeOnTheCpu) {
  auto counting = std::make_shared<CountingProvider>(FusionSupport{true, true, false});
  ASSERT_TRUE(ProviderRegistry::instance().add(counting));
  EXPECT_FALSE(ProviderRegistry::instance().add(std::make_shared<CountingProvider>()))
      << "a second provider of a kind is refused unless replace=true";
  const HostTensor w = randn({3, 5}, 1), b = randn({5}, 2);

  CompileOptions cpu_opt;
  ExecutionPlan cpu_plan = compile(small_model(w, b), cpu_opt);
  CompileOptions opt;
  opt.device = "counting";
  ExecutionPlan plan = compile(small_model(w, b), opt);
  EXPECT_EQ(plan.header.device, "counting");
  for (const std::string& d : plan.decisions)
    EXPECT_EQ(nlohmann::json::parse(d).at("device"), "cpu")
        << "kernels are dispatched for the provider's device";
  // The provider said elementwise chains do not pay on it: none fused (the CPU
  // fuses Exp*0.5).
  auto fused = [](const ExecutionPlan& p) {
    return std::count_if(p.steps.begin(), p.steps.end(),
                         [](const PlanStep& s) { return s.node.op_type == "FusedElementwise"; });
  };
  EXPECT_EQ(fused(plan), 0) << plan.summary();
  EXPECT_GE(fused(cpu_plan), 1) << cpu_plan.summary();

  Executor cpu_ex(std::make_shared<ExecutionPlan>(cpu_plan));
  Executor ex(std::make_shared<ExecutionPlan>(plan));
  EXPECT_EQ(counting->counters.uploads, 1);
  EXPECT_EQ(counting->counters.constant_bytes, static_cast<int>(w.nbytes() + b.nbytes() + 4));

  const HostTensor x = randn({4, 3}, 3), reps = ints({2, 3});
  RunStats cs, st;
  auto want = cpu_ex.run({"x", "reps"}, {x, reps}, {}, &cs);
  Profiler::instance().enable();
  auto got = ex.run({"reps", "x"}, {reps, x}, {}, &st);
  const ProfilerCounters pc = Profiler::instance().counters();
  Profiler::instance().disable();
  EXPECT_EQ(pc.copies_h2d, 2u) << "the edge copies are profiler copy events";
  EXPECT_EQ(pc.copies_d2h, 2u);
  ASSERT_EQ(got.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(got[i].shape, want[i].shape);
    for (int64_t k = 0; k < got[i].numel(); ++k)
      ASSERT_NEAR(got[i].ptr<float>()[k], want[i].ptr<float>()[k], 1e-6) << "output " << i;
  }
  EXPECT_EQ(got[0].shape, (Shape{8, 15}));
  // Independent reference for h = relu(x @ w + b) and y's rows summing to one.
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) {
      double acc = b.ptr<float>()[j];
      for (int k = 0; k < 3; ++k)
        acc += double(x.ptr<float>()[i * 3 + k]) * w.ptr<float>()[k * 5 + j];
      EXPECT_NEAR(got[1].ptr<float>()[i * 5 + j], std::max(acc, 0.0), 1e-5);
    }
  for (int r = 0; r < 8; ++r) {
    double sum = 0;
    for (int c = 0; c < 15; ++c) sum += got[0].ptr<float>()[r * 15 + c];
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  // The counters: one run; two inputs copied in, two outputs copied out; every
  // step run.
  EXPECT_EQ(counting->counters.runs, 1);
  EXPECT_EQ(counting->counters.to_device, 2);
  EXPECT_EQ(counting->counters.to_host, 2);
  EXPECT_EQ(st.copies_to_device, 2);
  EXPECT_EQ(st.copies_to_host, 2);
  EXPECT_EQ(st.copy_bytes,
            static_cast<int64_t>(x.nbytes() + reps.nbytes() + got[0].nbytes() + got[1].nbytes()));
  EXPECT_EQ(st.steps_run, static_cast<int64_t>(plan.steps.size()));
  EXPECT_EQ(cs.copies_to_device + cs.copies_to_host, 0) << "the CPU provider binds zero-copy";
  EXPECT_GT(st.dynamic_bytes_peak, 0) << "Tile's output is shaped at run time";
  // Every buffer of the run went back (the constants stay with the executor).
  EXPECT_EQ(counting->counters.live, static_cast<int>(plan.constants.size()));
  // allocations: constants, arena, 2 inputs, dynamic intermediates, the dynamic
  // output y (h is static but an output: device memory too), and no workspace
  // on these kernels.
  EXPECT_GE(counting->counters.allocations, static_cast<int>(plan.constants.size()) + 1 + 2 + 2);
}

// The null device (backends/null/): a real device kind of the plugin table, served
// by the one execution provider over its backend. It runs the CPU's kernels on its
// own (host) memory, so a plan on it gives the CPU's results while every input and
// output crosses the plan's edge through the backend's copies, and its runs take a
// stream from the provider's pool.
struct NullDeviceTest : SeamTest {
  void SetUp() override { setenv("XRT_NULL_DEVICE", "1", 1); }
  void TearDown() override {
    unsetenv("XRT_NULL_DEVICE");
    SeamTest::TearDown();
  }
};

TEST_F(NullDeviceTest, PlanRunsOnTheNullDeviceLikeOnTheCpu) {
  ProviderPtr null_provider = ProviderRegistry::instance().find("null");
  ASSERT_NE(null_provider, nullptr) << "the null plugin registers its provider when it loads";
  EXPECT_FALSE(null_provider->host_memory());
  EXPECT_EQ(null_provider->device(), Device::parse("null:0"));
  EXPECT_EQ(null_provider->kernel_device(), DeviceKind::cpu()) << "it runs the CPU's kernels";
  const HostTensor w = randn({3, 5}, 31), b = randn({5}, 32);
  ExecutionPlan cpu_plan = compile(small_model(w, b), CompileOptions{});
  CompileOptions opt;
  opt.device = "null";
  ExecutionPlan plan = compile(small_model(w, b), opt);
  EXPECT_EQ(plan.header.device, "null");
  ASSERT_EQ(plan.steps.size(), cpu_plan.steps.size()) << "the same fusions as the CPU";
  for (std::size_t i = 0; i < plan.steps.size(); ++i) EXPECT_EQ(plan.steps[i].kernel, cpu_plan.steps[i].kernel);
  for (const std::string& d : plan.decisions)
    EXPECT_EQ(nlohmann::json::parse(d).at("device"), "null:0") << "dispatched for the null device";

  const HostTensor x = randn({4, 3}, 33), reps = ints({2, 3});
  auto want = Executor(std::make_shared<ExecutionPlan>(cpu_plan)).run({"x", "reps"}, {x, reps});
  Executor ex(std::make_shared<ExecutionPlan>(plan));
  RunStats st;
  Profiler::instance().enable();
  auto got = ex.run({"x", "reps"}, {x, reps}, {}, &st);
  const ProfilerCounters pc = Profiler::instance().counters();
  Profiler::instance().disable();
  EXPECT_EQ(pc.copies_h2d, 2u) << "the edge copies are the backend's copies";
  EXPECT_EQ(pc.copies_d2h, 2u);
  EXPECT_EQ(st.copies_to_device, 2);
  EXPECT_EQ(st.copies_to_host, 2);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape, want[i].shape);
    ASSERT_EQ(std::memcmp(got[i].data, want[i].data, got[i].nbytes()), 0) << "same kernels, same bits: " << i;
  }
  // A second run reuses the pooled stream and the allocator's blocks.
  auto again = ex.run({"x", "reps"}, {x, reps});
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(again[i].data, want[i].data, again[i].nbytes()), 0);
}

TEST_F(NullDeviceTest, OffUnlessAskedForAndSaysHow) {
  unsetenv("XRT_NULL_DEVICE");
  const HostTensor w = randn({3, 5}, 34), b = randn({5}, 35);
  CompileOptions opt;
  opt.device = "null";
  try {
    compile(small_model(w, b), opt);
    FAIL() << "compiled for the null device while it is off";
  } catch (const BackendUnavailableError& e) {
    EXPECT_NE(std::string(e.what()).find("XRT_NULL_DEVICE=1"), std::string::npos) << e.what();
  }
}

TEST_F(SeamTest, PlanSavedForTheProviderReloadsAndRunsOnIt) {
  auto counting = std::make_shared<CountingProvider>();
  ASSERT_TRUE(ProviderRegistry::instance().add(counting));
  const HostTensor w = randn({3, 5}, 4), b = randn({5}, 5);
  CompileOptions opt;
  opt.device = "counting";
  ExecutionPlan plan = compile(small_model(w, b), opt);
  ExecutionPlan loaded =
      ExecutionPlan::deserialize(plan.serialize(), PlanExpectation{"counting", ""});
  ASSERT_EQ(loaded.steps.size(), plan.steps.size());
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    EXPECT_EQ(loaded.steps[i].kernel, plan.steps[i].kernel);
    EXPECT_NE(loaded.steps[i].prepared, nullptr) << "loading prepares every step again";
    EXPECT_NE(loaded.steps[i].prepared, plan.steps[i].prepared);
  }
  const HostTensor x = randn({4, 3}, 6), reps = ints({1, 2});
  auto a = Executor(std::make_shared<ExecutionPlan>(plan)).run({"x", "reps"}, {x, reps});
  auto c = Executor(std::make_shared<ExecutionPlan>(loaded)).run({"x", "reps"}, {x, reps});
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::memcmp(a[i].data, c[i].data, a[i].nbytes()), 0) << "same kernels, same bits";

  // Without the provider, neither the plan nor an executor can be had.
  ProviderRegistry::instance().remove("counting");
  const std::string bytes = plan.serialize();
  EXPECT_THROW(ExecutionPlan::deserialize(bytes), UnsupportedOperationError);
  EXPECT_THROW(Executor(std::make_shared<ExecutionPlan>(plan)), UnsupportedOperationError);
}

TEST_F(SeamTest, UnknownDeviceNamesItAndTheRegisteredOnes) {
  const HostTensor w = randn({3, 5}, 7), b = randn({5}, 8);
  for (const std::string dev : {"warpdrive", "cuda"}) {
    // With the CUDA plugin "cuda" has a provider (test_cuda_unavailable covers it).
    if (dev == "cuda" && ProviderRegistry::instance().find("cuda") != nullptr) continue;
    CompileOptions opt;
    opt.device = dev;
    try {
      compile(small_model(w, b), opt);
      FAIL() << "compiled for unknown device " << dev;
    } catch (const UnsupportedOperationError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("'" + dev + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("registered: cpu"), std::string::npos) << m;
      if (dev == "cuda")
        EXPECT_NE(m.find("CUDA execution provider is not available"), std::string::npos) << m;
    }
  }
}

TEST_F(SeamTest, LoadedPlanNeedingAKernelThisBuildLacksNamesNodeAndKernel) {
  const HostTensor w = randn({3, 5}, 9), b = randn({5}, 10);
  ExecutionPlan plan = compile(small_model(w, b), CompileOptions{});
  std::string bytes = plan.serialize();
  // The plan records the MatMul's GEMM kernel by name; rename it in the header.
  const std::string from = "\"kernel\":\"" + plan.steps[0].kernel + "\"";
  const auto at = bytes.find(from);
  ASSERT_NE(at, std::string::npos);
  const std::string to = "\"kernel\":\"" + std::string(plan.steps[0].kernel.size(), 'z') + "\"";
  bytes.replace(at, from.size(), to);
  seal_plan_bytes(bytes);  // an edit on purpose: past the checksum, to the kernel check
  try {
    ExecutionPlan::deserialize(bytes);
    FAIL() << "a plan naming a missing kernel loaded";
  } catch (const UnsupportedOperationError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(plan.steps[0].node.name), std::string::npos) << m;
    EXPECT_NE(m.find(std::string(plan.steps[0].kernel.size(), 'z')), std::string::npos) << m;
  }
}

TEST_F(SeamTest, ConvIm2colRecordsItsGemmAsASubDecisionAndReloadsIt) {
  Graph g;
  input(g, "x", DType::kFloat32, {1, 2, 6, 6});
  g.values[g.value_id("w")].constant = randn({4, 2, 3, 3}, 11);
  node(g, "Conv", {"x", "w"}, {"y"}, {{"pads", Attr::of_ints({1, 1, 1, 1})}});
  g.outputs = {g.find("y")};
  CompileOptions opt;
  opt.kernel_policy.set("conv", "cpu_im2col");
  opt.kernel_policy.set("matmul", "cpu_blocked");
  ExecutionPlan plan = compile(g, opt);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].kernel, "cpu_im2col");
  EXPECT_FALSE(plan.steps[0].node.has("_gemm")) << "the GEMM is a sub-kernel, not an attribute";
  // The layout (NCHW: the policy pins Conv), the conv, its GEMM, and the plan's
  // threads (engine.policy, always last).
  ASSERT_EQ(plan.decisions.size(), 4u);
  auto layout = nlohmann::json::parse(plan.decisions[0]);
  EXPECT_EQ(layout.at("op"), "layout");
  EXPECT_EQ(layout.at("chosen"), "nchw");
  auto sub = nlohmann::json::parse(plan.decisions[2]);
  EXPECT_EQ(sub.at("op"), "matmul");
  EXPECT_EQ(sub.at("node"), plan.steps[0].node.name + "/gemm");
  EXPECT_EQ(sub.at("chosen"), "cpu_blocked");

  // Reference: direct convolution in double.
  const HostTensor x = randn({1, 2, 6, 6}, 12);
  const HostTensor& w = plan.constants[0];
  auto y = Executor(std::make_shared<ExecutionPlan>(plan)).run({"x"}, {x});
  ASSERT_EQ(y[0].shape, (Shape{1, 4, 6, 6}));
  for (int o = 0; o < 4; ++o)
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 6; ++j) {
        double acc = 0;
        for (int c = 0; c < 2; ++c)
          for (int u = 0; u < 3; ++u)
            for (int v = 0; v < 3; ++v) {
              const int r = i + u - 1, s = j + v - 1;
              if (r < 0 || r >= 6 || s < 0 || s >= 6) continue;
              acc += double(x.ptr<float>()[(c * 6 + r) * 6 + s]) *
                     w.ptr<float>()[((o * 2 + c) * 3 + u) * 3 + v];
            }
        ASSERT_NEAR(y[0].ptr<float>()[(o * 6 + i) * 6 + j], acc, 1e-4);
      }
  // A loaded plan takes its GEMM from the recorded sub-decision (no new
  // dispatch).
  ExecutionPlan loaded = ExecutionPlan::deserialize(plan.serialize());
  EXPECT_EQ(loaded.decisions, plan.decisions);
  auto y2 = Executor(std::make_shared<ExecutionPlan>(loaded)).run({"x"}, {x});
  EXPECT_EQ(std::memcmp(y[0].data, y2[0].data, y[0].nbytes()), 0);
  // ... and a plan whose sub-decision is gone is refused.
  ExecutionPlan damaged = plan;
  damaged.decisions.erase(damaged.decisions.begin() + 2);
  EXPECT_THROW(ExecutionPlan::deserialize(damaged.serialize()), InvalidModelError);
}

TEST_F(SeamTest, RegistryRefusesBadProvidersAndReplacesOnlyWhenAsked) {
  ProviderRegistry reg;  // a private registry: starts no core
  EXPECT_THROW(reg.add(nullptr), InvalidArgumentError);
  auto a = std::make_shared<CountingProvider>();
  auto b = std::make_shared<CountingProvider>();
  EXPECT_TRUE(reg.add(a));
  EXPECT_FALSE(reg.add(b));
  EXPECT_EQ(reg.find("counting"), a);
  EXPECT_TRUE(reg.add(b, /*replace=*/true));
  EXPECT_EQ(reg.find("counting"), b);
  EXPECT_EQ(reg.names(), std::vector<std::string>{"counting"});
  EXPECT_EQ(reg.find("cpu"), nullptr);
  EXPECT_THROW(reg.get("cpu"), UnsupportedOperationError);
  EXPECT_TRUE(reg.remove("counting"));
  EXPECT_FALSE(reg.remove("counting"));
  // The process registry has the CPU provider without anyone here adding it.
  ASSERT_NE(ProviderRegistry::instance().find("cpu"), nullptr);
  EXPECT_EQ(ProviderRegistry::instance().find("cpu")->kernel_device(), DeviceKind::cpu());
  EXPECT_TRUE(ProviderRegistry::instance().find("cpu")->host_memory());
}

// A matmul kernel that packs its constant B at prepare (a copy of its own) and never
// reads the plan's: PreparedKernel::packs_constant(1).
class PackedBMatmul final : public Kernel {
 public:
  PackedBMatmul() : Kernel(make_def()) {}
  Support supports(const OpContext& ctx) const override {
    const auto it = ctx.attrs.find(matmul::kBConstantAttr);
    return it != ctx.attrs.end() && it->second == "1"
               ? Support::yes()
               : Support::no(reason::kShapeUnsupported, "B is not a plan constant");
  }
  void run(KernelLaunch&) const override { throw std::logic_error("prepared only"); }
  PreparedKernelPtr prepare(const PrepareContext& pc) const override {
    class Prepared final : public PreparedKernel {
     public:
      explicit Prepared(const HostTensor& b)
          : k_(b.shape[0]), n_(b.shape[1]), b_(b.ptr<float>(), b.ptr<float>() + b.numel()) {}
      void run(const KernelArgs& a) const override {
        // a.inputs[1] is null where no other step reads w (never read here either way)
        const float* x = static_cast<const float*>(a.inputs[0].data);
        float* y = static_cast<float*>(a.outputs[0].data);
        const int64_t m = a.inputs[0].shape[0];
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n_; ++j) {
            float acc = 0;
            for (int64_t k = 0; k < k_; ++k) acc += x[i * k_ + k] * b_[k * n_ + j];
            y[i * n_ + j] = acc;
          }
      }
      bool packs_constant(std::size_t input) const override { return input == 1; }

     private:
      int64_t k_, n_;
      std::vector<float> b_;
    };
    return std::make_shared<Prepared>(pc.constants.at(1));
  }

 private:
  static KernelDef make_def() {
    KernelDef d;
    d.op = "matmul";
    d.name = "packed_b_test";
    d.provider = "test";
    d.device = DeviceKind::cpu();
    d.dtypes = {DType::kFloat32};
    d.priority = 1000;
    return d;
  }
};

struct PackedConstantTest : SeamTest {
  void SetUp() override {
    KernelRegistry::instance().register_kernel(std::make_shared<PackedBMatmul>());
  }
  void TearDown() override {
    KernelRegistry::instance().unregister_kernel("matmul", "packed_b_test");
    SeamTest::TearDown();
  }
};

TEST_F(PackedConstantTest, ConstantReadOnlyThroughPackedCopiesIsNotUploaded) {
  auto counting = std::make_shared<CountingProvider>();
  ASSERT_TRUE(ProviderRegistry::instance().add(counting));
  const HostTensor w = randn({3, 5}, 11), x = randn({4, 3}, 12), x2 = randn({3, 5}, 13);
  CompileOptions opt;
  opt.device = "counting";
  for (const bool other_reader : {false, true}) {
    SCOPED_TRACE(other_reader ? "w also read by an Add" : "w read by the packing matmul only");
    Graph g;
    input(g, "x", DType::kFloat32, {4, 3});
    g.values[g.value_id("w")].constant = w;
    node(g, "MatMul", {"x", "w"}, {"y"});
    g.outputs = {g.find("y")};
    if (other_reader) {
      input(g, "x2", DType::kFloat32, {3, 5});
      node(g, "Add", {"x2", "w"}, {"z"});
      g.outputs.push_back(g.find("z"));
    }
    ExecutionPlan plan = compile(std::move(g), opt);
    ASSERT_NE(plan.summary().find("packed_b_test"), std::string::npos) << plan.summary();
    counting->counters.constant_bytes = 0;
    Executor ex(std::make_shared<ExecutionPlan>(plan));
    EXPECT_EQ(counting->counters.constant_bytes, other_reader ? static_cast<int>(w.nbytes()) : 0)
        << "the plan's copy of w goes to the device only when a step reads it there";
    std::vector<std::string> names = {"x"};
    std::vector<HostTensor> feeds = {x};
    if (other_reader) {
      names.push_back("x2");
      feeds.push_back(x2);
    }
    auto got = ex.run(names, feeds, {});
    ASSERT_EQ(got.size(), other_reader ? 2u : 1u);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 5; ++j) {
        double acc = 0;
        for (int k = 0; k < 3; ++k)
          acc += double(x.ptr<float>()[i * 3 + k]) * w.ptr<float>()[k * 5 + j];
        EXPECT_NEAR(got[0].ptr<float>()[i * 5 + j], acc, 1e-5);
      }
    if (other_reader)
      for (int64_t k = 0; k < 15; ++k)
        EXPECT_FLOAT_EQ(got[1].ptr<float>()[k], x2.ptr<float>()[k] + w.ptr<float>()[k]);
  }
}

}  // namespace
}  // namespace xpuruntime::graph
