// KernelDefs of flash_v2, the fused LayerNorm and column sums (kernel_defs.h).
// supports() holds the CUDA checks of pytorch/ops/attention.py and layernorm.py;
// run() calls the launchers on the call's stream, copying operands whose layout the
// kernels cannot read (as the torch bridge does).
#include "backends/cuda/kernels/kernel_defs.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cuda/cuda_kind.h"
#include "backends/cuda/kernels/column_sums/column_sums_impl.h"
#include "backends/cuda/kernels/flash_v2/flash_v2_impl.h"
#include "backends/cuda/kernels/layernorm/layernorm_impl.h"
#include "xpuruntime/error.h"
#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::cuda_kernels {
namespace {

constexpr int kMinCapability = 90;  // the kernels are built for sm_90
constexpr const char* kProvider = "cuda_raw";

KernelDType kernel_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: return KernelDType::kFloat32;
    case DType::kFloat16: return KernelDType::kFloat16;
    case DType::kBFloat16: return KernelDType::kBFloat16;
    default: break;
  }
  XRT_THROW(InvalidArgumentError, "CUDA kernels take float32/float16/bfloat16, got ", dtype_name(t));
}

Support shape_no(std::string detail) { return Support::no(reason::kShapeUnsupported, std::move(detail)); }

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// t itself when its last dimension is contiguous and its rows and base are 16-byte
// aligned, else a contiguous copy on the same device (what the kernels need).
Tensor rows_aligned(const Tensor& t, NativeStream stream) {
  const int64_t esize = static_cast<int64_t>(t.element_size());
  bool ok = t.dim() > 0 && t.strides().back() == 1 && aligned16(t.data_ptr());
  for (int64_t d = 0; ok && d + 1 < t.dim(); ++d) {
    if (t.shape()[d] > 1 && (t.strides()[d] * esize) % 16 != 0) ok = false;
  }
  if (ok) return t;
  Tensor copy = Tensor::empty(t.shape(), t.dtype(), t.device(), stream);
  copy.copy_from(t, stream);
  return copy;
}

// Element strides of dims 0..2 of a 4-D tensor; size-1 dims (never stepped over) get 0.
FlashStrides strides3(const Tensor& t) {
  auto st = [&](int d) { return t.shape()[d] > 1 ? t.strides()[d] : 0; };
  return FlashStrides{st(0), st(1), st(2)};
}

bool present(const std::vector<TensorSpec>& specs, std::size_t i) {
  return specs.size() > i && specs[i].numel() > 0;
}

// ---- attention / flash_v2 ---------------------------------------------------------------
// inputs: q [B,Hq,Sq,D], k/v [B,Hkv,Sk,D], optional attn_mask (bool/uint8/float32, <= 4-D,
// broadcastable to [B,Hq,Sq,Sk]; 0 elements = none), optional rng_state (int64 [2] on the
// device; needed when dropout_p > 0). outputs: out [B,Hq,Sq,D], optional lse fp32 [B,Hq,Sq].
// attrs: scale (default 1/sqrt(D)), is_causal (0/1), dropout_p (default 0), with_backward (0/1:
// refuse head dims the backward kernels lack).
class FlashAttention final : public Kernel {
 public:
  FlashAttention() : Kernel(make_def()) {}

  Support supports(const OpContext& ctx) const override {
    if (ctx.inputs.size() < 3 || ctx.inputs.size() > 5 || ctx.outputs.empty()) {
      return shape_no("attention takes q, k, v[, attn_mask[, rng_state]] and out[, lse]");
    }
    const TensorSpec &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2];
    if (q.shape.size() != 4 || k.shape.size() != 4 || v.shape.size() != 4) {
      return shape_no("query/key/value must be 4-D [batch, heads, seq, head_dim]");
    }
    // The native engine's "_bshd" inputs are [B, S, H, D]: read through their strides.
    const int bshd = static_cast<int>(ctx.attr_int("_bshd", 0));
    if (bshd < 0 || bshd > 15) return shape_no("_bshd must be a mask of Q 1, K 2, V 4, output 8");
    auto logical = [&](const Shape& s, int bit) {
      return (bshd & bit) ? Shape{s[0], s[2], s[1], s[3]} : s;
    };
    const Shape qs = logical(q.shape, 1), ks = logical(k.shape, 2), vs = logical(v.shape, 4);
    if (q.dtype != k.dtype || q.dtype != v.dtype) {
      return Support::no(reason::kDtypeUnsupported, "query, key and value have different dtypes");
    }
    if (q.dtype != DType::kFloat16 && q.dtype != DType::kBFloat16) {
      return Support::no(reason::kDtypeUnsupported,
                         "CUDA kernels take float16/bfloat16, got " + std::string(dtype_name(q.dtype)));
    }
    const int64_t B = qs[0], Hq = qs[1], Sq = qs[2], D = qs[3];
    const int64_t Hkv = ks[1], Sk = ks[2];
    if (ks[0] != B || vs[0] != B || vs[1] != Hkv) {
      return shape_no("batch or key/value head counts differ");
    }
    if (vs[2] != Sk || ks[3] != D || vs[3] != D) {
      return shape_no("key/value lengths or head dims do not match query (Ev != E is not supported)");
    }
    if (Hkv == 0 || Hq % Hkv != 0) {
      return shape_no("query heads " + std::to_string(Hq) + " are not a multiple of key/value heads " +
                      std::to_string(Hkv));
    }
    if (Sq == 0 || Sk == 0 || B == 0 || Hq == 0 || D == 0) {
      return shape_no("empty batch, heads, sequence or head_dim");
    }
    if (present(ctx.inputs, 3)) {
      const TensorSpec& m = ctx.inputs[3];
      if (m.dtype != DType::kBool && m.dtype != DType::kUInt8 && m.dtype != DType::kFloat32 &&
          m.dtype != DType::kFloat16 && m.dtype != DType::kBFloat16) {
        return Support::no(reason::kDtypeUnsupported,
                           "attn_mask dtype " + std::string(dtype_name(m.dtype)) +
                               " (the kernels take bool, or additive float32/float16/bfloat16)");
      }
      if (m.shape.size() > 4) return shape_no("attn_mask has more than 4 dimensions");
      const int64_t full[4] = {B, Hq, Sq, Sk};
      const std::size_t off = 4 - m.shape.size();
      for (std::size_t i = 0; i < m.shape.size(); ++i) {
        if (m.shape[i] != 1 && m.shape[i] != full[off + i]) {
          return shape_no("attn_mask does not broadcast to [B, Hq, Sq, Sk]");
        }
      }
    }
    const double p = ctx.attr_float("dropout_p", 0.0);
    if (!(p >= 0.0 && p < 1.0)) {
      return Support::no(reason::kAttributeUnsupported,
                         "dropout_p must be in [0, 1), got " + std::to_string(p));
    }
    if (p > 0.0 && !present(ctx.inputs, 4)) {
      return Support::no(reason::kAttributeUnsupported,
                         "dropout_p > 0 needs rng_state [seed, offset] (input 4)");
    }
    // "with_backward" (set by the PyTorch bridge when q, k or v requires grad): the
    // backward kernels take fewer head dims than the forward ones.
    const bool with_backward = ctx.attr_int("with_backward", 0) != 0;
    if (!flash_supports_head_dim(static_cast<int>(D), with_backward)) {
      return shape_no("head_dim " + std::to_string(D) + " has no CUDA kernel (supported: " +
                      (with_backward ? "64, 128 with a backward pass)" : "32, 64, 128)"));
    }
    if (std::max(Sq, Sk) >= (int64_t{1} << 31) || B > 65535 || Hq > 65535) {
      return shape_no("sequence, batch or head count too large for the kernels");
    }
    return Support::yes();
  }

  // The lse buffer when the call does not want it back.
  std::size_t workspace_bytes(const OpContext& ctx) const override {
    if (ctx.outputs.size() >= 2 || ctx.inputs.empty() || ctx.inputs[0].shape.size() != 4) return 0;
    const Shape& q = ctx.inputs[0].shape;
    return static_cast<std::size_t>(q[0] * q[1] * q[2]) * sizeof(float);
  }

  void run(KernelLaunch& l) const override {
    const OpContext& ctx = *l.ctx;
    // "_bshd" tensors ([B, S, H, D]) as [B, H, S, D] views: flash_v2 takes any row strides.
    const int bshd = static_cast<int>(ctx.attr_int("_bshd", 0));
    auto logical = [&](const Tensor& t, int bit) { return (bshd & bit) ? t.transpose(1, 2) : t; };
    const Tensor q = rows_aligned(logical(l.inputs[0], 1), l.stream);
    const Tensor k = rows_aligned(logical(l.inputs[1], 2), l.stream);
    const Tensor v = rows_aligned(logical(l.inputs[2], 4), l.stream);
    Tensor out = logical(l.outputs[0], 8);
    Tensor o = rows_aligned(out, l.stream);  // a scratch copy when out is not writable in place
    FlashFwdArgs a;
    a.dtype = kernel_dtype(q.dtype());
    a.shape = FlashShape{static_cast<int32_t>(q.shape()[0]), static_cast<int32_t>(q.shape()[1]),
                         static_cast<int32_t>(k.shape()[1]), static_cast<int32_t>(q.shape()[2]),
                         static_cast<int32_t>(k.shape()[2]), static_cast<int32_t>(q.shape()[3])};
    a.q = q.data_ptr(), a.k = k.data_ptr(), a.v = v.data_ptr(), a.o = o.data_ptr();
    a.q_stride = strides3(q), a.k_stride = strides3(k), a.v_stride = strides3(v), a.o_stride = strides3(o);
    if (l.outputs.size() >= 2) {
      XRT_CHECK(l.outputs[1].dtype() == DType::kFloat32 && l.outputs[1].is_contiguous(), InvalidArgumentError,
                "flash_v2: lse (output 1) must be a contiguous float32 [B, Hq, Sq] tensor");
      a.lse = static_cast<float*>(l.outputs[1].data_ptr());
    } else {
      XRT_CHECK(l.workspace != nullptr && l.workspace_bytes >= workspace_bytes(ctx), InvalidArgumentError,
                "flash_v2: the launch's workspace is smaller than workspace_bytes() (", l.workspace_bytes,
                " bytes)");
      a.lse = static_cast<float*>(l.workspace);
    }
    a.scale = static_cast<float>(ctx.attr_float("scale", 1.0 / std::sqrt(static_cast<double>(q.shape()[3]))));
    a.causal = ctx.attr_int("is_causal", 0) != 0;
    a.nan_rows_zero = ctx.attr_int("nan_rows_zero", 0) != 0;
    a.dropout_p = static_cast<float>(ctx.attr_float("dropout_p", 0.0));
    Tensor mask;
    if (l.inputs.size() > 3 && l.inputs[3].numel() > 0) {
      mask = l.inputs[3];
      a.mask.kind = mask.dtype() == DType::kFloat32    ? FlashMaskKind::kAdditiveF32
                    : mask.dtype() == DType::kFloat16  ? FlashMaskKind::kAdditiveF16
                    : mask.dtype() == DType::kBFloat16 ? FlashMaskKind::kAdditiveBF16
                                                       : FlashMaskKind::kBool;
      a.mask.ptr = mask.data_ptr();
      int64_t st[4] = {0, 0, 0, 0};
      const int64_t off = 4 - mask.dim();
      for (int64_t i = 0; i < mask.dim(); ++i) st[off + i] = mask.shape()[i] > 1 ? mask.strides()[i] : 0;
      a.mask.stride_b = st[0], a.mask.stride_h = st[1], a.mask.stride_q = st[2], a.mask.stride_k = st[3];
    }
    if (a.dropout_p > 0.0f) {
      XRT_CHECK(l.inputs.size() > 4 && l.inputs[4].dtype() == DType::kInt64 && l.inputs[4].numel() == 2,
                InvalidArgumentError,
                "flash_v2: dropout_p > 0 needs rng_state int64 [seed, offset] as input 4");
      a.rng_state = static_cast<const int64_t*>(l.inputs[4].data_ptr());
    }
    a.stream = l.stream;
    flash_attention_forward(a);
    if (o.data_ptr() != out.data_ptr()) out.copy_from(o, l.stream);
  }

 private:
  static KernelDef make_def() {
    KernelDef d;
    d.op = "attention";
    d.name = "flash_v2";
    d.provider = kProvider;
    d.device = ::xpuruntime::cuda::kind();
    // q/k/v are float16/bfloat16 (supports() checks: a mask or rng_state input has its own dtype).
    d.min_capability = kMinCapability;
    d.priority = 100;
    d.deterministic = true;
    d.description =
        "our FlashAttention-2 forward: float16/bfloat16, head_dim 32/64/128 (backward 64/128), "
        "causal, bool/additive "
        "masks, grouped-query heads, dropout from a device rng_state; wgmma on sm_90";
    return d;
  }
};

// ---- layernorm / fused ----------------------------------------------------------------------
// inputs: x, optional weight, optional bias ([normalized dims], x's dtype; a 0-element weight
// means none when only bias is given). outputs: y, optional mean and rstd (fp32 [rows]).
// attrs: axis (first normalized dim, default -1), epsilon (default 1e-5).
class FusedLayerNorm final : public Kernel {
 public:
  FusedLayerNorm() : Kernel(make_def()) {}

  Support supports(const OpContext& ctx) const override {
    if (ctx.inputs.empty() || ctx.inputs.size() > 3 || ctx.outputs.empty() || ctx.outputs.size() == 2 ||
        ctx.outputs.size() > 3) {
      return shape_no("layernorm takes x[, weight[, bias]] and y[, mean, rstd]");
    }
    const TensorSpec& x = ctx.inputs[0];
    int64_t axis = 0;
    Shape normalized;
    if (Support s = normalized_shape(ctx, &axis, &normalized); !s.ok) return s;
    int64_t cols = 1;
    for (int64_t n : normalized) cols *= n;
    if (cols == 0) return shape_no("normalized_shape has no elements");
    for (std::size_t i = 1; i < ctx.inputs.size(); ++i) {
      const TensorSpec& t = ctx.inputs[i];
      if (t.numel() == 0) continue;
      if (t.shape != normalized) {
        return shape_no(std::string(i == 1 ? "weight" : "bias") + " shape does not match normalized_shape");
      }
      if (t.dtype != x.dtype) {
        return Support::no(reason::kDtypeUnsupported,
                           std::string(i == 1 ? "weight" : "bias") + " dtype differs from the input's");
      }
    }
    return Support::yes();
  }

  void run(KernelLaunch& l) const override {
    const OpContext& ctx = *l.ctx;
    int64_t axis = 0;
    Shape normalized;
    Support s = normalized_shape(ctx, &axis, &normalized);
    XRT_CHECK(s.ok, InvalidArgumentError, "fused layernorm: ", s.detail);
    const Tensor x = l.inputs[0].contiguous(l.stream);
    auto optional = [&](std::size_t i) {
      return l.inputs.size() > i && l.inputs[i].numel() > 0 ? l.inputs[i].contiguous(l.stream) : Tensor();
    };
    const Tensor weight = optional(1), bias = optional(2);
    Tensor& y = l.outputs[0];
    Tensor yc = y.is_contiguous() ? y : Tensor::empty(y.shape(), y.dtype(), y.device(), l.stream);
    LayerNormFwdArgs a;
    a.dtype = kernel_dtype(x.dtype());
    a.cols = 1;
    for (int64_t n : normalized) a.cols *= n;
    a.rows = a.cols > 0 ? x.numel() / a.cols : 0;
    a.x = x.data_ptr();
    a.weight = weight.numel() > 0 ? weight.data_ptr() : nullptr;
    a.bias = bias.numel() > 0 ? bias.data_ptr() : nullptr;
    a.y = yc.data_ptr();
    if (l.outputs.size() == 3) {
      for (std::size_t i = 1; i < 3; ++i) {
        XRT_CHECK(l.outputs[i].dtype() == DType::kFloat32 && l.outputs[i].is_contiguous() &&
                      l.outputs[i].numel() == a.rows,
                  InvalidArgumentError, "fused layernorm: mean and rstd must be contiguous float32 [", a.rows,
                  "] tensors");
      }
      a.mean = static_cast<float*>(l.outputs[1].data_ptr());
      a.rstd = static_cast<float*>(l.outputs[2].data_ptr());
    }
    a.eps = static_cast<float>(ctx.attr_float("epsilon", 1e-5));
    a.stream = l.stream;
    layernorm_forward(a);
    if (yc.data_ptr() != y.data_ptr()) y.copy_from(yc, l.stream);
  }

 private:
  // The normalized (trailing) dims of x from the "axis" attribute.
  static Support normalized_shape(const OpContext& ctx, int64_t* axis, Shape* normalized) {
    const Shape& xs = ctx.inputs[0].shape;
    const auto rank = static_cast<int64_t>(xs.size());
    int64_t ax = ctx.attr_int("axis", -1);
    if (ax < 0) ax += rank;
    if (rank == 0 || ax < 0 || ax >= rank) {
      return shape_no("axis " + std::to_string(ctx.attr_int("axis", -1)) + " is out of range for a rank-" +
                      std::to_string(rank) + " input");
    }
    *axis = ax;
    normalized->assign(xs.begin() + ax, xs.end());
    return Support::yes();
  }

  static KernelDef make_def() {
    KernelDef d;
    d.op = "layernorm";
    d.name = "fused";
    d.provider = kProvider;
    d.device = ::xpuruntime::cuda::kind();
    d.dtypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
    d.min_capability = kMinCapability;
    d.priority = 100;
    d.deterministic = true;
    d.description =
        "our fused LayerNorm forward: one pass over each row, fp32 statistics, vector loads, "
        "launch configuration by shape";
    return d;
  }
};

// ---- column_sums ----------------------------------------------------------------------------
// input: x [rows, cols] (unit column stride), output: [cols] of x's dtype. Deterministic.
class ColumnSums final : public Kernel {
 public:
  ColumnSums() : Kernel(make_def()) {}

  Support supports(const OpContext& ctx) const override {
    if (ctx.inputs.size() != 1 || ctx.outputs.size() != 1) return shape_no("column_sums takes x and out");
    const TensorSpec& x = ctx.inputs[0];
    if (x.shape.size() != 2) return shape_no("column_sums takes a 2-D [rows, cols] input");
    if (ctx.outputs[0].shape != Shape{x.shape[1]} || ctx.outputs[0].dtype != x.dtype) {
      return shape_no("the output must be [cols] of the input's dtype");
    }
    return Support::yes();
  }

  std::size_t workspace_bytes(const OpContext& ctx) const override {
    if (ctx.inputs.empty() || ctx.inputs[0].shape.size() != 2) return 0;
    return static_cast<std::size_t>(
        column_sums_workspace_bytes(ctx.inputs[0].shape[0], ctx.inputs[0].shape[1]));
  }

  void run(KernelLaunch& l) const override {
    Tensor x = l.inputs[0];
    const int64_t rows = x.shape()[0], cols = x.shape()[1];
    if (x.strides()[1] != 1 || (rows > 1 && x.strides()[0] < cols)) x = x.contiguous(l.stream);
    Tensor& out = l.outputs[0];
    Tensor oc = out.is_contiguous() ? out : Tensor::empty(out.shape(), out.dtype(), out.device(), l.stream);
    ColumnSumsArgs a;
    a.dtype = kernel_dtype(x.dtype());
    a.rows = rows, a.cols = cols;
    a.ld = rows > 1 ? x.strides()[0] : cols;
    a.x = x.data_ptr();
    a.out = oc.data_ptr();
    a.workspace = static_cast<float*>(l.workspace);
    a.workspace_bytes = static_cast<int64_t>(l.workspace_bytes);
    a.stream = l.stream;
    column_sums(a);
    if (oc.data_ptr() != out.data_ptr()) out.copy_from(oc, l.stream);
  }

 private:
  static KernelDef make_def() {
    KernelDef d;
    d.op = "column_sums";
    d.name = "column_sums";
    d.provider = kProvider;
    d.device = ::xpuruntime::cuda::kind();
    d.dtypes = {DType::kFloat16, DType::kBFloat16};
    d.min_capability = kMinCapability;
    d.priority = 100;
    d.deterministic = true;
    d.description =
        "column sums of a [rows, cols] matrix (a linear layer's bias gradient): fp32 partial sums "
        "per row slice, one rounding; the split depends only on the shape";
    return d;
  }
};

}  // namespace

void register_cuda_kernel_defs(KernelRegistry& registry) {
  registry.register_kernel(std::make_shared<FlashAttention>(), /*replace=*/true);
  registry.register_kernel(std::make_shared<FusedLayerNorm>(), /*replace=*/true);
  registry.register_kernel(std::make_shared<ColumnSums>(), /*replace=*/true);
}

}  // namespace xpuruntime::cuda_kernels
