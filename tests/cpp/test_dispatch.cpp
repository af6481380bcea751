// Dispatcher: rules (pinned, require, prefer, fallback, auto), reason codes, strict
// assertions, tuning + export_pins, determinism over repeated calls and threads.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "xpuruntime/dispatcher.h"
#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"

using namespace xpuruntime;

namespace {

// C = A @ B for contiguous float32 matrices: a real kernel, so dispatch results can be
// checked against a float64 reference.
void naive_matmul(KernelLaunch& l) {
  const Tensor& a = l.inputs[0];
  const Tensor& b = l.inputs[1];
  Tensor& c = l.outputs[0];
  int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* pc = c.data<float>();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += double(pa[i * k + p]) * pb[p * n + j];
      pc[i * n + j] = static_cast<float>(acc);
    }
  }
}

KernelDef def(std::string name, DeviceKind dev, int priority, std::vector<DType> dtypes = {}) {
  KernelDef d;
  d.op = "matmul";
  d.name = std::move(name);
  d.provider = "test";
  d.device = dev;
  d.dtypes = std::move(dtypes);
  d.priority = priority;
  return d;
}

Support only_2d(const OpContext& ctx) {
  if (ctx.inputs.size() != 2 || ctx.inputs[0].shape.size() != 2) {
    return Support::no(reason::kShapeUnsupported, "needs two 2-D inputs");
  }
  return Support::yes();
}

// A fixed registry: two CPU kernels (fp32 only / any dtype), a CUDA kernel that needs sm80.
struct DispatchTest : ::testing::Test {
  KernelRegistry reg;
  std::atomic<int> runs_a{0}, runs_b{0};
  void SetUp() override {
    reg.register_kernel(std::make_shared<FunctionKernel>(
        def("cpu_blas", DeviceKind::cpu(), 10, {DType::kFloat32}),
        [this](KernelLaunch& l) { ++runs_a; naive_matmul(l); }, only_2d));
    reg.register_kernel(std::make_shared<FunctionKernel>(
        def("cpu_blocked", DeviceKind::cpu(), 5),
        [this](KernelLaunch& l) { ++runs_b; naive_matmul(l); }, only_2d));
    KernelDef lt = def("cublasLt", DeviceKind::named("cuda"), 20, {DType::kFloat16});
    lt.min_capability = 80;
    reg.register_kernel(std::make_shared<FunctionKernel>(lt, [](KernelLaunch&) {
      throw std::runtime_error("not runnable in CPU tests");
    }));
  }
  static OpContext ctx(DType t = DType::kFloat32, std::string node = "mm0") {
    OpContext c;
    c.op = "matmul";
    c.node = std::move(node);
    c.device = Device::cpu();
    c.inputs = {{t, {4, 8}, {}}, {t, {8, 3}, {}}};
    c.outputs = {{t, {4, 3}, {}}};
    return c;
  }
  static KernelPolicy policy(const std::string& kernel, KernelPolicy::Mode mode) {
    KernelPolicy p;
    p.set("matmul", kernel);
    p.mode = mode;
    return p;
  }
};

const Candidate& cand(const Decision& d, const std::string& name) {
  for (const auto& c : d.candidates) {
    if (c.kernel == name) return c;
  }
  throw std::runtime_error("no candidate " + name);
}

}  // namespace

TEST_F(DispatchTest, RegistryOrderingAndErrors) {
  auto ks = reg.kernels("matmul");
  ASSERT_EQ(ks.size(), 3u);
  EXPECT_EQ(ks[0]->def().name, "cublasLt");  // priority 20
  EXPECT_EQ(ks[1]->def().name, "cpu_blas");
  EXPECT_EQ(ks[2]->def().name, "cpu_blocked");
  EXPECT_EQ(reg.list(std::string("matmul"), DeviceKind::cpu()).size(), 2u);
  EXPECT_EQ(reg.list(std::string("conv")).size(), 0u);
  EXPECT_THROW(reg.register_kernel(std::make_shared<FunctionKernel>(
                   def("cpu_blas", DeviceKind::cpu(), 0), [](KernelLaunch&) {})),
               InvalidArgumentError);
  EXPECT_THROW(reg.register_kernel(std::make_shared<FunctionKernel>(
                   def("auto", DeviceKind::cpu(), 0), [](KernelLaunch&) {})),
               InvalidArgumentError);
  uint64_t g = reg.generation();
  EXPECT_TRUE(reg.unregister_kernel("matmul", "cpu_blocked"));
  EXPECT_FALSE(reg.unregister_kernel("matmul", "cpu_blocked"));
  EXPECT_GT(reg.generation(), g);
}

TEST_F(DispatchTest, AutoFirstSupportedRecordsEveryVerdict) {
  Dispatcher d(reg);
  Decision dec = d.select(ctx());
  EXPECT_EQ(dec.chosen, "cpu_blas");
  EXPECT_EQ(dec.rule, rule::kAutoFirstSupported);
  ASSERT_EQ(dec.candidates.size(), 3u);
  EXPECT_EQ(dec.candidates[0].kernel, "cublasLt");
  EXPECT_EQ(cand(dec, "cublasLt").reason_code, reason::kDeviceMismatch);
  EXPECT_EQ(cand(dec, "cpu_blas").verdict, verdict::kSupported);
  EXPECT_EQ(dec.key, "matmul|cpu|float32[4,8],float32[8,3]->float32[4,3]|");
  EXPECT_EQ(dec.dtypes, (std::vector<std::string>{"float32", "float32"}));
  EXPECT_EQ(d.log().size(), 1u);
  EXPECT_EQ(dec.seq, 1u);

  // fp16 input: cpu_blas rejects (dtype), cpu_blocked takes any dtype.
  Decision h = d.select(ctx(DType::kFloat16));
  EXPECT_EQ(h.chosen, "cpu_blocked");
  EXPECT_EQ(cand(h, "cpu_blas").reason_code, reason::kDtypeUnsupported);
  EXPECT_NE(cand(h, "cpu_blas").detail.find("input 0 is float16"), std::string::npos);
}

TEST_F(DispatchTest, PreferFallsBackRequireRaises) {
  Dispatcher d(reg);
  // On CPU the CUDA kernel cannot run: prefer falls back and says why.
  Decision p = d.select(ctx(), policy("cublasLt", KernelPolicy::Mode::Prefer));
  EXPECT_EQ(p.chosen, "cpu_blas");
  EXPECT_EQ(p.rule, rule::kFallback);
  EXPECT_NE(p.detail.find("device_mismatch"), std::string::npos) << p.detail;

  try {
    d.select(ctx(), policy("cublasLt", KernelPolicy::Mode::Require));
    FAIL() << "expected UnsupportedOperationError";
  } catch (const UnsupportedOperationError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("op 'matmul'"), std::string::npos) << m;
    EXPECT_NE(m.find("'cublasLt'"), std::string::npos) << m;
    EXPECT_NE(m.find("device_mismatch"), std::string::npos) << m;
    EXPECT_NE(m.find("mode='prefer'"), std::string::npos) << m;
  }
  // The failed selection is still recorded.
  Decision last = d.log().snapshot(1).at(0);
  EXPECT_EQ(last.rule, rule::kNone);
  EXPECT_EQ(last.chosen, "");
  EXPECT_EQ(cand(last, "cpu_blas").reason_code, reason::kNotInPolicy);

  Decision r = d.select(ctx(), policy("cpu_blocked", KernelPolicy::Mode::Require));
  EXPECT_EQ(r.chosen, "cpu_blocked");
  EXPECT_EQ(r.rule, rule::kPolicyRequire);
  EXPECT_EQ(cand(r, "cpu_blas").reason_code, reason::kNotInPolicy);

  // Named but not registered here (a declared name): backend_unavailable.
  EXPECT_THROW(d.select(ctx(), policy("cublas", KernelPolicy::Mode::Require)),
               UnsupportedOperationError);
  EXPECT_EQ(cand(d.log().snapshot(1)[0], "cublas").reason_code, reason::kBackendUnavailable);

  // An ordered list ending in auto: require the list, then any kernel.
  KernelPolicy lst;
  lst.set("matmul", std::vector<std::string>{"cublasLt", "auto"});
  lst.mode = KernelPolicy::Mode::Require;
  Decision a = d.select(ctx(), lst);
  EXPECT_EQ(a.chosen, "cpu_blas");
  EXPECT_EQ(a.rule, rule::kAutoFirstSupported);
}

TEST_F(DispatchTest, CapabilityWorkspaceDeterminismLayout) {
  Dispatcher d(reg);
  OpContext c = ctx(DType::kFloat16);
  c.device = Device::parse("cuda:0");
  c.capability = 75;
  EXPECT_THROW(d.select(c), UnsupportedOperationError);
  Decision failed = d.log().snapshot(1).at(0);
  const Candidate& lt = cand(failed, "cublasLt");
  EXPECT_EQ(lt.reason_code, reason::kCapabilityTooLow);
  EXPECT_EQ(lt.detail, "needs sm80+, device is sm75");
  c.capability = 90;
  EXPECT_EQ(d.select(c).chosen, "cublasLt");
  EXPECT_EQ(c.case_key().substr(0, 16), "matmul|cuda:sm90");

  KernelDef big = def("big_ws", DeviceKind::cpu(), 100);
  big.workspace_bytes = 1 << 20;
  big.deterministic = false;
  big.layouts = {"contiguous"};
  reg.register_kernel(std::make_shared<FunctionKernel>(big, naive_matmul));
  OpContext w = ctx();
  EXPECT_EQ(d.select(w).chosen, "big_ws");
  w.workspace_limit_bytes = 1024;
  Decision dw = d.select(w);
  EXPECT_EQ(dw.chosen, "cpu_blas");
  EXPECT_EQ(cand(dw, "big_ws").reason_code, reason::kWorkspaceExceeded);
  OpContext nd = ctx();
  nd.deterministic = true;
  EXPECT_EQ(cand(d.select(nd), "big_ws").reason_code, reason::kNondeterministic);
  OpContext tr = ctx();
  tr.inputs[1].strides = {1, 8};  // [8,3] stored transposed
  EXPECT_EQ(tr.inputs[1].layout(), "transposed");
  EXPECT_EQ(cand(d.select(tr), "big_ws").reason_code, reason::kLayoutUnsupported);
  EXPECT_NE(tr.case_key().find("float32[8,3]@transposed"), std::string::npos);
}

TEST_F(DispatchTest, SupportsThatThrowsIsARejectionNotACrash) {
  reg.register_kernel(std::make_shared<FunctionKernel>(
      def("broken", DeviceKind::cpu(), 99), naive_matmul,
      [](const OpContext&) -> Support { throw std::runtime_error("boom"); }));
  Dispatcher d(reg);
  Decision dec = d.select(ctx());
  EXPECT_EQ(dec.chosen, "cpu_blas");
  EXPECT_EQ(cand(dec, "broken").reason_code, reason::kSupportsError);
  EXPECT_NE(cand(dec, "broken").detail.find("boom"), std::string::npos);
}

TEST_F(DispatchTest, PinsAndStrictAssertions) {
  Dispatcher d(reg);
  KernelPolicy p;
  p.pins[ctx().case_key()] = {"cpu_blocked", "variant7"};
  Decision dec = d.select(ctx(), p);
  EXPECT_EQ(dec.rule, rule::kPinned);
  EXPECT_EQ(dec.chosen, "cpu_blocked");
  EXPECT_EQ(dec.algorithm, "variant7");
  ASSERT_TRUE(dec.pin.has_value());

  // A pin that cannot run: prefer goes on (and says so), require raises.
  KernelPolicy bad;
  bad.pins[ctx().case_key()] = {"cublasLt", ""};
  Decision fb = d.select(ctx(), bad);
  EXPECT_EQ(fb.chosen, "cpu_blas");
  EXPECT_NE(fb.detail.find("pin to 'cublasLt' refused"), std::string::npos) << fb.detail;
  bad.mode = KernelPolicy::Mode::Require;
  EXPECT_THROW(d.select(ctx(), bad), UnsupportedOperationError);

  ExecutionPolicy ep;
  ep.strict = {"pinned_only"};
  OpContext strict = ctx();
  strict.apply(ep);
  EXPECT_THROW(d.select(strict, KernelPolicy{}), UnsupportedOperationError);
  EXPECT_EQ(d.select(strict, p).rule, rule::kPinned);

  ep.strict = {"no_fallback"};
  OpContext nf = ctx();
  nf.apply(ep);
  EXPECT_THROW(d.select(nf, policy("cublasLt", KernelPolicy::Mode::Prefer)),
               UnsupportedOperationError);
}

TEST_F(DispatchTest, DispatchRunsTheChosenKernel) {
  Dispatcher d(reg);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  Tensor a = Tensor::empty({5, 7}, DType::kFloat32, Device::cpu());
  Tensor b = Tensor::empty({7, 3}, DType::kFloat32, Device::cpu());
  Tensor c = Tensor::zeros({5, 3}, DType::kFloat32, Device::cpu());
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = u(rng);
  for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = u(rng);
  OpContext oc = OpContext::from_tensors("matmul", {a, b}, {c}, "mm1");
  KernelLaunch l;
  l.inputs = {a, b};
  l.outputs = {c};
  Decision dec = d.dispatch(oc, l, policy("cpu_blocked", KernelPolicy::Mode::Require));
  EXPECT_EQ(dec.chosen, "cpu_blocked");
  EXPECT_EQ(runs_b.load(), 1);
  EXPECT_EQ(runs_a.load(), 0);
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      double ref = 0;
      for (int64_t p = 0; p < 7; ++p) ref += double(a.data<float>()[i * 7 + p]) * b.data<float>()[p * 3 + j];
      EXPECT_NEAR(c.data<float>()[i * 3 + j], ref, 1e-5);
    }
  }
}

TEST_F(DispatchTest, BestPerformanceTunesOnceCachesAndExportsPins) {
  // A slow kernel with high priority and a tunable kernel whose "fast" algorithm wins
  // (the fixture's CPU kernels are as fast as "fast", so they leave for this test).
  reg.unregister_kernel("matmul", "cpu_blas");
  reg.unregister_kernel("matmul", "cpu_blocked");
  std::atomic<int> slow_runs{0}, tunable_runs{0};
  std::atomic<int> last_algo_fast{0};
  reg.register_kernel(std::make_shared<FunctionKernel>(
      def("slow", DeviceKind::cpu(), 50), [&](KernelLaunch& l) {
        ++slow_runs;
        std::this_thread::sleep_for(std::chrono::milliseconds(4));
        naive_matmul(l);
      }));
  reg.register_kernel(std::make_shared<FunctionKernel>(
      def("tunable", DeviceKind::cpu(), 40),
      [&](KernelLaunch& l) {
        ++tunable_runs;
        last_algo_fast = l.algorithm == "fast";
        if (l.algorithm != "fast") std::this_thread::sleep_for(std::chrono::milliseconds(3));
        naive_matmul(l);
      },
      nullptr, [](const OpContext&) { return std::vector<std::string>{"careful", "fast"}; }));
  Dispatcher d(reg);
  d.set_tuning_options({1, 3});
  KernelPolicy p;
  p.auto_strategy = KernelPolicy::AutoSelectStrategy::BestPerformance;

  // select() alone does not run kernels: it reports first_supported until tuned.
  Decision pre = d.select(ctx(), p);
  EXPECT_EQ(pre.chosen, "slow");
  EXPECT_EQ(pre.rule, rule::kAutoFirstSupported);
  EXPECT_NE(pre.detail.find("not tuned yet"), std::string::npos);
  EXPECT_EQ(slow_runs.load(), 0);

  Tensor a = Tensor::zeros({4, 8}, DType::kFloat32, Device::cpu());
  Tensor b = Tensor::zeros({8, 3}, DType::kFloat32, Device::cpu());
  Tensor c = Tensor::zeros({4, 3}, DType::kFloat32, Device::cpu());
  OpContext oc = OpContext::from_tensors("matmul", {a, b}, {c}, "mm0");
  KernelLaunch l;
  l.inputs = {a, b};
  l.outputs = {c};
  Decision t = d.dispatch(oc, l, p);
  EXPECT_EQ(t.rule, rule::kAutoBestPerformance);
  EXPECT_EQ(t.chosen, "tunable");
  EXPECT_EQ(t.algorithm, "fast");
  EXPECT_EQ(last_algo_fast.load(), 1);  // the final run used the winner
  EXPECT_EQ(slow_runs.load(), 4);       // 1 warmup + 3 timed
  EXPECT_TRUE(t.timings.count("slow"));
  EXPECT_TRUE(t.timings.count("tunable/careful"));
  EXPECT_TRUE(t.timings.count("tunable/fast"));
  EXPECT_EQ(t.timings.size(), 3u);
  EXPECT_GT(t.timings.at("slow"), 3.0);
  EXPECT_EQ(cand(t, "tunable").algorithm, "fast");
  ASSERT_TRUE(cand(t, "slow").time_ms.has_value());
  EXPECT_FALSE(cand(t, "cublasLt").time_ms.has_value());

  // Cached: the second dispatch runs only the winner once.
  int before = tunable_runs.load();
  Decision t2 = d.dispatch(oc, l, p);
  EXPECT_EQ(t2.chosen, "tunable");
  EXPECT_EQ(t2.rule, rule::kAutoBestPerformance);
  EXPECT_EQ(tunable_runs.load(), before + 1);
  EXPECT_EQ(slow_runs.load(), 4);
  EXPECT_EQ(d.select(ctx(), p).chosen, "tunable");

  // Pins: production repeats research without tuning.
  KernelPolicy pinned = d.export_pins(p);
  ASSERT_EQ(pinned.pins.size(), 1u);
  EXPECT_EQ(pinned.pins.begin()->first, oc.case_key());
  EXPECT_EQ(pinned.pins.begin()->second, (KernelPin{"tunable", "fast"}));
  KernelPolicy reloaded = KernelPolicy::from_json(pinned.to_json());
  Dispatcher fresh(reg);
  Decision rep = fresh.dispatch(oc, l, reloaded);
  EXPECT_EQ(rep.rule, rule::kPinned);
  EXPECT_EQ(rep.chosen, "tunable");
  EXPECT_EQ(rep.algorithm, "fast");
  EXPECT_EQ(slow_runs.load(), 4);  // nothing re-tuned

  // A registry change invalidates tuning results.
  reg.register_known_kernel_name("matmul", "declared_only");  // names do not invalidate
  EXPECT_EQ(d.export_pins(p).pins.size(), 1u);
  reg.unregister_kernel("matmul", "slow");
  EXPECT_EQ(d.export_pins(p).pins.size(), 0u);
}

TEST_F(DispatchTest, TuningExcludesKernelsThatFail) {
  reg.register_kernel(std::make_shared<FunctionKernel>(
      def("liar", DeviceKind::cpu(), 99), [](KernelLaunch&) { throw std::runtime_error("bad"); }));
  Dispatcher d(reg);
  d.set_tuning_options({0, 1});
  KernelPolicy p;
  p.auto_strategy = KernelPolicy::AutoSelectStrategy::BestPerformance;
  Tensor a = Tensor::zeros({4, 8}, DType::kFloat32, Device::cpu());
  Tensor b = Tensor::zeros({8, 3}, DType::kFloat32, Device::cpu());
  Tensor c = Tensor::zeros({4, 3}, DType::kFloat32, Device::cpu());
  OpContext oc = OpContext::from_tensors("matmul", {a, b}, {c});
  KernelLaunch l;
  l.inputs = {a, b};
  l.outputs = {c};
  Decision t = d.dispatch(oc, l, p);
  EXPECT_NE(t.chosen, "liar");
  EXPECT_EQ(cand(t, "liar").reason_code, reason::kRunFailed);
}

TEST_F(DispatchTest, CallerPreparedCandidatesAreTunedOncePerCase) {
  // A native plan's steps: the caller prepares each candidate (kernel, algorithm) and the
  // Dispatcher times the runs it returns, ranks them, caches the winner and pins it.
  reg.unregister_kernel("matmul", "cpu_blas");
  reg.unregister_kernel("matmul", "cpu_blocked");
  auto noop = [](KernelLaunch&) {};
  reg.register_kernel(std::make_shared<FunctionKernel>(def("slow", DeviceKind::cpu(), 50), noop));
  reg.register_kernel(std::make_shared<FunctionKernel>(
      def("tunable", DeviceKind::cpu(), 40), noop, nullptr,
      [](const OpContext&) { return std::vector<std::string>{"careful", "fast"}; }));
  reg.register_kernel(std::make_shared<FunctionKernel>(def("broken", DeviceKind::cpu(), 30), noop));
  Dispatcher d(reg);
  d.set_tuning_options({1, 3});
  KernelPolicy p;
  p.auto_strategy = KernelPolicy::AutoSelectStrategy::BestPerformance;
  int prepared = 0, runs = 0;
  SelectOptions opt;
  opt.regime = "plan step";
  opt.prepare_candidate = [&](const Kernel& k, const std::string& algo) {
    ++prepared;
    if (k.def().name == "broken") throw std::runtime_error("no plan for this shape");
    const int ms = k.def().name == "slow" ? 4 : (algo == "fast" ? 0 : 3);
    return CandidateRun{[&runs, ms] {
                          ++runs;
                          std::this_thread::sleep_for(std::chrono::milliseconds(ms));
                        },
                        nullptr};
  };
  Decision t = d.select(ctx(), p, opt);
  EXPECT_EQ(t.rule, rule::kAutoBestPerformance);
  EXPECT_EQ(t.chosen, "tunable");
  EXPECT_EQ(t.algorithm, "fast");
  ASSERT_TRUE(t.pin.has_value());
  EXPECT_EQ(*t.pin, (KernelPin{"tunable", "fast"}));
  EXPECT_EQ(prepared, 4);       // slow, tunable/careful, tunable/fast, broken
  EXPECT_EQ(runs, 3 * (1 + 3));  // warm-up + timed runs of each that prepared
  EXPECT_EQ(t.timings.size(), 3u);
  EXPECT_GT(t.timings.at("slow"), 3.0);
  EXPECT_NE(t.detail.find("regime=plan step, host clock"), std::string::npos) << t.detail;
  EXPECT_NE(t.detail.find("margin"), std::string::npos) << t.detail;
  EXPECT_EQ(cand(t, "broken").reason_code, reason::kRunFailed);
  EXPECT_NE(cand(t, "broken").detail.find("no plan for this shape"), std::string::npos);

  // The same case again (another node of it, or the next build): nothing is prepared.
  OpContext other = ctx(DType::kFloat32, "mm1");
  Decision again = d.select(other, p, opt);
  EXPECT_EQ(prepared, 4);
  EXPECT_EQ(again.chosen, "tunable");
  EXPECT_EQ(again.timings, t.timings);
  EXPECT_EQ(d.export_pins(p).pins.at(other.case_key()), (KernelPin{"tunable", "fast"}));

  // One candidate with one algorithm: chosen without being run.
  SelectOptions one = opt;
  one.runnable = {"slow"};
  OpContext single = ctx(DType::kFloat32, "mm2");
  single.attrs["trans_b"] = "1";  // another case
  Decision s = d.select(single, p, one);
  EXPECT_EQ(prepared, 4);
  EXPECT_EQ(s.chosen, "slow");
  EXPECT_EQ(s.rule, rule::kAutoBestPerformance);
  EXPECT_TRUE(s.timings.empty());
  EXPECT_NE(s.detail.find("only candidate"), std::string::npos) << s.detail;
}

TEST_F(DispatchTest, SameSelectionOver100CallsAnd8Threads) {
  Dispatcher d(reg);
  KernelPolicy p;
  p.set("matmul", std::vector<std::string>{"cublasLt", "cpu_blocked", "cpu_blas"});
  d.set_policy(p);
  Decision first = d.select(ctx());
  EXPECT_EQ(first.chosen, "cpu_blocked");
  for (int i = 0; i < 100; ++i) {
    Decision again = d.select(ctx());
    ASSERT_EQ(again.chosen, first.chosen);
    ASSERT_EQ(again.rule, first.rule);
    ASSERT_EQ(again.to_json().substr(0, 200), first.to_json().substr(0, 200));
  }
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        Decision x = d.select(ctx());
        if (x.chosen != first.chosen || x.rule != first.rule ||
            x.candidates.size() != first.candidates.size()) {
          ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(d.log().total_recorded(), 1u + 100u + 1600u);
}

TEST_F(DispatchTest, ScopedPolicyIsPerThread) {
  Dispatcher d(reg);
  d.set_policy(policy("cpu_blas", KernelPolicy::Mode::Require));
  {
    Dispatcher::ScopedPolicy scope(d, policy("cpu_blocked", KernelPolicy::Mode::Require));
    EXPECT_EQ(d.select(ctx()).chosen, "cpu_blocked");
    std::string other;
    std::thread([&] { other = d.select(ctx()).chosen; }).join();
    EXPECT_EQ(other, "cpu_blas");  // another thread sees the global policy
  }
  EXPECT_EQ(d.select(ctx()).chosen, "cpu_blas");
  EXPECT_THROW(d.set_policy(KernelPolicy{}.set("matmul", "cpu_blsa")), PolicyError);
}

TEST(DecisionLog, BoundedRing) {
  DecisionLog log(3);
  for (int i = 0; i < 5; ++i) {
    Decision d;
    d.op = "op" + std::to_string(i);
    log.append(d);
  }
  auto all = log.snapshot();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].op, "op2");
  EXPECT_EQ(all[0].seq, 3u);
  EXPECT_EQ(log.snapshot(1)[0].op, "op4");
  EXPECT_EQ(log.total_recorded(), 5u);
  log.clear();
  EXPECT_EQ(log.size(), 0u);
}
