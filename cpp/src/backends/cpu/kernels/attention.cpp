// FusedAttention on the CPU (xpuruntime/ops/attention.h), float32: per (batch, head)
// pair the scores from one GEMM (Q·Kᵀ, Kᵀ read through strides), then per score row
// the scale, mask, causal cut and softmax in place (fp32, the Softmax kernel's exp),
// then one GEMM with V into the output; (pair, query-row block) tasks spread over
// the threads, each block's scores in that thread's buffer, sized to stay in L2 for
// long sequences (with fewer tasks than threads, all pairs at once and the GEMMs and
// rows split instead). The GEMM is a
// sub-kernel chosen through the Dispatcher under the plan's policies and recorded as
// node "<attention>/gemm" (onednn, cpu_blas or cpu_blocked), as a convolution's is.
#include "xpuruntime/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backends/cpu/kernels/cpu_op.h"
#include "backends/cpu/kernels/fastmath.h"
#include "backends/cpu/kernels/gemm_call.h"
#include "backends/cpu/kernels/parallel.h"
#include "backends/cpu/kernels/isa_clones.h"

namespace xpuruntime::cpu {
namespace {

// The score buffer [B*H, Sq, Sk] of the calling thread (grows, never shrinks): a
// run's scores live between its two GEMMs, which may not touch it.
float* score_buffer(std::size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

struct Operands {
  const float *q, *k, *v, *mask;
  float* out;
  int64_t H, Sq, Sk, D, Dv;
  int64_t ms[4];  // mask strides over [B, H, Sq, Sk] (0 along broadcast dims)
  float scale;
  bool causal;
  bool nan_rows_zero;
};

// Scale, mask, causal cut and softmax of score row i of pair bh, in place: simple
// loops the compiler vectorizes (as the Softmax kernel's).
inline void softmax_scores(const Operands& o, int64_t bh, int64_t i, float* row) {
  const int64_t Sk = o.Sk;
  const int64_t keys = o.causal ? std::min(Sk, i + 1) : Sk;
  const float* mrow =
      o.mask ? o.mask + (bh / o.H) * o.ms[0] + (bh % o.H) * o.ms[1] + i * o.ms[2] : nullptr;
  const float scale = o.scale;
  if (mrow && o.ms[3] == 1) {
#pragma omp simd
    for (int64_t j = 0; j < keys; ++j) row[j] = row[j] * scale + mrow[j];
  } else {
    const float add = mrow ? mrow[0] : 0.0f;  // a mask broadcast along the keys
#pragma omp simd
    for (int64_t j = 0; j < keys; ++j) row[j] = row[j] * scale + add;
  }
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < keys; ++j) mx = row[j] > mx ? row[j] : mx;
  if (std::isinf(mx) && mx < 0) mx = 0;  // all -inf row: 0/0 -> NaN, as the ONNX graph
#pragma omp simd
  for (int64_t j = 0; j < keys; ++j) row[j] = fast_exp(row[j] - mx);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < keys; ++j) sum += row[j];
  if (o.nan_rows_zero && !(sum > 0.0f)) {
    // Every key at -inf (sum 0) or a NaN score (sum NaN): the softmax row is NaN in
    // the graph, which the Where(IsNaN(P), 0, P) guard turned into zeros.
    std::fill(row, row + Sk, 0.0f);
    return;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < keys; ++j) row[j] *= inv;
  std::fill(row + keys, row + Sk, 0.0f);
}

// Query rows [i0, i1) of pairs [p0, p1) of (batch, head): their scores in `s`
// ([p1 - p0, i1 - i0, Sk]) from one batched GEMM (Q·Kᵀ), softmax rows in place, then
// one batched GEMM with V into the output. Several pairs only with all rows.
void attend(const std::string& gemm, const Operands& o, int64_t p0, int64_t p1, int64_t i0,
            int64_t i1, float* s) {
  const int64_t pairs = p1 - p0, Sq = o.Sq, Sk = o.Sk, D = o.D, Dv = o.Dv, rows = i1 - i0;
  matmul::GemmProblem qk;
  qk.batch = pairs;
  qk.m = rows, qk.n = Sk, qk.k = D;
  qk.a = {o.q + p0 * Sq * D + i0 * D, D, 1, Sq * D};
  qk.b = {o.k + p0 * Sk * D, 1, D, Sk * D};  // Kᵀ: column j of the product is key j
  qk.c = s, qk.c_rs = Sk, qk.c_cs = 1, qk.c_bs = rows * Sk;
  if (D > 0) {
    run_gemm(gemm, qk);
  } else {
    std::fill(s, s + pairs * rows * Sk, 0.0f);
  }
  parallel_for(pairs * rows, pairs * rows * Sk * 4, [&](int64_t r0, int64_t r1) XRT_ISA_LAMBDA {
    for (int64_t r = r0; r < r1; ++r) softmax_scores(o, p0 + r / rows, i0 + r % rows, s + r * Sk);
  });
  matmul::GemmProblem pv;
  pv.batch = pairs;
  pv.m = rows, pv.n = Dv, pv.k = Sk;
  pv.a = {s, Sk, 1, rows * Sk};
  pv.b = {o.v + p0 * Sk * Dv, Dv, 1, Sk * Dv};
  pv.c = o.out + p0 * Sq * Dv + i0 * Dv, pv.c_rs = Dv, pv.c_cs = 1, pv.c_bs = Sq * Dv;
  if (Sk > 0) {
    run_gemm(gemm, pv);
  } else {
    float* c = static_cast<float*>(pv.c);
    for (int64_t p = 0; p < pairs; ++p) std::fill(c + p * Sq * Dv, c + p * Sq * Dv + rows * Dv, 0.0f);
  }
}

// Query rows per task: the block's scores stay within ~128 KB (L2) however long the
// sequence (a 1500-key Whisper row block is 21 rows, not a 9 MB score matrix), and
// at least 16 rows so the GEMMs keep their shape.
int64_t query_block(int64_t Sq, int64_t Sk) {
  // (std::clamp would need Sq >= 16: short queries take all their rows at once.)
  const int64_t rows = std::max<int64_t>((int64_t{32} << 10) / std::max<int64_t>(Sk, 1), 16);
  return std::min(rows, std::max<int64_t>(Sq, 1));
}

void attention_f32(const std::string& gemm, const ops::AttentionAttrs& a, const Node& n,
                   const std::vector<TensorView>& in, std::vector<TensorView>& out) {
  for (std::size_t i = 0; i < in.size(); ++i)
    XRT_CHECK(in[i].data == nullptr || in[i].dtype == DType::kFloat32, UnsupportedOperationError,
              n.where(), ": FusedAttention on the CPU takes float32, input ", i, " is ",
              dtype_name(in[i].dtype),
              "; compile for float32 or run on a device whose kernel takes this dtype");
  const TensorView &q = in[0], &k = in[1], &v = in[2];
  XRT_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, InvalidArgumentError, n.where(),
            ": query, key and value must be 4-D, got ", shape_str(q.shape), ", ",
            shape_str(k.shape), ", ", shape_str(v.shape));
  Operands o{};
  o.q = q.ptr<const float>(), o.k = k.ptr<const float>(), o.v = v.ptr<const float>();
  o.out = out[0].ptr<float>();
  o.H = q.shape[1], o.Sq = q.shape[2], o.D = q.shape[3], o.Sk = k.shape[2], o.Dv = v.shape[3];
  o.scale = static_cast<float>(a.scale);
  o.causal = a.causal;
  o.nan_rows_zero = a.nan_rows_zero;
  const int64_t BH = q.shape[0] * o.H;
  if (BH == 0 || o.Sq == 0 || o.Dv == 0) return;
  if (in.size() > 3 && in[3].data != nullptr) {
    o.mask = in[3].ptr<const float>();
    const Shape& m = in[3].shape;
    int64_t stride = 1;
    for (int64_t i = static_cast<int64_t>(m.size()) - 1; i >= 0; --i) {
      o.ms[4 - m.size() + i] = m[i] == 1 ? 0 : stride;
      stride *= m[i];
    }
  }
  const int64_t rb = query_block(o.Sq, o.Sk), blocks = (o.Sq + rb - 1) / rb;
  const int64_t tasks = BH * blocks;
  if (tasks >= parallel_threads()) {
    // One (pair, row block) at a time per thread: its scores stay in cache between
    // the two GEMMs and the softmax (the nested parallel loops run inline).
    const int64_t flops = 2 * BH * o.Sq * o.Sk * (o.D + o.Dv);
    parallel_for(tasks, flops, [&](int64_t t0, int64_t t1) {
      float* s = score_buffer(static_cast<std::size_t>(rb * o.Sk));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t p = t / blocks, i0 = (t % blocks) * rb;
        attend(gemm, o, p, p + 1, i0, std::min(o.Sq, i0 + rb), s);
      }
    });
  } else {
    // Fewer tasks than threads: all pairs at once, the GEMMs and rows split instead.
    const std::size_t per_pair = static_cast<std::size_t>(o.Sq * o.Sk);
    attend(gemm, o, 0, BH, 0, o.Sq, score_buffer(per_pair * static_cast<std::size_t>(BH)));
  }
}

class AttentionPrepared final : public PreparedKernel {
 public:
  AttentionPrepared(Node node, std::string gemm, PreparedKernelPtr keep)
      : node_(std::move(node)),
        attrs_(ops::AttentionAttrs::from_node(node_)),
        gemm_(std::move(gemm)),
        keep_(std::move(keep)) {}
  void run(const KernelArgs& args) const override {
    const std::vector<TensorView> in = views_of(args.inputs);
    std::vector<TensorView> out = views_of(args.outputs);
    attention_f32(gemm_, attrs_, node_, in, out);
  }

 private:
  Node node_;
  ops::AttentionAttrs attrs_;
  std::string gemm_;
  PreparedKernelPtr keep_;  // the GEMM sub-kernel the plan recorded
};

// The scores GEMM ([Sq, D] x [D, Sk] per batch-head pair) dispatched as its own
// matmul case through pc.prepare_sub; its kernel also runs the GEMM with V.
PreparedKernelPtr attention_prepare(const OpDef& def, const PrepareContext& pc) {
  Node n = prepared_node(def.op_type, pc);
  if (!pc.prepare_sub || pc.ctx == nullptr || pc.ctx->inputs.size() < 3) {
    // Outside a plan compile (no dispatcher to ask): the best available GEMM.
    std::string name = gemm_kernel_names().front();
    return std::make_shared<AttentionPrepared>(std::move(n), std::move(name), nullptr);
  }
  const OpContext& ctx = *pc.ctx;
  OpContext mc;
  mc.op = "matmul";
  mc.node = ctx.node + "/gemm";
  mc.device = ctx.device;
  mc.capability = ctx.capability;
  mc.workspace_limit_bytes = ctx.workspace_limit_bytes;
  mc.allow_tf32 = ctx.allow_tf32;
  mc.deterministic = ctx.deterministic;
  mc.strict_no_fallback = ctx.strict_no_fallback;
  mc.strict_pinned_only = ctx.strict_pinned_only;
  const TensorSpec &q = ctx.inputs[0], &k = ctx.inputs[1];
  const int64_t sq = q.shape.size() == 4 ? q.shape[2] : 0, d = q.shape.size() == 4 ? q.shape[3] : 0;
  const int64_t sk = k.shape.size() == 4 ? k.shape[2] : 0;
  mc.inputs = {TensorSpec{q.dtype, {sq, d}, {}}, TensorSpec{q.dtype, {d, sk}, {1, d}}};
  mc.outputs = {TensorSpec{q.dtype, {sq, sk}, {}}};
  Node sub;
  sub.name = mc.node;
  sub.op_type = "FusedAttention";  // not MatMul/Gemm: the matmul kernels prepare a plain GEMM
  PreparedKernelPtr p = pc.prepare_sub(mc, sub);
  auto gemm = std::dynamic_pointer_cast<const CpuGemmPrepared>(p);
  XRT_CHECK(gemm != nullptr, UnsupportedOperationError, n.where(),
            ": the matmul kernel chosen for this attention's GEMM (", mc.node,
            ") cannot run inside the CPU attention kernel; CPU GEMM kernels: onednn, "
            "cpu_blas, cpu_blocked (pin one of them for op 'matmul')");
  std::string name = gemm->gemm();
  return std::make_shared<AttentionPrepared>(std::move(n), std::move(name), std::move(p));
}

}  // namespace

void register_attention_ops(std::vector<OpDef>& defs) {
  OpDef d;
  d.op_type = "FusedAttention";
  d.kernel = "cpu";
  d.dtypes = {DType::kFloat32};
  d.description =
      "fused attention, float32: batched GEMMs for Q K^T and P V around an in-place fp32 "
      "scale/mask/causal softmax";
  d.run = [](const Node& n, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
    attention_f32(gemm_kernel_names().front(), ops::AttentionAttrs::from_node(n), n, in, out);
  };
  d.supports = [](const Node& n, const std::vector<Meta>& in) {
    for (std::size_t i = 0; i < in.size(); ++i)
      if (in[i].present && in[i].dtype != DType::kFloat32)
        return Support::no(reason::kDtypeUnsupported,
                           "FusedAttention on the CPU takes float32, input " + std::to_string(i) +
                               " is " + std::string(dtype_name(in[i].dtype)));
    if (n.attr_int("_bshd", 0) != 0)
      return Support::no(reason::kLayoutUnsupported,
                         "FusedAttention on the CPU reads [B, H, S, D] tensors, not _bshd ones");
    if (in.size() > 1 && in[0].shape && in[1].shape && in[0].shape->size() == 4 &&
        in[1].shape->size() == 4 && (*in[0].shape)[1] != (*in[1].shape)[1])
      return Support::no(reason::kShapeUnsupported,
                         "FusedAttention on the CPU takes as many key/value heads as query heads "
                         "(no grouped-query sharing)");
    return Support::yes();
  };
  d.prepare = attention_prepare;
  defs.push_back(std::move(d));
}

}  // namespace xpuruntime::cpu
