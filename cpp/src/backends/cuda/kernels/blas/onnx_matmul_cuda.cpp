// ONNX MatMul/Gemm nodes on CUDA GEMM libraries (onnx_matmul_cuda.h).
#include "backends/cuda/kernels/blas/onnx_matmul_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common/device_buffer.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ir.h"
#include "xpuruntime/ops/epilogue.h"
#include "xpuruntime/ops/gemm.h"

namespace xpuruntime::matmul {
namespace {

using graph::Shape;
using graph::shape_numel;

// Writes broadcast(C) into the row-major M×N matrix Y, where C is a contiguous
// cm×cn matrix with cm ∈ {1, M} and cn ∈ {1, N}: C's block first, then
// doubling copies along the broadcast dimensions (log2 copies, all on the
// stream, no kernel needed).
void fill_broadcast(void *y, const void *c, int64_t cm, int64_t cn, int64_t m, int64_t n,
                    std::size_t es, cudaStream_t s) {
  char *dst = static_cast<char *>(y);
  const std::size_t row = static_cast<std::size_t>(n) * es;
  XRT_CUDA_CHECK(cudaMemcpy2DAsync(dst, row, c, cn * es, cn * es, cm, cudaMemcpyDeviceToDevice, s));
  if (cn == 1) {
    for (int64_t w = 1; w < n;) {
      const int64_t len = std::min(w, n - w);
      XRT_CUDA_CHECK(cudaMemcpy2DAsync(dst + w * es, row, dst, row, len * es, cm,
                                       cudaMemcpyDeviceToDevice, s));
      w += len;
    }
  }
  if (cm == 1) {
    for (int64_t r = 1; r < m;) {
      const int64_t len = std::min(r, m - r);
      XRT_CUDA_CHECK(cudaMemcpyAsync(dst + r * row, dst, len * row, cudaMemcpyDeviceToDevice, s));
      r += len;
    }
  }
}

// Round a byte count up to the workspace alignment cuBLASLt wants (256 B).
constexpr std::size_t round256(std::size_t b) { return (b + 255) / 256 * 256; }

// While prepare sizes a step's workspace (workspace_probe), run() enqueues nothing:
// each GEMM adds what it takes here instead, and the device copies are skipped.
struct WorkspaceProbe {
  std::size_t need = 0;
};
thread_local WorkspaceProbe *tl_probe = nullptr;

// A GEMM whose N columns make every row of B and C misaligned (N·esize not a
// multiple of 16 bytes: GPT-2's 50257-word vocabulary) runs on cuBLAS's slow
// unaligned kernels (5-6x slower on an H200). Such a GEMM with a constant B
// instead reads B with rows padded to 16 bytes and writes C with a padded pitch
// into the workspace; 2-D copies then pack C into the output. The GEMMs compute
// whole 16-byte column groups (cuBLASLt picks its unaligned kernels for an N that is
// not a multiple of 8 even with aligned leading dimensions, measured on an H200):
// B's and the bias's padding are zeros.
//
// C goes `chunk` columns at a time, so the padded C in the workspace stays near
// 16 MiB (GPT-2's whole padded logits were 103 MB, as much as the output itself).
// A transposed B ([N, K], Gemm transB: the tied embedding table GPT-2's LM head
// reads, gemm_reads_shared_weights) has aligned rows already: its full chunks are
// read from the plan's constant itself, and only the last chunk's rows are copied
// with zero rows up to 16 bytes. Otherwise B is one padded copy [K, pitch].
struct PaddedColumns {
  int64_t rows = 0;   // M (all of A's rows, batches included)
  int64_t cols = 0;   // N
  int64_t pitch = 0;  // N rounded up to 16 bytes, in elements
  int64_t chunk = 0;  // columns per GEMM, a multiple of 16 bytes
  int64_t direct_cols = 0;  // transB: leading columns read from the constant itself
  std::size_t es = 2;  // element size
  bool b_transposed = false;  // B is [N, K] (Gemm transB), else [K, N]
  // B padded: [K, pitch], or (transB) rows [direct_cols, N) and zero rows up to the pitch.
  std::unique_ptr<cuda_ops::DeviceBuffer> b;
  std::unique_ptr<cuda_ops::DeviceBuffer> bias;  // the bias row, zero-padded, or null
  std::size_t c_bytes() const { return round256(static_cast<std::size_t>(rows * chunk) * es); }
};

class OnnxMatmulCuda final : public PreparedKernel {
 public:
  OnnxMatmulCuda(CudaGemmLibrary lib, graph::Node node, int device, bool tf32,
                 std::size_t workspace, std::unique_ptr<PaddedColumns> padded = nullptr)
      : pad_(std::move(padded)),
        lib_(std::move(lib)),
        node_(std::move(node)),
        attrs_(ops::GemmAttrs::from_node(node_)),
        epilogue_(ops::Epilogue::from_node(node_)),
        is_gemm_(node_.op_type == "Gemm"),
        device_(device),
        tf32_(tf32),
        workspace_(workspace) {
    if (epilogue_.has_activation()) {
      if (epilogue_.activation_op == "Relu") {
        activation_ = Activation::kRelu;
      } else if (epilogue_.activation_op == "Gelu" && epilogue_.approximate == "tanh") {
        activation_ = Activation::kGelu;
      } else {
        XRT_THROW(UnsupportedOperationError, node_.where(), ": the fused ", epilogue_.activation_op,
                  epilogue_.activation_op == "Gelu" ? " (exact erf form)" : "",
                  " activation has no CUDA GEMM epilogue (cuBLASLt has relu "
                  "and tanh-gelu); "
                  "compile without epilogue fusion");
      }
    }
    XRT_CHECK(lib_.epilogues || (!epilogue_.bias && !epilogue_.has_activation()),
              UnsupportedOperationError, node_.where(), ": ", lib_.name,
              " has no fused bias/activation epilogue; cublasLt runs this node");
    XRT_CHECK(!epilogue_.residual || lib_.epilogues, UnsupportedOperationError, node_.where(),
              ": ", lib_.name, " has no residual epilogue; cublasLt runs this node");
  }

  void run(const KernelArgs &args) const override {
    if (pad_ && run_padded(args)) return;
    XRT_CHECK(args.inputs.size() > 1 && args.inputs[1].present() &&
                  (!pad_ || !pad_->bias || (args.inputs.size() > 2 && args.inputs[2].present())),
              InvalidArgumentError, node_.where(),
              ": the padded GEMM's operands are not on the device (its constant B and bias "
              "stay in their padded copies), and this run's shapes or workspace do not fit "
              "the padded form");
    if (is_gemm_)
      run_gemm(args);
    else
      run_matmul(args);
  }
  std::size_t workspace_bytes() const override {
    return workspace_ + (pad_ ? pad_->c_bytes() : 0);
  }
  // A padded GEMM reads its bias, and B unless it reads B's full chunks in place, from
  // the padded copies only.
  bool packs_constant(std::size_t input) const override {
    return pad_ && ((input == 1 && pad_->direct_cols == 0) || (input == 2 && pad_->bias));
  }

 private:
  GemmProblem base(const KernelArgs &args) const {
    GemmProblem p;
    p.dtype = args.inputs[0].dtype;
    p.activation = activation_;
    p.allow_tf32 = tf32_;
    return p;
  }
  // The fused residual (input 3, the output's shape), read as the GEMM's C with beta 1;
  // null without one.
  const void *residual(const KernelArgs &args) const {
    if (!epilogue_.residual) return nullptr;
    XRT_CHECK(args.inputs.size() > 3 && args.inputs[3].present() &&
                  shape_numel(args.inputs[3].shape) == shape_numel(args.outputs[0].shape),
              InvalidArgumentError, node_.where(),
              ": the fused residual (input 3) must have the output's size");
    return args.inputs[3].data;
  }
  void gemm(const GemmProblem &p, double alpha, double beta, const KernelArgs &args,
            std::size_t ws_offset = 0) const {
    const GemmRejection why = lib_.rejection(p);
    XRT_CHECK(!why, UnsupportedOperationError, node_.where(), ": ", lib_.name,
              " cannot run this GEMM: ", why.detail);
    XRT_CHECK(args.workspace_bytes >= ws_offset, InvalidArgumentError, node_.where(),
              ": the run's workspace (", args.workspace_bytes, " B) is smaller than the step's (",
              workspace_bytes(), " B)");
    if (tl_probe != nullptr) {
      tl_probe->need = std::max(tl_probe->need,
                                lib_.workspace_need(p, device_, args.workspace_bytes - ws_offset));
      return;
    }
    lib_.gemm(p, alpha, beta, args.stream, device_, static_cast<char *>(args.workspace) + ws_offset,
              args.workspace_bytes - ws_offset);
  }

 public:
  // Shrinks the GEMM workspace to what this step's GEMMs take (lib_.workspace_need),
  // found by running the node's logic on placeholder pointers with nothing enqueued.
  // Left as it is where a shape is known only at run time, or the library cannot say.
  void fit_workspace(const PrepareContext &pc) {
    if (!lib_.workspace_need || pc.node_outputs.empty()) return;
    KernelArgs args;
    // Distinct, 256-byte aligned placeholders (never dereferenced: the probe enqueues
    // nothing); an omitted input stays absent.
    uintptr_t next = uintptr_t{1} << 40;
    auto placeholder = [&](const std::optional<TensorSpec> &t) {
      next += uintptr_t{1} << 32;
      return TensorArg{t->dtype, t->shape, reinterpret_cast<void *>(next)};
    };
    for (std::size_t i = 0; i < node_.inputs.size(); ++i) {
      const bool omitted = node_.inputs[i] < 0;
      if (!omitted && (i >= pc.node_inputs.size() || !pc.node_inputs[i])) return;
      args.inputs.push_back(omitted ? TensorArg{} : placeholder(pc.node_inputs[i]));
    }
    for (const auto &o : pc.node_outputs) {
      if (!o) return;
      args.outputs.push_back(placeholder(o));
    }
    args.workspace = reinterpret_cast<void *>(next + (uintptr_t{1} << 32));
    args.workspace_bytes = workspace_bytes();
    WorkspaceProbe probe;
    tl_probe = &probe;
    try {
      run(args);
    } catch (...) {
      tl_probe = nullptr;
      return;  // the run will say what is wrong
    }
    tl_probe = nullptr;
    workspace_ = round256(probe.need);
  }

 private:
  // The padded-pitch GEMM (PaddedColumns). False when this run's shapes are not the
  // ones it was prepared for (then the plain path runs).
  bool run_padded(const KernelArgs &args) const {
    const PaddedColumns &pc = *pad_;
    const TensorArg &ia = args.inputs[0];
    const TensorArg &out = args.outputs[0];
    if (ia.shape.empty() || shape_numel(out.shape) != pc.rows * pc.cols ||
        out.shape.back() != pc.cols || args.workspace_bytes < workspace_bytes())
      return false;
    if (pc.direct_cols > 0 && (args.inputs.size() < 2 || !args.inputs[1].present())) return false;
    const int64_t k = ia.shape.back();
    const auto es = static_cast<int64_t>(pc.es);
    const auto *b_const =
        static_cast<const char *>(args.inputs.size() > 1 ? args.inputs[1].data : nullptr);
    const auto *b_pad = static_cast<const char *>(pc.b->data());
    for (int64_t c0 = 0; c0 < pc.cols; c0 += pc.chunk) {
      const int64_t width = std::min(pc.chunk, pc.cols - c0);  // columns that reach the output
      const int64_t n = (width * es + 15) / 16 * 16 / es;      // columns computed
      GemmProblem p = base(args);
      p.m = pc.rows;
      p.n = n;
      p.k = k;
      p.a = {ia.data, k, 1, 0};
      if (!pc.b_transposed)
        p.b = MatrixRef{b_pad + c0 * es, pc.pitch, 1, 0};
      else if (c0 < pc.direct_cols)
        p.b = MatrixRef{b_const + c0 * k * es, 1, k, 0};
      else
        p.b = MatrixRef{b_pad + (c0 - pc.direct_cols) * k * es, 1, k, 0};
      p.c = args.workspace;
      p.c_rs = n;
      // prepare checked: alpha = beta = 1 with a bias
      p.bias = pc.bias ? static_cast<const char *>(pc.bias->data()) + c0 * es : nullptr;
      gemm(p, is_gemm_ ? attrs_.alpha : 1.0, 0.0, args, pc.c_bytes());
      if (tl_probe != nullptr) continue;
      XRT_CUDA_CHECK(cudaMemcpy2DAsync(
          static_cast<char *>(out.data) + c0 * es, static_cast<std::size_t>(pc.cols * es),
          args.workspace, static_cast<std::size_t>(n * es), static_cast<std::size_t>(width * es),
          static_cast<std::size_t>(pc.rows), cudaMemcpyDeviceToDevice,
          static_cast<cudaStream_t>(args.stream)));
    }
    return true;
  }

  void run_matmul(const KernelArgs &args) const {
    const TensorArg &ia = args.inputs[0];
    const TensorArg &ib = args.inputs[1];
    const TensorArg &out = args.outputs[0];
    Shape a = ia.shape, b = ib.shape;
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    const int64_t m = a[a.size() - 2], k = a.back(), nn = b.back();
    const Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
    const Shape batch = broadcast(ab, bb);
    const int64_t nb = shape_numel(batch);
    if (nb == 0 || m == 0 || nn == 0) return;
    XRT_CHECK(k > 0, UnsupportedOperationError, node_.where(),
              ": an empty inner dimension (K = 0) is not supported by the CUDA "
              "GEMM kernels");
    const std::size_t es = dtype_size(ia.dtype);
    GemmProblem p = base(args);
    p.m = m;
    p.n = nn;
    p.k = k;
    p.c_rs = nn;
    if (epilogue_.bias && args.inputs.size() > 2 && args.inputs[2].present())
      p.bias = args.inputs[2].data;
    auto padded = [&](const Shape &s) {
      Shape full(batch.size() - s.size(), 1);
      full.insert(full.end(), s.begin(), s.end());
      return full;
    };
    const Shape pa = padded(ab), pb = padded(bb);
    const bool a_one = shape_numel(ab) == 1, b_one = shape_numel(bb) == 1;
    const void *res = residual(args);
    const double beta = res != nullptr ? 1.0 : 0.0;
    p.c_in = res;
    if (b_one) {
      // B shared by every batch: one tall GEMM over all of A's rows.
      p.m = nb * m;
      p.a = {ia.data, k, 1, 0};
      p.b = {ib.data, nn, 1, 0};
      p.c = out.data;
      gemm(p, 1.0, beta, args);
    } else if ((a_one || pa == batch) && pb == batch) {
      // Same-shaped batches (or a shared A): one strided batched GEMM.
      p.batch = nb;
      p.a = {ia.data, k, 1, a_one ? 0 : m * k};
      p.b = {ib.data, nn, 1, k * nn};
      p.c = out.data;
      p.c_bs = m * nn;
      gemm(p, 1.0, beta, args);
    } else {
      // Any other broadcast of the batch dims: one GEMM per output batch.
      auto strides = [&](const Shape &full, int64_t mat) {
        Shape st(full.size(), 0);
        int64_t acc = mat;
        for (int64_t i = static_cast<int64_t>(full.size()) - 1; i >= 0; --i) {
          st[i] = full[i] == 1 ? 0 : acc;
          acc *= full[i];
        }
        return st;
      };
      const Shape sta = strides(pa, m * k), stb = strides(pb, k * nn);
      for (int64_t bi = 0; bi < nb; ++bi) {
        int64_t rem = bi, oa = 0, ob = 0;
        for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
          const int64_t idx = rem % batch[d];
          rem /= batch[d];
          oa += idx * sta[d];
          ob += idx * stb[d];
        }
        GemmProblem q = p;
        q.a = {static_cast<const char *>(ia.data) + oa * es, k, 1, 0};
        q.b = {static_cast<const char *>(ib.data) + ob * es, nn, 1, 0};
        q.c = static_cast<char *>(out.data) + bi * m * nn * es;
        if (res != nullptr) q.c_in = static_cast<const char *>(res) + bi * m * nn * es;
        gemm(q, 1.0, beta, args);
      }
    }
  }

  void run_gemm(const KernelArgs &args) const {
    const bool ta = attrs_.trans_a, tb = attrs_.trans_b;
    const double alpha = attrs_.alpha, beta = attrs_.beta;
    const TensorArg &ia = args.inputs[0];
    const TensorArg &ib = args.inputs[1];
    const TensorArg &out = args.outputs[0];
    XRT_CHECK(ia.shape.size() == 2 && ib.shape.size() == 2, InvalidArgumentError, node_.where(),
              ": Gemm takes 2-D A and B");
    const int64_t m = ta ? ia.shape[1] : ia.shape[0], k = ta ? ia.shape[0] : ia.shape[1];
    const int64_t nn = tb ? ib.shape[0] : ib.shape[1];
    if (m == 0 || nn == 0) return;
    XRT_CHECK(k > 0, UnsupportedOperationError, node_.where(),
              ": an empty inner dimension (K = 0) is not supported by the CUDA "
              "GEMM kernels");
    GemmProblem p = base(args);
    p.m = m;
    p.n = nn;
    p.k = k;
    p.a = ta ? MatrixRef{ia.data, 1, m, 0} : MatrixRef{ia.data, k, 1, 0};
    p.b = tb ? MatrixRef{ib.data, 1, k, 0} : MatrixRef{ib.data, nn, 1, 0};
    p.c = out.data;
    p.c_rs = nn;
    const bool has_c = args.inputs.size() > 2 && args.inputs[2].present() && beta != 0.0;
    double gemm_beta = 0.0;
    if (const void *res = residual(args)) {
      // The fusion took only a bias-row C (alpha = beta = 1) or none.
      XRT_CHECK(!has_c || (alpha == 1.0 && beta == 1.0 && shape_numel(args.inputs[2].shape) == nn),
                InvalidArgumentError, node_.where(),
                ": a fused residual combines with a bias-row C only (alpha = beta = 1)");
      if (has_c) p.bias = args.inputs[2].data;
      p.c_in = res;
      gemm(p, alpha, 1.0, args);
      return;
    }
    if (has_c) {
      const TensorArg &c = args.inputs[2];
      XRT_CHECK(c.shape.size() <= 2, InvalidArgumentError, node_.where(), ": Gemm's C has rank ",
                c.shape.size(), "; it must broadcast to the output (", m, ", ", nn, ")");
      Shape full(2 - c.shape.size(), 1);
      full.insert(full.end(), c.shape.begin(), c.shape.end());
      XRT_CHECK((full[0] == 1 || full[0] == m) && (full[1] == 1 || full[1] == nn),
                InvalidArgumentError, node_.where(), ": Gemm's C of shape (", full[0], ", ",
                full[1], ") does not broadcast to the output (", m, ", ", nn, ")");
      if (lib_.epilogues && alpha == 1.0 && beta == 1.0 && full[0] == 1 && full[1] == nn) {
        // A bias row: the GEMM's bias epilogue.
        p.bias = c.data;
      } else {
        if (tl_probe == nullptr)
          fill_broadcast(out.data, c.data, full[0], full[1], m, nn, dtype_size(c.dtype),
                         static_cast<cudaStream_t>(args.stream));
        gemm_beta = beta;
      }
    }
    gemm(p, alpha, gemm_beta, args);
  }

  Shape broadcast(const Shape &x, const Shape &y) const {
    const std::size_t r = std::max(x.size(), y.size());
    Shape out(r, 1);
    for (std::size_t i = 0; i < r; ++i) {
      const int64_t dx = i + x.size() >= r ? x[i + x.size() - r] : 1;
      const int64_t dy = i + y.size() >= r ? y[i + y.size() - r] : 1;
      XRT_CHECK(dx == dy || dx == 1 || dy == 1, InvalidArgumentError, node_.where(),
                ": the batch dimensions of A and B do not broadcast (", dx, " vs ", dy, ")");
      out[i] = std::max(dx, dy);
    }
    return out;
  }

  std::unique_ptr<PaddedColumns> pad_;
  CudaGemmLibrary lib_;
  graph::Node node_;
  ops::GemmAttrs attrs_;
  ops::Epilogue epilogue_;
  bool is_gemm_;
  int device_;
  bool tf32_;
  std::size_t workspace_;
  Activation activation_ = Activation::kNone;
};

}  // namespace

bool is_onnx_matmul(const PrepareContext &pc) {
  return pc.node != nullptr && (pc.node->op_type == "MatMul" || pc.node->op_type == "Gemm");
}

namespace {

// The PaddedColumns of pc's node, or null where the plain GEMM runs: B a constant
// matrix, static shapes, misaligned output rows, aligned K, a bias row at most,
// and the padded C within the policy's workspace limit.
std::unique_ptr<PaddedColumns> padded_columns(const PrepareContext &pc) {
  const OpContext &ctx = *pc.ctx;
  const graph::Node &n = *pc.node;
  if (ctx.inputs.size() < 2 || ctx.outputs.empty() || pc.constants.size() < 2 ||
      !pc.constants[1].defined())
    return nullptr;
  const TensorSpec &a = ctx.inputs[0], &b = ctx.inputs[1], &y = ctx.outputs[0];
  const DType dt = a.dtype;
  if (dt != DType::kFloat16 && dt != DType::kBFloat16 && dt != DType::kFloat32) return nullptr;
  if (b.dtype != dt || y.dtype != dt || pc.constants[1].dtype != dt) return nullptr;
  if (b.shape.size() != 2 || a.shape.empty() || y.shape.empty()) return nullptr;
  for (const auto *s : {&a.shape, &y.shape})
    for (int64_t d : *s)
      if (d <= 0) return nullptr;
  const auto es = static_cast<int64_t>(dtype_size(dt));
  if (ops::Epilogue::from_node(n).residual) return nullptr;  // C is the residual then
  const ops::GemmAttrs attrs = ops::GemmAttrs::from_node(n);
  const bool gemm = n.op_type == "Gemm";
  if (gemm && (attrs.trans_a || a.shape.size() != 2)) return nullptr;
  const bool tb = gemm && attrs.trans_b;
  // B as stored: [N, K] under transB ([K, N] otherwise). The context's B is the
  // logical [K, N] in both cases (transB as strides), so its shape cannot tell.
  const Shape &stored = pc.constants[1].shape;
  if (stored.size() != 2) return nullptr;
  const int64_t k = a.shape.back(), cols = tb ? stored[0] : stored[1];
  if ((tb ? stored[1] : stored[0]) != k || y.shape.back() != cols) return nullptr;
  if ((cols * es) % 16 == 0 || (k * es) % 16 != 0 || cols < 64) return nullptr;
  // A bias (Gemm's C row with alpha = beta = 1, or a MatMul's fused bias) must be a
  // constant: its padded copy is made here.
  const bool has_bias = n.inputs.size() > 2 && n.inputs[2] >= 0 &&
                        (gemm ? attrs.beta != 0.0 : ops::Epilogue::from_node(n).bias);
  if (has_bias) {
    if (pc.constants.size() < 3 || !pc.constants[2].defined() || pc.constants[2].dtype != dt ||
        pc.constants[2].numel() != cols || (gemm && (attrs.alpha != 1.0 || attrs.beta != 1.0)))
      return nullptr;
  }
  auto pad = std::make_unique<PaddedColumns>();
  pad->es = static_cast<std::size_t>(es);
  pad->cols = cols;
  pad->pitch = (cols * es + 15) / 16 * 16 / es;
  pad->rows = graph::shape_numel(y.shape) / cols;
  pad->b_transposed = tb;
  // Columns per GEMM: what keeps C's chunk near kChunkBytes, in steps of 256 columns, at
  // most 16 GEMMs; the whole pitch where that is one chunk anyway.
  constexpr int64_t kChunkBytes = int64_t{16} << 20, kStep = 256, kMaxChunks = 16;
  int64_t chunk = std::max<int64_t>(kChunkBytes / (pad->rows * es) / kStep * kStep, kStep);
  chunk = std::max(chunk, (cols + kMaxChunks - 1) / kMaxChunks + kStep - 1) / kStep * kStep;
  pad->chunk = chunk >= pad->pitch ? pad->pitch : chunk;
  pad->direct_cols = tb && pad->chunk < pad->pitch ? cols / pad->chunk * pad->chunk : 0;
  if (ctx.workspace_limit_bytes != 0 && pad->c_bytes() > ctx.workspace_limit_bytes / 2)
    return nullptr;
  const auto *src = static_cast<const unsigned char *>(pc.constants[1].data);
  const int64_t pad_cols = pad->pitch - pad->direct_cols;  // columns the copy of B holds
  std::vector<unsigned char> host(static_cast<std::size_t>(k * pad_cols * es), 0);
  if (tb) {  // rows [direct_cols, N) of [N, K], then zero rows up to the pitch
    std::copy_n(src + pad->direct_cols * k * es, (cols - pad->direct_cols) * k * es, host.data());
  } else {  // K rows of N, each padded to the pitch
    for (int64_t r = 0; r < k; ++r)
      std::copy_n(src + r * cols * es, cols * es, host.data() + r * pad->pitch * es);
  }
  pad->b = std::make_unique<cuda_ops::DeviceBuffer>(host.data(), host.size(), ctx.device.index);
  if (has_bias) {
    std::vector<unsigned char> bias(static_cast<std::size_t>(pad->pitch * es), 0);
    std::copy_n(static_cast<const unsigned char *>(pc.constants[2].data), cols * es, bias.data());
    pad->bias = std::make_unique<cuda_ops::DeviceBuffer>(bias.data(), bias.size(), ctx.device.index);
  }
  return pad;
}

}  // namespace

PreparedKernelPtr prepare_onnx_matmul(const PrepareContext &pc, CudaGemmLibrary lib,
                                      std::size_t workspace_bytes) {
  XRT_CHECK(pc.ctx != nullptr && is_onnx_matmul(pc), InvalidArgumentError,
            "prepare_onnx_matmul needs the context and an ONNX MatMul/Gemm node");
  // Only for libraries whose GEMMs honour the padded pitches (cuBLASLt and cuBLAS).
  std::unique_ptr<PaddedColumns> pad =
      lib.name == "cublasLt" || lib.name == "cublas" ? padded_columns(pc) : nullptr;
  auto kernel =
      std::make_shared<OnnxMatmulCuda>(std::move(lib), *pc.node, pc.ctx->device.index,
                                       pc.ctx->allow_tf32, workspace_bytes, std::move(pad));
  kernel->fit_workspace(pc);
  return kernel;
}

}  // namespace xpuruntime::matmul
