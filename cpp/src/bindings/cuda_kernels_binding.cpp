// _core.cuda_kernels: our attention and LayerNorm CUDA kernels for callers that
// own their tensors (the column sums run as the registry's kernel: _core.routed) (xpuruntime.pytorch passes raw device pointers, element
// strides and the current torch stream as integers, so _core never links torch).
// Declarations and exports only: the kernels live in the CUDA plugin and are
// reached through plugin_lookup with the C ABI of xpuruntime/cuda_kernels_abi.h,
// so this file has no CUDA headers and the same functions exist in a CPU-only
// build, where they raise BackendUnavailableError.
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <string>

#include "bindings/bindings.h"
#include "xpuruntime/cuda_kernels_abi.h"
#include "xpuruntime/error.h"
#include "xpuruntime/plugin.h"

namespace xpuruntime::bindings {
namespace {

namespace ck = cuda_kernels;
using Stride3 = std::array<int64_t, 3>;
using Stride4 = std::array<int64_t, 4>;
using Shape6 = std::array<int32_t, 6>;

const std::string& plugin_name() {
  static const std::string name = "cuda";  // the CUDA plugin's kernel entries (cuda_kernels_abi.h)
  return name;
}

// Why the kernels cannot run here ("" when they can).
std::string unavailable_reason() {
  const PluginStatus& st = load_plugin(plugin_name());
  if (!st.loaded) {
    return "the CUDA plugin is not loaded (" + (st.error.empty() ? st.path : st.error) +
           "); build with CUDA (XRT_CUDA=ON) and install the NVIDIA driver";
  }
  if (plugin_lookup(plugin_name(), ck::entry::kFlashForward) == nullptr) {
    return "the CUDA plugin at " + st.path + " has no attention kernels (rebuild it)";
  }
  return "";
}

template <typename Fn>
Fn entry(const char* name) {
  const auto fn = plugin_entry<Fn>(plugin_name(), name);
  if (fn == nullptr) {
    XRT_THROW(BackendUnavailableError, "xpuruntime CUDA kernels unavailable: ", unavailable_reason(),
              " (looking for ", name, ")");
  }
  return fn;
}

// Runs a plugin entry (GIL released) and turns its status into our exception.
template <typename Args>
void call(const char* name, const Args& args) {
  const auto fn = entry<ck::LaunchEntry<Args>>(name);
  char err[1024] = {0};
  ck::KernelStatus status = ck::KernelStatus::kOk;
  {
    py::gil_scoped_release release;
    status = fn(&args, err, sizeof(err));
  }
  ck::throw_kernel_status(status, err);
}

const void* ptr(int64_t p) { return reinterpret_cast<const void*>(static_cast<uintptr_t>(p)); }
void* mptr(int64_t p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

ck::KernelDType flash_dtype(const std::string& s) {
  if (s == "float16") return ck::KernelDType::kFloat16;
  if (s == "bfloat16") return ck::KernelDType::kBFloat16;
  XRT_THROW(InvalidArgumentError, "flash attention: dtype must be 'float16' or 'bfloat16', got '", s, "'");
}

ck::KernelDType ln_dtype(const std::string& s) {
  if (s == "float32") return ck::KernelDType::kFloat32;
  if (s == "float16") return ck::KernelDType::kFloat16;
  if (s == "bfloat16") return ck::KernelDType::kBFloat16;
  XRT_THROW(InvalidArgumentError, "layernorm: dtype must be 'float32', 'float16' or 'bfloat16', got '", s, "'");
}

ck::FlashStrides strides(const Stride3& s) { return ck::FlashStrides{s[0], s[1], s[2]}; }

ck::FlashShape shape(const Shape6& s) { return ck::FlashShape{s[0], s[1], s[2], s[3], s[4], s[5]}; }

ck::FlashMask mask(const std::string& kind, int64_t p, const Stride4& s) {
  ck::FlashMask m;
  if (kind == "none") {
    m.kind = ck::FlashMaskKind::kNone;
  } else if (kind == "bool") {
    m.kind = ck::FlashMaskKind::kBool;
  } else if (kind == "additive") {
    m.kind = ck::FlashMaskKind::kAdditiveF32;
  } else {
    XRT_THROW(InvalidArgumentError, "flash attention: mask_kind must be 'none', 'bool' or 'additive', got '",
              kind, "'");
  }
  m.ptr = ptr(p);
  m.stride_b = s[0];
  m.stride_h = s[1];
  m.stride_q = s[2];
  m.stride_k = s[3];
  return m;
}

}  // namespace

void bind_cuda_kernels(py::module_& m) {
  py::module_ k = m.def_submodule(
      "cuda_kernels",
      "Our CUDA kernels (FlashAttention-2, fused LayerNorm) on raw device pointers: "
      "pointers, element strides and the CUDA stream are integers.");

  k.def("unavailable_reason", &unavailable_reason,
        "Why the kernels cannot run in this process, or '' when they can.");

  k.def(
      "flash_attention_forward",
      [](const std::string& dtype, const Shape6& shp, int64_t q, int64_t kk, int64_t v, int64_t out,
         int64_t lse, const Stride3& q_stride, const Stride3& k_stride, const Stride3& v_stride,
         const Stride3& out_stride, float scale, bool causal, const std::string& mask_kind,
         int64_t mask_ptr, const Stride4& mask_stride, float dropout_p, int64_t rng_state,
         int64_t stream) {
        ck::FlashFwdArgs a;
        a.dtype = flash_dtype(dtype);
        a.shape = shape(shp);
        a.q = ptr(q), a.k = ptr(kk), a.v = ptr(v), a.o = mptr(out);
        a.lse = static_cast<float*>(mptr(lse));
        a.q_stride = strides(q_stride), a.k_stride = strides(k_stride);
        a.v_stride = strides(v_stride), a.o_stride = strides(out_stride);
        a.scale = scale;
        a.causal = causal;
        a.mask = mask(mask_kind, mask_ptr, mask_stride);
        a.dropout_p = dropout_p;
        a.rng_state = static_cast<const int64_t*>(ptr(rng_state));
        a.stream = mptr(stream);
        call(ck::entry::kFlashForward, a);
      },
      py::kw_only(), py::arg("dtype"), py::arg("shape"), py::arg("q"), py::arg("k"), py::arg("v"),
      py::arg("out"), py::arg("lse"), py::arg("q_stride"), py::arg("k_stride"), py::arg("v_stride"),
      py::arg("out_stride"), py::arg("scale"), py::arg("causal"), py::arg("mask_kind") = "none",
      py::arg("mask") = 0, py::arg("mask_stride") = Stride4{0, 0, 0, 0}, py::arg("dropout_p") = 0.0f,
      py::arg("rng_state") = 0, py::arg("stream") = 0,
      "FlashAttention-2 forward. shape = (B, Hq, Hkv, Sq, Sk, D); q/k/v/out are [B, H, S, D] "
      "with (b, h, s) element strides; lse is fp32 [B, Hq, Sq]. Asynchronous on `stream`.");

  k.def(
      "flash_attention_backward",
      [](const std::string& dtype, const Shape6& shp, int64_t q, int64_t kk, int64_t v, int64_t out,
         int64_t dout, int64_t lse, int64_t dq, int64_t dk, int64_t dv, int64_t dq_accum,
         int64_t dsum, const Stride3& q_stride, const Stride3& k_stride, const Stride3& v_stride,
         const Stride3& out_stride, const Stride3& dout_stride, const Stride3& dq_stride,
         const Stride3& dk_stride, const Stride3& dv_stride, float scale, bool causal,
         const std::string& mask_kind, int64_t mask_ptr, const Stride4& mask_stride,
         float dropout_p, int64_t rng_state, int64_t stream) {
        ck::FlashBwdArgs a;
        a.dtype = flash_dtype(dtype);
        a.shape = shape(shp);
        a.q = ptr(q), a.k = ptr(kk), a.v = ptr(v), a.o = ptr(out), a.dout = ptr(dout);
        a.lse = static_cast<const float*>(ptr(lse));
        a.dq = mptr(dq), a.dk = mptr(dk), a.dv = mptr(dv);
        a.dq_accum = static_cast<float*>(mptr(dq_accum));
        a.dsum = static_cast<float*>(mptr(dsum));
        a.q_stride = strides(q_stride), a.k_stride = strides(k_stride);
        a.v_stride = strides(v_stride), a.o_stride = strides(out_stride);
        a.do_stride = strides(dout_stride), a.dq_stride = strides(dq_stride);
        a.dk_stride = strides(dk_stride), a.dv_stride = strides(dv_stride);
        a.scale = scale;
        a.causal = causal;
        a.mask = mask(mask_kind, mask_ptr, mask_stride);
        a.dropout_p = dropout_p;
        a.rng_state = static_cast<const int64_t*>(ptr(rng_state));
        a.stream = mptr(stream);
        call(ck::entry::kFlashBackward, a);
      },
      py::kw_only(), py::arg("dtype"), py::arg("shape"), py::arg("q"), py::arg("k"), py::arg("v"),
      py::arg("out"), py::arg("dout"), py::arg("lse"), py::arg("dq"), py::arg("dk"), py::arg("dv"),
      py::arg("dq_accum"), py::arg("dsum"), py::arg("q_stride"), py::arg("k_stride"),
      py::arg("v_stride"), py::arg("out_stride"), py::arg("dout_stride"), py::arg("dq_stride"),
      py::arg("dk_stride"), py::arg("dv_stride"), py::arg("scale"), py::arg("causal"),
      py::arg("mask_kind") = "none", py::arg("mask") = 0, py::arg("mask_stride") = Stride4{0, 0, 0, 0},
      py::arg("dropout_p") = 0.0f, py::arg("rng_state") = 0, py::arg("stream") = 0,
      "FlashAttention-2 backward. dk/dv are per query head [B, Hq, Sk, D] (sum groups for GQA); "
      "dq_accum fp32 [B, Hq, Sq, D] and dsum fp32 [B, Hq, Sq] are caller-provided workspace.");

  k.def(
      "layernorm_forward",
      [](const std::string& dtype, int64_t rows, int64_t cols, int64_t x, int64_t weight, int64_t bias,
         int64_t y, int64_t mean, int64_t rstd, float eps, int64_t stream, int32_t threads_per_row) {
        ck::LayerNormFwdArgs a;
        a.dtype = ln_dtype(dtype);
        a.rows = rows, a.cols = cols;
        a.x = ptr(x), a.weight = ptr(weight), a.bias = ptr(bias), a.y = mptr(y);
        a.mean = static_cast<float*>(mptr(mean));
        a.rstd = static_cast<float*>(mptr(rstd));
        a.eps = eps;
        a.threads_per_row = threads_per_row;
        a.stream = mptr(stream);
        call(ck::entry::kLayerNormForward, a);
      },
      py::kw_only(), py::arg("dtype"), py::arg("rows"), py::arg("cols"), py::arg("x"),
      py::arg("weight") = 0, py::arg("bias") = 0, py::arg("y"), py::arg("mean"), py::arg("rstd"),
      py::arg("eps"), py::arg("stream") = 0, py::arg("threads_per_row") = 0,
      "Fused LayerNorm forward over contiguous [rows, cols]; mean/rstd are fp32 [rows].");

  auto ln_bwd_args = [](const std::string& dtype, int64_t rows, int64_t cols, int32_t tpr) {
    ck::LayerNormBwdArgs a;
    a.dtype = ln_dtype(dtype);
    a.rows = rows, a.cols = cols;
    a.threads_per_row = tpr;
    return a;
  };

  k.def(
      "layernorm_backward_workspace_bytes",
      [ln_bwd_args](const std::string& dtype, int64_t rows, int64_t cols, int32_t threads_per_row) {
        const ck::LayerNormBwdArgs a = ln_bwd_args(dtype, rows, cols, threads_per_row);
        const auto fn = entry<ck::LayerNormWorkspaceEntry>(ck::entry::kLayerNormBackwardWorkspace);
        char err[1024] = {0};
        int64_t bytes = 0;
        ck::throw_kernel_status(fn(&a, &bytes, err, sizeof(err)), err);
        return bytes;
      },
      py::kw_only(), py::arg("dtype"), py::arg("rows"), py::arg("cols"),
      py::arg("threads_per_row") = 0,
      "Bytes of fp32 workspace layernorm_backward needs on the current CUDA device.");

  k.def(
      "layernorm_backward",
      [ln_bwd_args](const std::string& dtype, int64_t rows, int64_t cols, int64_t dy, int64_t x,
                    int64_t mean, int64_t rstd, int64_t weight, int64_t dx, int64_t dweight,
                    int64_t dbias, int64_t workspace, int64_t workspace_bytes, int64_t stream,
                    int32_t threads_per_row) {
        ck::LayerNormBwdArgs a = ln_bwd_args(dtype, rows, cols, threads_per_row);
        a.dy = ptr(dy), a.x = ptr(x), a.weight = ptr(weight);
        a.mean = static_cast<const float*>(ptr(mean));
        a.rstd = static_cast<const float*>(ptr(rstd));
        a.dx = mptr(dx), a.dweight = mptr(dweight), a.dbias = mptr(dbias);
        a.workspace = static_cast<float*>(mptr(workspace));
        a.workspace_bytes = workspace_bytes;
        a.stream = mptr(stream);
        call(ck::entry::kLayerNormBackward, a);
      },
      py::kw_only(), py::arg("dtype"), py::arg("rows"), py::arg("cols"), py::arg("dy"), py::arg("x"),
      py::arg("mean"), py::arg("rstd"), py::arg("weight") = 0, py::arg("dx"), py::arg("dweight") = 0,
      py::arg("dbias") = 0, py::arg("workspace"), py::arg("workspace_bytes"), py::arg("stream") = 0,
      py::arg("threads_per_row") = 0,
      "Fused LayerNorm backward: dx, and dweight/dbias (pass 0 to skip) via the fp32 workspace.");

  k.def(
      "layernorm_set_config",
      [](const std::string& spec) {
        const auto fn = entry<ck::LayerNormSetConfigEntry>(ck::entry::kLayerNormSetConfig);
        char err[1024] = {0};
        ck::throw_kernel_status(fn(spec.c_str(), err, sizeof(err)), err);
      },
      py::arg("spec"),
      "Forces the LayerNorm launch configuration of every later launch in this process "
      "('tpr=..,grid=persistent|tile,prefetch=0|1,hint=default|cs|nol1'; '' clears it). "
      "For sweeps and tests.");

  k.def(
      "layernorm_describe_config",
      [](const std::string& dtype, int64_t rows, int64_t cols) {
        const auto fn = entry<ck::LayerNormDescribeConfigEntry>(ck::entry::kLayerNormDescribeConfig);
        char out[256] = {0};
        ck::throw_kernel_status(fn(ln_dtype(dtype), rows, cols, out, sizeof(out)), out);
        return std::string(out);
      },
      py::kw_only(), py::arg("dtype"), py::arg("rows"), py::arg("cols"),
      "The LayerNorm forward configuration a launch of this shape would use now "
      "('tpr=..,grid=..,hint=..,prefetch=..').");
}

}  // namespace xpuruntime::bindings
