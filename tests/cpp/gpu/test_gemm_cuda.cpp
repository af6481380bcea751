// The cuBLAS and cuBLASLt matmul kernels on a real GPU against a float64 host
// reference: fp32 (tf32 only when allowed), fp16, bf16; M from 1 to 16 and larger
// odd shapes; transposed operands; strided and broadcast batches; cuBLASLt's
// epilogues; explicit algorithms (every heuristic candidate gives the same bits
// when rerun); malformed and misfitting algorithm ids; the workspace limit; work
// on a caller's stream. Skips with the reason where no CUDA device is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/matmul/cpu_gemm_common.h"
#include "ops/matmul/matmul_call.h"
#include "ops/matmul/matmul_op.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/stream.h"

namespace xpuruntime::matmul {
namespace {

uint64_t seed() {
  static const uint64_t s = std::random_device{}();
  return s;
}

class GemmCuda : public ::testing::Test {
 public:
  void SetUp() override {
    if (DeviceManager::instance().get_device_count() == 0) {
      GTEST_SKIP() << "no CUDA device: " << DeviceManager::instance().accelerator_unavailable_reason();
    }
  }
  std::mt19937_64 rng{seed()};

  // A host tensor of `shape` with uniform values in [-1, 1), stored as dtype.
  Tensor random_host(const Shape& shape, DType t) {
    Tensor x = Tensor::empty(shape, t, Device::cpu());
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float v = u(rng);
      switch (t) {
        case DType::kFloat16: x.data<Half>()[i] = {float_to_half(v)}; break;
        case DType::kBFloat16: x.data<BFloat16>()[i] = {float_to_bf16(v)}; break;
        default: x.data<float>()[i] = v; break;
      }
    }
    return x;
  }
  static double at(const Tensor& x, int64_t i) {
    switch (x.dtype()) {
      case DType::kFloat16: return half_to_float(x.data<Half>()[i].bits);
      case DType::kBFloat16: return bf16_to_float(x.data<BFloat16>()[i].bits);
      default: return x.data<float>()[i];
    }
  }
  // Copies complete before the next kernel on any stream (the tests also run on
  // non-blocking streams, which do not wait for the legacy default stream).
  static Tensor gpu(const Tensor& h) {
    Tensor d = h.to(Device::parse("cuda:0"));
    DeviceManager::instance().synchronize(0);
    return d;
  }
  static Tensor host(const Tensor& d) {
    DeviceManager::instance().synchronize(0);
    Tensor h = d.to(Device::cpu());
    DeviceManager::instance().synchronize(0);
    return h;
  }
};

struct Case {
  DType dtype;
  int64_t batch, m, n, k;
  bool ta = false, tb = false;  // operand stored transposed (a view)
  bool bias = false;
  Activation act = Activation::kNone;
  bool b_broadcast = false;  // b is 2-D while a is batched
};

std::string describe(const Case& c) {
  return std::string(dtype_name(c.dtype)) + " b" + std::to_string(c.batch) + " " + std::to_string(c.m) +
         "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + (c.ta ? " aT" : "") +
         (c.tb ? " bT" : "") + (c.bias ? " bias" : "") + " " + std::string(activation_name(c.act)) +
         (c.b_broadcast ? " b-bcast" : "") + " seed " + std::to_string(seed());
}

// Runs `kernel` on a case and checks every element against float64. Returns the
// output bytes (for determinism checks).
std::vector<unsigned char> run_and_check(GemmCuda& t, const std::string& kernel, const Case& c,
                                         const ExecutionPolicy* ep = nullptr,
                                         const std::string& algorithm = "", double u_acc = 0) {
  const int64_t bb = c.b_broadcast ? 1 : c.batch;
  Shape a_store = c.ta ? Shape{c.batch, c.k, c.m} : Shape{c.batch, c.m, c.k};
  Shape b_store = c.tb ? Shape{bb, c.n, c.k} : Shape{bb, c.k, c.n};
  Tensor ah = t.random_host(a_store, c.dtype), bh = t.random_host(b_store, c.dtype);
  Tensor biash = t.random_host({c.n}, c.dtype);
  Tensor ad = GemmCuda::gpu(ah), bd = GemmCuda::gpu(bh), biasd = GemmCuda::gpu(biash);
  if (c.ta) ad = ad.transpose(1, 2);
  if (c.tb) bd = bd.transpose(1, 2);
  if (c.b_broadcast) {
    bd = GemmCuda::gpu(bh).reshape(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n});
    if (c.tb) bd = bd.transpose(0, 1);
  }
  MatmulArgs args;
  args.a = ad;
  args.b = bd;
  if (c.bias) args.bias = biasd;
  args.activation = c.act;
  args.execution = ep;
  Tensor out = matmul_with_kernel(kernel, args, algorithm);
  Tensor oh = GemmCuda::host(out);
  const double u_out = c.dtype == DType::kFloat16 ? std::ldexp(1.0, -11)
                       : c.dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
  if (u_acc == 0) u_acc = std::ldexp(1.0, -24);
  int64_t bad = 0;
  for (int64_t bi = 0; bi < c.batch; ++bi) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t q = 0; q < c.k; ++q) {
          const int64_t ai = c.ta ? (bi * c.k + q) * c.m + i : (bi * c.m + i) * c.k + q;
          const int64_t bbi = c.b_broadcast ? 0 : bi;
          const int64_t bj = c.tb ? (bbi * c.n + j) * c.k + q : (bbi * c.k + q) * c.n + j;
          const double p = GemmCuda::at(ah, ai) * GemmCuda::at(bh, bj);
          ref += p;
          mag += std::abs(p);
        }
        if (c.bias) {
          ref += GemmCuda::at(biash, j);
          mag += std::abs(GemmCuda::at(biash, j));
        }
        const double pre = ref;
        ref = activate(ref, c.act);
        // cuBLASLt's GELU may use a fast tanh (about 2^-11 relative): allow 1e-3·(1+|x|)
        // on top; a wrong activation or a missing bias is off by 1e-1 or more.
        const double tol = 1.2 * (c.k + 4) * u_acc * mag + 4 * u_out * std::abs(ref) +
                           (c.act == Activation::kGelu ? 1e-3 * (1 + std::abs(pre)) : 0.0) + 1e-30;
        const double got = GemmCuda::at(oh, (bi * c.m + i) * c.n + j);
        if (!(std::abs(got - ref) <= tol) && bad++ < 3) {
          ADD_FAILURE() << kernel << " " << describe(c) << " C[" << bi << "," << i << "," << j
                        << "]=" << got << " ref " << ref << " tol " << tol;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << kernel << " " << describe(c);
  std::vector<unsigned char> bytes(oh.nbytes());
  std::memcpy(bytes.data(), oh.data_ptr(), bytes.size());
  return bytes;
}

TEST_F(GemmCuda, BothKernelsAllDtypesSmallMAndOddShapes) {
  for (const char* kernel : {"cublas", "cublasLt"}) {
    for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (int64_t m = 1; m <= 16; ++m) {
        run_and_check(*this, kernel, {dt, 1, m, 96 + 8 * m, 64 + 16 * (m % 3)});
      }
      run_and_check(*this, kernel, {dt, 1, 257, 130, 333});
      run_and_check(*this, kernel, {dt, 3, 40, 72, 200, true, false});
      run_and_check(*this, kernel, {dt, 2, 33, 64, 128, false, true});
      run_and_check(*this, kernel, {dt, 4, 16, 256, 512, true, true});
      Case bc{dt, 3, 24, 48, 96};
      bc.b_broadcast = true;
      run_and_check(*this, kernel, bc);
    }
  }
}

TEST_F(GemmCuda, CublasLtEpilogues) {
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kGelu}) {
      for (bool bias : {false, true}) {
        if (!bias && act == Activation::kNone) continue;
        Case c{dt, 2, 13, 72, 160};
        c.bias = bias;
        c.act = act;
        run_and_check(*this, "cublasLt", c);
        c.batch = 1;
        c.m = 4;
        c.tb = true;
        run_and_check(*this, "cublasLt", c);
      }
    }
  }
}

TEST_F(GemmCuda, CublasRefusesEpiloguesWithAReason) {
  MatmulArgs args;
  args.a = gpu(random_host({4, 8}, DType::kFloat16));
  args.b = gpu(random_host({8, 16}, DType::kFloat16));
  args.activation = Activation::kRelu;
  try {
    matmul_with_kernel("cublas", args);
    FAIL() << "cublas ran an epilogue";
  } catch (const UnsupportedOperationError& e) {
    EXPECT_NE(std::string(e.what()).find("attribute_unsupported"), std::string::npos) << e.what();
  }
}

TEST_F(GemmCuda, Tf32OnlyWhenThePolicyAllowsIt) {
  // K = 2048 fp32: exact fp32 accumulation meets the fp32 bound; tf32 (10-bit
  // mantissa inputs) is far outside it but inside the tf32 bound.
  Case c{DType::kFloat32, 1, 64, 64, 2048};
  for (const char* kernel : {"cublas", "cublasLt"}) {
    run_and_check(*this, kernel, c);  // default: no tf32, fp32 bound
    ExecutionPolicy ep;
    ep.allow_tf32 = true;
    run_and_check(*this, kernel, c, &ep, "", std::ldexp(1.0, -11));
  }
}

TEST_F(GemmCuda, EveryHeuristicAlgorithmIsCorrectAndRepeatsItsBits) {
  Case c{DType::kFloat16, 2, 16, 512, 1024};
  KernelPtr lt = KernelRegistry::instance().find(kOpKey, "cublasLt");
  if (!lt) {
    MatmulArgs warm;  // the first CUDA matmul registers the plugin's kernels
    warm.a = gpu(random_host({2, 2}, DType::kFloat16));
    warm.b = gpu(random_host({2, 2}, DType::kFloat16));
    matmul_with_kernel("cublasLt", warm);
    lt = KernelRegistry::instance().find(kOpKey, "cublasLt");
  }
  ASSERT_NE(lt, nullptr);
  OpContext ctx;
  ctx.op = kOpKey;
  ctx.device = Device::parse("cuda:0");
  ctx.capability = 90;
  ctx.inputs = {{DType::kFloat16, {2, 16, 1024}, {}}, {DType::kFloat16, {2, 1024, 512}, {}}};
  ctx.outputs = {{DType::kFloat16, {2, 16, 512}, {}}};
  std::vector<std::string> algos = lt->algorithms(ctx);
  ASSERT_FALSE(algos.empty());
  for (const auto& id : algos) {
    EXPECT_EQ(id.rfind("lt1:", 0), 0u) << id;
    EXPECT_EQ(id.size(), 4u + 128u) << id;
    rng.seed(seed() + 7);  // same inputs for both runs
    auto first = run_and_check(*this, "cublasLt", c, nullptr, id);
    rng.seed(seed() + 7);
    auto second = run_and_check(*this, "cublasLt", c, nullptr, id);
    EXPECT_EQ(first, second) << "algorithm " << id << " is not bitwise reproducible";
  }
}

TEST_F(GemmCuda, MalformedAndMisfittingAlgorithmIdsAreTypedErrors) {
  MatmulArgs args;
  args.a = gpu(random_host({8, 32}, DType::kFloat16));
  args.b = gpu(random_host({32, 16}, DType::kFloat16));
  EXPECT_THROW(matmul_with_kernel("cublasLt", args, "lt1:zz"), InvalidArgumentError);
  EXPECT_THROW(matmul_with_kernel("cublasLt", args, std::string("lt1:") + std::string(128, 'g')),
               InvalidArgumentError);
  // All-ones words are no algorithm cuBLASLt knows.
  try {
    matmul_with_kernel("cublasLt", args, std::string("lt1:") + std::string(128, 'f'));
    FAIL() << "a garbage algorithm ran";
  } catch (const UnsupportedOperationError& e) {
    EXPECT_NE(std::string(e.what()).find("re-tune"), std::string::npos) << e.what();
  }
}

TEST_F(GemmCuda, WorkspaceLimitIsHonoured) {
  Case c{DType::kFloat16, 1, 16, 4096, 4096};
  ExecutionPolicy ep;
  ep.workspace_limit_bytes = 1;  // cuBLASLt: only algorithms that need no workspace
  run_and_check(*this, "cublasLt", c, &ep);
  try {  // cuBLAS cannot run every routine below 16 KiB: refused with the reason
    run_and_check(*this, "cublas", c, &ep);
    FAIL() << "cublas accepted a 1-byte workspace";
  } catch (const UnsupportedOperationError& e) {
    EXPECT_NE(std::string(e.what()).find("workspace_exceeded"), std::string::npos) << e.what();
  }
  ep.workspace_limit_bytes = 64 << 10;
  run_and_check(*this, "cublas", c, &ep);
  run_and_check(*this, "cublasLt", c, &ep);
}

TEST_F(GemmCuda, RunsOnTheCallersStream) {
  auto s = StreamManager::instance().create_stream(Device::parse("cuda:0"));
  auto previous = StreamManager::instance().current_stream(Device::parse("cuda:0"));
  StreamManager::instance().set_current_stream(s);
  Case c{DType::kBFloat16, 2, 8, 128, 256};
  c.bias = true;
  c.act = Activation::kGelu;
  run_and_check(*this, "cublasLt", c);
  run_and_check(*this, "cublas", Case{DType::kFloat16, 2, 8, 128, 256});
  StreamManager::instance().set_current_stream(previous);
}

}  // namespace
}  // namespace xpuruntime::matmul
