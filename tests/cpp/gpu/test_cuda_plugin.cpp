// The CUDA plugin's one entry: loading it registers every kernel family (no matmul
// needed first), its lookup resolves every entry point of cuda_kernels_abi.h, and the
// KernelDefs of flash_v2, the fused LayerNorm and column sums choose and run like the
// torch bridge's calls, against float64 host references on random inputs.
// Registration and supports() tests need only a loadable plugin; the kernel runs skip
// without a CUDA device.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half_float.h"
#include "xpuruntime/backend.h"
#include "xpuruntime/cpu_plugin_abi.h"
#include "xpuruntime/cuda_kernels_abi.h"
#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/plugin.h"
#include "xpuruntime/tensor.h"

namespace xpuruntime {
namespace {

namespace ck = cuda_kernels;

class CudaPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    const PluginStatus& st = load_plugin("cuda");
    if (!st.loaded) GTEST_SKIP() << "CUDA plugin not loaded: " << st.error;
  }
  // Why kernels cannot run here ("" when a CUDA device exists).
  static std::string no_device() {
    DeviceManager& dm = DeviceManager::instance();
    return dm.get_device_count() > 0 ? "" : "no CUDA device: " + dm.accelerator_unavailable_reason();
  }
};

TEST_F(CudaPlugin, LoadingRegistersEveryKernelFamily) {
  const KernelRegistry& r = KernelRegistry::instance();
  for (const auto& [op, name] :
       std::vector<std::pair<std::string, std::string>>{{"matmul", "cublas"},
                                                        {"matmul", "cublasLt"},
                                                        {"matmul", "skinny"},
                                                        {"attention", "flash_v2"},
                                                        {"layernorm", "fused"},
                                                        {"column_sums", "column_sums"}}) {
    KernelPtr k = r.find(op, name);
    ASSERT_NE(k, nullptr) << op << "/" << name << " not registered by load_plugin(\"cuda\")";
    EXPECT_EQ(k->def().device, DeviceKind::named("cuda")) << op << "/" << name;
  }
  auto defs = r.list(std::string("attention"), DeviceKind::named("cuda"));
  EXPECT_TRUE(std::any_of(defs.begin(), defs.end(), [](const KernelDef& d) { return d.name == "flash_v2"; }));
}

TEST_F(CudaPlugin, LookupResolvesEveryEntryAndNothingElse) {
  for (const char* name :
       {ck::entry::kFlashForward, ck::entry::kFlashBackward, ck::entry::kLayerNormForward,
        ck::entry::kLayerNormBackward, ck::entry::kLayerNormBackwardWorkspace, ck::entry::kLayerNormSetConfig,
        ck::entry::kLayerNormDescribeConfig, ck::entry::kColumnSums, ck::entry::kColumnSumsWorkspace,
        ck::entry::kStridedCopy, ck::entry::kTestSpin, ck::entry::kTestAxpy, ck::entry::kTestErrorName}) {
    EXPECT_NE(plugin_lookup("cuda", name), nullptr) << name;
  }
  EXPECT_EQ(plugin_lookup("cuda", "xrt_flash_attention_forward"), nullptr);  // the old exports are gone
  EXPECT_EQ(plugin_lookup("cuda", "no_such_entry"), nullptr);
  EXPECT_EQ(plugin_lookup("cuda", nullptr), nullptr);
}

TEST_F(CudaPlugin, EntriesReturnTypedStatusesWithMessages) {
  const auto ws = plugin_entry<ck::ColumnSumsWorkspaceEntry>("cuda", ck::entry::kColumnSumsWorkspace);
  ASSERT_NE(ws, nullptr);
  char err[256] = {0};
  int64_t bytes = -1;
  EXPECT_EQ(ws(4096, 768, &bytes, err, sizeof(err)), ck::KernelStatus::kOk);
  EXPECT_GT(bytes, 0);
  EXPECT_EQ(ws(-1, 768, &bytes, err, sizeof(err)), ck::KernelStatus::kInvalidArgument);
  EXPECT_NE(std::string(err).find("non-negative"), std::string::npos) << err;
  EXPECT_THROW(ck::throw_kernel_status(ck::KernelStatus::kInvalidArgument, err), InvalidArgumentError);

  const auto set_config = plugin_entry<ck::LayerNormSetConfigEntry>("cuda", ck::entry::kLayerNormSetConfig);
  ASSERT_NE(set_config, nullptr);
  std::memset(err, 0, sizeof(err));
  EXPECT_EQ(set_config("tpr=48", err, sizeof(err)), ck::KernelStatus::kInvalidArgument);
  EXPECT_NE(std::string(err).find("power of two"), std::string::npos) << err;
  EXPECT_EQ(set_config("", err, sizeof(err)), ck::KernelStatus::kOk);

  // A launcher's own argument check comes back as kInvalidArgument, not a crash.
  const auto fwd = plugin_entry<ck::LaunchEntry<ck::FlashFwdArgs>>("cuda", ck::entry::kFlashForward);
  ASSERT_NE(fwd, nullptr);
  ck::FlashFwdArgs bad;
  bad.shape = ck::FlashShape{1, 1, 1, 8, 8, 80};
  EXPECT_EQ(fwd(&bad, err, sizeof(err)), ck::KernelStatus::kInvalidArgument);
  EXPECT_NE(std::string(err).find("head_dim"), std::string::npos) << err;
}

TEST_F(CudaPlugin, InitRefusesAnotherApiVersion) {
  std::string path;
  for (const PluginStatus& st : plugin_statuses()) {
    if (st.name == "cuda") path = st.path;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // the loaded plugin: same handle
  ASSERT_NE(handle, nullptr) << dlerror();
  auto init = reinterpret_cast<PluginInitFn>(dlsym(handle, kPluginInitSymbol));
  ASSERT_NE(init, nullptr);
  PluginEntry entry;
  EXPECT_NE(init(kPluginApiVersion + 1, &entry), 0);
  EXPECT_EQ(entry.api_version, kPluginApiVersion);
  EXPECT_EQ(entry.backend, nullptr);
  EXPECT_NE(entry.unavailable_reason.find("API version"), std::string::npos) << entry.unavailable_reason;
  EXPECT_NE(init(kPluginApiVersion, nullptr), 0);
  dlclose(handle);
}

// The registry side of plugins, whatever the machine: the built-in CPU plugin, an
// unknown plugin as a status, not an exception.
TEST(PluginRegistry, BuiltInCpuPluginAndUnknownPlugins) {
  DeviceManager::instance();  // starts the built-in plugin
  const PluginStatus& cpu = load_plugin("cpu");
  EXPECT_TRUE(cpu.loaded) << cpu.error;
  EXPECT_EQ(cpu.path, "built-in");
  std::string why = "unset";
  DeviceBackend* b = plugin_backend("cpu", &why);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b, &DeviceManager::instance().backend(DeviceKind::cpu()));
  EXPECT_EQ(why, "");
  EXPECT_NE(plugin_lookup("cpu", cpu::entry::kGemmInfo), nullptr);
  EXPECT_NE(plugin_lookup("cpu", cpu::entry::kScratchPeakBytes), nullptr);
  EXPECT_EQ(plugin_lookup("cpu", "no_such_entry"), nullptr);
  std::string isa;
  plugin_entry<cpu::GemmInfoEntry>("cpu", cpu::entry::kGemmInfo)(&isa, nullptr, nullptr);
  EXPECT_FALSE(isa.empty());

  const PluginStatus& none = load_plugin("no_such_device");
  EXPECT_FALSE(none.loaded);
  EXPECT_NE(none.error.find("libxpuruntime_no_such_device.so"), std::string::npos) << none.error;
  EXPECT_EQ(plugin_backend("no_such_device", &why), nullptr);
  EXPECT_NE(why.find("plugin not loaded"), std::string::npos) << why;
  EXPECT_EQ(plugin_lookup("no_such_device", "anything"), nullptr);
  EXPECT_EQ(plugin_for_device(DeviceKind::cpu()), "cpu");
  EXPECT_EQ(plugin_for_device(DeviceKind::named("cuda")), "cuda");
}

OpContext attention_ctx(DType dt, int64_t d, int capability) {
  OpContext ctx;
  ctx.op = "attention";
  ctx.device = Device::parse("cuda:0");
  ctx.capability = capability;
  ctx.inputs = {{dt, {1, 4, 16, d}, {}}, {dt, {1, 2, 16, d}, {}}, {dt, {1, 2, 16, d}, {}}};
  ctx.outputs = {{dt, {1, 4, 16, d}, {}}};
  return ctx;
}

TEST_F(CudaPlugin, FlashSupportsGivesThePythonReasons) {
  KernelPtr k = KernelRegistry::instance().find("attention", "flash_v2");
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(KernelRegistry::check(*k, attention_ctx(DType::kFloat16, 64, 90)).ok);
  EXPECT_TRUE(KernelRegistry::check(*k, attention_ctx(DType::kBFloat16, 128, 90)).ok);
  EXPECT_EQ(KernelRegistry::check(*k, attention_ctx(DType::kFloat16, 80, 90)).reason_code,
            reason::kShapeUnsupported);
  EXPECT_EQ(KernelRegistry::check(*k, attention_ctx(DType::kFloat32, 64, 90)).reason_code,
            reason::kDtypeUnsupported);
  EXPECT_EQ(KernelRegistry::check(*k, attention_ctx(DType::kFloat16, 64, 80)).reason_code,
            reason::kCapabilityTooLow);
  OpContext gqa = attention_ctx(DType::kFloat16, 64, 90);
  gqa.inputs[1].shape[1] = gqa.inputs[2].shape[1] = 3;  // 4 query heads over 3 kv heads
  EXPECT_EQ(KernelRegistry::check(*k, gqa).reason_code, reason::kShapeUnsupported);
  OpContext drop = attention_ctx(DType::kFloat16, 64, 90);
  drop.attrs["dropout_p"] = "1.5";
  EXPECT_EQ(KernelRegistry::check(*k, drop).reason_code, reason::kAttributeUnsupported);
  OpContext mask = attention_ctx(DType::kFloat16, 64, 90);
  mask.inputs.push_back({DType::kInt32, {16, 16}, {}});
  EXPECT_EQ(KernelRegistry::check(*k, mask).reason_code, reason::kDtypeUnsupported);
  mask.inputs.back() = {DType::kBool, {3, 16}, {}};
  EXPECT_EQ(KernelRegistry::check(*k, mask).reason_code, reason::kShapeUnsupported);
  mask.inputs.back() = {DType::kBool, {16, 16}, {}};
  EXPECT_TRUE(KernelRegistry::check(*k, mask).ok);
}

// ---- kernel runs against float64 host references ---------------------------------------------
std::vector<float> random_floats(std::size_t n, unsigned seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng) * scale + shift;
  return v;
}

// A CUDA tensor holding `values` rounded to dt; `values` is rounded in place so the
// reference sees exactly what the kernel reads.
Tensor upload(std::vector<float>& values, const Shape& shape, DType dt) {
  Tensor host = Tensor::empty(shape, dt, Device::cpu());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dt == DType::kFloat32) {
      host.data<float>()[i] = values[i];
    } else if (dt == DType::kFloat16) {
      host.data<uint16_t>()[i] = matmul::float_to_half(values[i]);
      values[i] = matmul::half_to_float(host.data<uint16_t>()[i]);
    } else {
      host.data<uint16_t>()[i] = matmul::float_to_bf16(values[i]);
      values[i] = matmul::bf16_to_float(host.data<uint16_t>()[i]);
    }
  }
  Tensor dev = Tensor::empty(shape, dt, Device::parse("cuda:0"));
  dev.copy_from(host);
  return dev;
}

std::vector<double> download(const Tensor& dev) {
  Tensor host = Tensor::empty(dev.shape(), dev.dtype(), Device::cpu());
  host.copy_from(dev);
  std::vector<double> out(static_cast<std::size_t>(host.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (dev.dtype() == DType::kFloat32) {
      out[i] = host.data<float>()[i];
    } else if (dev.dtype() == DType::kFloat16) {
      out[i] = matmul::half_to_float(host.data<uint16_t>()[i]);
    } else {
      out[i] = matmul::bf16_to_float(host.data<uint16_t>()[i]);
    }
  }
  return out;
}

// Runs a registered kernel the way the Dispatcher does: checks, workspace, run, sync.
void run_kernel(const std::string& op, const std::string& name, OpContext ctx, std::vector<Tensor> inputs,
                std::vector<Tensor> outputs) {
  KernelPtr k = KernelRegistry::instance().find(op, name);
  ASSERT_NE(k, nullptr);
  ctx.capability = OpContext::from_tensors(op, inputs, outputs).capability;
  Support s = KernelRegistry::check(*k, ctx);
  ASSERT_TRUE(s.ok) << s.reason_code << ": " << s.detail;
  KernelLaunch launch;
  launch.ctx = &ctx;
  launch.inputs = std::move(inputs);
  launch.outputs = std::move(outputs);
  Tensor ws;
  if (std::size_t bytes = k->workspace_bytes(ctx); bytes > 0) {
    ws = Tensor::empty({static_cast<int64_t>(bytes)}, DType::kUInt8, ctx.device);
    launch.workspace = ws.data_ptr();
    launch.workspace_bytes = bytes;
  }
  k->run(launch);
  DeviceManager::instance().synchronize(ctx.device);
}

TEST_F(CudaPlugin, ColumnSumsKernelMatchesFloat64) {
  if (const std::string why = no_device(); !why.empty()) GTEST_SKIP() << why;
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {77, 300}, {1000, 768}}) {
    std::vector<float> x =
        random_floats(static_cast<std::size_t>(rows * cols), 7u + static_cast<unsigned>(rows));
    Tensor xd = upload(x, {rows, cols}, DType::kBFloat16);
    Tensor out = Tensor::empty({cols}, DType::kBFloat16, Device::parse("cuda:0"));
    OpContext ctx = OpContext::from_tensors("column_sums", {xd}, {out});
    run_kernel("column_sums", "column_sums", ctx, {xd}, {out});
    std::vector<double> got = download(out);
    for (int64_t c = 0; c < cols; ++c) {
      double ref = 0.0, mag = 0.0;
      for (int64_t r = 0; r < rows; ++r) {
        ref += x[static_cast<std::size_t>(r * cols + c)];
        mag += std::fabs(x[static_cast<std::size_t>(r * cols + c)]);
      }
      // One bf16 rounding of an fp32-accumulated sum.
      ASSERT_NEAR(got[static_cast<std::size_t>(c)], ref, 1e-2 * std::fabs(ref) + 1e-5 * mag + 1e-6)
          << "rows=" << rows << " cols=" << cols << " col " << c;
    }
  }
}

TEST_F(CudaPlugin, FusedLayerNormKernelMatchesFloat64) {
  if (const std::string why = no_device(); !why.empty()) GTEST_SKIP() << why;
  const int64_t rows = 37, cols = 768;
  std::vector<float> x = random_floats(rows * cols, 3u, 3.0f, 20.0f);
  std::vector<float> w = random_floats(cols, 4u), b = random_floats(cols, 5u);
  Tensor xd = upload(x, {rows, cols}, DType::kFloat32), wd = upload(w, {cols}, DType::kFloat32),
         bd = upload(b, {cols}, DType::kFloat32);
  Tensor y = Tensor::empty({rows, cols}, DType::kFloat32, Device::parse("cuda:0"));
  OpContext ctx = OpContext::from_tensors("layernorm", {xd, wd, bd}, {y});
  ctx.attrs["epsilon"] = "1e-5";
  run_kernel("layernorm", "fused", ctx, {xd, wd, bd}, {y});
  std::vector<double> got = download(y);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c];
    mean /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
    const double rstd = 1.0 / std::sqrt(var / cols + 1e-5);
    for (int64_t c = 0; c < cols; ++c) {
      const double ref = (x[r * cols + c] - mean) * rstd * w[c] + b[c];
      ASSERT_NEAR(got[r * cols + c], ref, 1e-4 * (1.0 + std::fabs(ref))) << "row " << r << " col " << c;
    }
  }
}

TEST_F(CudaPlugin, FlashV2KernelMatchesFloat64) {
  if (const std::string why = no_device(); !why.empty()) GTEST_SKIP() << why;
  const int64_t B = 1, Hq = 4, Hkv = 2, Sq = 37, Sk = 53, D = 64;
  std::vector<float> q = random_floats(B * Hq * Sq * D, 11u), k = random_floats(B * Hkv * Sk * D, 12u),
                     v = random_floats(B * Hkv * Sk * D, 13u);
  Tensor qd = upload(q, {B, Hq, Sq, D}, DType::kFloat16), kd = upload(k, {B, Hkv, Sk, D}, DType::kFloat16),
         vd = upload(v, {B, Hkv, Sk, D}, DType::kFloat16);
  Tensor o = Tensor::empty({B, Hq, Sq, D}, DType::kFloat16, Device::parse("cuda:0"));
  OpContext ctx = OpContext::from_tensors("attention", {qd, kd, vd}, {o});
  if (ctx.capability < 90) GTEST_SKIP() << "flash_v2 needs sm_90, device is sm" << ctx.capability;
  ctx.attrs["is_causal"] = "1";
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  run_kernel("attention", "flash_v2", ctx, {qd, kd, vd}, {o});
  std::vector<double> got = download(o);
  for (int64_t h = 0; h < Hq; ++h) {
    const int64_t hk = h / (Hq / Hkv);
    for (int64_t i = 0; i < Sq; ++i) {
      std::vector<double> p(Sk, 0.0);
      double mx = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j <= std::min(i, Sk - 1); ++j) {
        double s = 0.0;
        for (int64_t d = 0; d < D; ++d) s += double(q[(h * Sq + i) * D + d]) * k[(hk * Sk + j) * D + d];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j <= std::min(i, Sk - 1); ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t d = 0; d < D; ++d) {
        double ref = 0.0;
        for (int64_t j = 0; j <= std::min(i, Sk - 1); ++j) ref += p[j] / sum * v[(hk * Sk + j) * D + d];
        // fp16 output and fp16 probabilities in the P·V product: a few 1e-3 at most; a wrong
        // mask, scale or head mapping is off by 1e-1 or more.
        ASSERT_NEAR(got[(h * Sq + i) * D + d], ref, 4e-3 + 4e-3 * std::fabs(ref))
            << "head " << h << " query " << i << " dim " << d;
      }
    }
  }
}

}  // namespace
}  // namespace xpuruntime
