// Parsing of the matmul op's specs into a GEMM layout (see matmul_op.h).
#include "ops/matmul/matmul_op.h"

#include <algorithm>
#include <optional>
#include <span>
#include <sstream>

#include "xpuruntime/error.h"

namespace xpuruntime::matmul {
namespace {

bool is_matmul_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}

// The dims of a broadcast of two batch shapes, right-aligned; 1 where both lack one.
int64_t batch_dim(std::span<const int64_t> s, std::size_t rank, std::size_t i) {
  const std::size_t off = rank - s.size();
  return i < off ? 1 : s[i - off];
}

}  // namespace

std::optional<Shape> broadcast_batch(std::span<const int64_t> a, std::span<const int64_t> b) {
  const std::size_t r = std::max(a.size(), b.size());
  Shape out(r, 1);
  for (std::size_t i = 0; i < r; ++i) {
    const int64_t da = batch_dim(a, r, i), db = batch_dim(b, r, i);
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::optional<int64_t> flat_batch_stride(std::span<const int64_t> out_batch,
                                         std::span<const int64_t> shape,
                                         std::span<const int64_t> strides) {
  // Walk the non-trivial output batch dims from the innermost out: each must step by
  // the inner dim's stride times its size. Size-1 and missing dims of the operand
  // broadcast (stride 0).
  const std::size_t nb = shape.size() - 2;
  const std::size_t off = out_batch.size() - nb;
  bool have_inner = false;
  int64_t inner_stride = 0, expect = 0;
  for (std::size_t i = out_batch.size(); i-- > 0;) {
    if (out_batch[i] == 1) continue;
    const int64_t st = (i >= off && shape[i - off] != 1) ? strides[i - off] : 0;
    if (!have_inner) {
      have_inner = true;
      inner_stride = st;
    } else if (st != expect) {
      return std::nullopt;
    }
    expect = st * out_batch[i];
  }
  return have_inner ? inner_stride : 0;
}

Activation activation_from_string(std::string_view s) {
  if (s.empty() || s == "none") return Activation::kNone;
  if (s == "relu") return Activation::kRelu;
  if (s == "gelu") return Activation::kGelu;
  XRT_THROW(InvalidArgumentError, "matmul: unknown activation '", s,
            "'; valid choices: none, relu, gelu (gelu is the tanh approximation)");
}

Support read_gemm_layout(const OpContext& ctx, GemmLayout* out) {
  using reason::kAttributeUnsupported;
  using reason::kDtypeUnsupported;
  using reason::kLayoutUnsupported;
  using reason::kShapeUnsupported;
  if (ctx.inputs.size() < 2 || ctx.inputs.size() > 3 || ctx.outputs.empty() || ctx.outputs.size() > 2) {
    return Support::no(kShapeUnsupported, "matmul takes inputs [a, b, (bias)] and outputs [out, "
                                          "(a_row_sums)]; got " +
                                              std::to_string(ctx.inputs.size()) + " inputs and " +
                                              std::to_string(ctx.outputs.size()) + " outputs");
  }
  const TensorSpec& a = ctx.inputs[0];
  const TensorSpec& b = ctx.inputs[1];
  const TensorSpec& c = ctx.outputs[0];
  const TensorSpec* bias = ctx.inputs.size() == 3 ? &ctx.inputs[2] : nullptr;
  if (a.shape.size() < 2 || b.shape.size() < 2 || c.shape.size() < 2) {
    return Support::no(kShapeUnsupported, "operands need at least 2 dims (a " + shape_str(a.shape) +
                                              ", b " + shape_str(b.shape) + ", out " +
                                              shape_str(c.shape) + ")");
  }
  if (a.dtype != b.dtype || c.dtype != a.dtype || (bias && bias->dtype != a.dtype)) {
    return Support::no(kDtypeUnsupported,
                       std::string("a, b, bias and out must share one dtype (a ") +
                           std::string(dtype_name(a.dtype)) + ", b " +
                           std::string(dtype_name(b.dtype)) + ", out " +
                           std::string(dtype_name(c.dtype)) + ")");
  }
  if (!is_matmul_float(a.dtype)) {
    return Support::no(kDtypeUnsupported, "matmul runs float32, float64, float16 and bfloat16, not " +
                                              std::string(dtype_name(a.dtype)));
  }
  const int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back();
  const int64_t kb = b.shape[b.shape.size() - 2], n = b.shape.back();
  if (k != kb) {
    return Support::no(kShapeUnsupported, "inner dimensions differ: a " + shape_str(a.shape) +
                                              " and b " + shape_str(b.shape));
  }
  const std::span<const int64_t> a_batch(a.shape.data(), a.shape.size() - 2);
  const std::span<const int64_t> b_batch(b.shape.data(), b.shape.size() - 2);
  const std::span<const int64_t> c_batch(c.shape.data(), c.shape.size() - 2);
  // c's batch must be the broadcast of a's and b's (checked without building it).
  const std::size_t rank = std::max(a_batch.size(), b_batch.size());
  bool batch_ok = c_batch.size() == rank && c.shape[c.shape.size() - 2] == m && c.shape.back() == n;
  int64_t batch = 1;
  for (std::size_t i = 0; batch_ok && i < rank; ++i) {
    const int64_t da = batch_dim(a_batch, rank, i), db = batch_dim(b_batch, rank, i);
    batch_ok = (da == db || da == 1 || db == 1) && c_batch[i] == (da == 1 ? db : da);
    batch *= c_batch[i];
  }
  if (!batch_ok) {
    return Support::no(kShapeUnsupported, "a " + shape_str(a.shape) + " @ b " + shape_str(b.shape) +
                                              " does not give out " + shape_str(c.shape));
  }
  if (bias && !(bias->shape.size() == 1 && bias->shape[0] == n)) {
    return Support::no(kShapeUnsupported, "bias must have shape [" + std::to_string(n) + "], got " +
                                              shape_str(bias->shape));
  }
  if (bias && n > 1 && !bias->strides.empty() && bias->strides[0] != 1) {
    return Support::no(kLayoutUnsupported, "bias must be contiguous");
  }
  // Empty strides mean contiguous; those are computed into small local arrays.
  int64_t dense[3][kMaxRank];
  auto strides_of = [&](const TensorSpec& t, int which) -> std::span<const int64_t> {
    if (!t.strides.empty()) return t.strides;
    int64_t st = 1;
    for (std::size_t i = t.shape.size(); i-- > 0;) {
      dense[which][i] = st;
      st *= std::max<int64_t>(t.shape[i], 1);
    }
    return {dense[which], t.shape.size()};
  };
  if (a.shape.size() > kMaxRank || b.shape.size() > kMaxRank || c.shape.size() > kMaxRank) {
    return Support::no(kShapeUnsupported, "matmul operands may have at most " +
                                              std::to_string(kMaxRank) + " dims");
  }
  const auto as = strides_of(a, 0), bs = strides_of(b, 1), cs = strides_of(c, 2);
  auto a_bs = flat_batch_stride(c_batch, a.shape, as);
  auto b_bs = flat_batch_stride(c_batch, b.shape, bs);
  auto c_bs = flat_batch_stride(c_batch, c.shape, cs);
  if (!a_bs || !b_bs || !c_bs) {
    return Support::no(kLayoutUnsupported,
                       std::string("the batch dims of ") + (!a_bs ? "a" : !b_bs ? "b" : "out") +
                           " cannot be walked with one stride; make that operand contiguous");
  }
  GemmLayout l;
  l.dtype = a.dtype;
  l.batch = batch;
  l.m = m;
  l.n = n;
  l.k = k;
  const std::size_t ra = a.shape.size(), rb = b.shape.size(), rc = c.shape.size();
  l.a = {nullptr, as[ra - 2], as[ra - 1], *a_bs};
  l.b = {nullptr, bs[rb - 2], bs[rb - 1], *b_bs};
  l.c_rs = cs[rc - 2];
  l.c_cs = cs[rc - 1];
  l.c_bs = *c_bs;
  if (l.batch > 1 && l.m * l.n > 0 && l.c_bs == 0) {
    return Support::no(kLayoutUnsupported, "out broadcasts over the batch (stride 0): every batch "
                                           "would write the same elements");
  }
  l.has_bias = bias != nullptr;
  if (ctx.outputs.size() == 2) {
    const TensorSpec& sums = ctx.outputs[1];
    if (sums.dtype != a.dtype) {
      return Support::no(kDtypeUnsupported, "a_row_sums must have the operands' dtype " +
                                                std::string(dtype_name(a.dtype)));
    }
    if (!(sums.shape.size() == 1 && sums.shape[0] == m)) {
      return Support::no(kShapeUnsupported, "a_row_sums must have shape [" + std::to_string(m) +
                                                "] (one value per row of a), got " + shape_str(sums.shape));
    }
    if (m > 1 && !sums.strides.empty() && sums.strides[0] != 1) {
      return Support::no(kLayoutUnsupported, "a_row_sums must be contiguous");
    }
    if (batch != 1 || bias != nullptr) {
      return Support::no(kShapeUnsupported, "a_row_sums needs an unbatched matmul without a bias");
    }
    l.has_row_sums = true;
  }
  for (const auto& [key, value] : ctx.attrs) {
    if (key == kBConstantAttr) continue;  // a hint for kernels that pack B, not the problem
    if (key != kActivationAttr) {
      return Support::no(kAttributeUnsupported, "unknown matmul attribute '" + key +
                                                    "' (known: activation, b_constant)");
    }
    try {
      l.activation = activation_from_string(value);
    } catch (const InvalidArgumentError& e) {
      return Support::no(kAttributeUnsupported, e.what());
    }
  }
  *out = l;
  return Support::yes();
}

GemmProblem gemm_problem(const KernelLaunch& launch) {
  XRT_CHECK(launch.ctx != nullptr, InvalidArgumentError, "matmul: the launch has no OpContext");
  GemmLayout l;
  Support s = read_gemm_layout(*launch.ctx, &l);
  XRT_CHECK(s.ok, InvalidArgumentError, "matmul: ", s.reason_code, ": ", s.detail);
  XRT_CHECK(launch.inputs.size() == launch.ctx->inputs.size() &&
                launch.outputs.size() == launch.ctx->outputs.size(),
            InvalidArgumentError, "matmul: the launch's tensors do not match its context");
  GemmProblem p = shape_only_problem(l, launch.ctx->allow_tf32);
  p.a.data = launch.inputs[0].data_ptr();
  p.b.data = launch.inputs[1].data_ptr();
  p.c = launch.outputs[0].data_ptr();
  p.bias = l.has_bias ? launch.inputs[2].data_ptr() : nullptr;
  p.a_row_sums = l.has_row_sums ? launch.outputs[1].data_ptr() : nullptr;
  return p;
}

GemmProblem shape_only_problem(const GemmLayout& l, bool allow_tf32) {
  static const char kBiasPlaceholder = 0;
  static char row_sums_placeholder = 0;
  GemmProblem p;
  p.dtype = l.dtype;
  p.batch = l.batch;
  p.m = l.m;
  p.n = l.n;
  p.k = l.k;
  p.a = l.a;
  p.b = l.b;
  p.c_rs = l.c_rs;
  p.c_cs = l.c_cs;
  p.c_bs = l.c_bs;
  p.bias = l.has_bias ? &kBiasPlaceholder : nullptr;
  p.a_row_sums = l.has_row_sums ? &row_sums_placeholder : nullptr;
  p.activation = l.activation;
  p.allow_tf32 = allow_tf32;
  return p;
}

Support to_support(const GemmRejection& r) {
  switch (r.kind) {
    case GemmRejection::Kind::kNone: return Support::yes();
    case GemmRejection::Kind::kDtype: return Support::no(reason::kDtypeUnsupported, r.detail);
    case GemmRejection::Kind::kShape: return Support::no(reason::kShapeUnsupported, r.detail);
    case GemmRejection::Kind::kLayout: return Support::no(reason::kLayoutUnsupported, r.detail);
    case GemmRejection::Kind::kEpilogue:
      return Support::no(reason::kAttributeUnsupported, r.detail);
  }
  return Support::yes();
}

}  // namespace xpuruntime::matmul
