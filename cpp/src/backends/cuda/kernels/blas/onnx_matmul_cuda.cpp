// ONNX MatMul/Gemm nodes on CUDA GEMM libraries (onnx_matmul_cuda.h).
#include "backends/cuda/kernels/blas/onnx_matmul_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "backends/cuda/cuda_check.h"
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

class OnnxMatmulCuda final : public PreparedKernel {
 public:
  OnnxMatmulCuda(CudaGemmLibrary lib, graph::Node node, int device, bool tf32,
                 std::size_t workspace)
      : lib_(std::move(lib)),
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
    XRT_CHECK(!epilogue_.residual, UnsupportedOperationError, node_.where(),
              ": a residual epilogue is not supported by the CUDA GEMM kernels");
  }

  void run(const KernelArgs &args) const override {
    if (is_gemm_)
      run_gemm(args);
    else
      run_matmul(args);
  }
  std::size_t workspace_bytes() const override { return workspace_; }

 private:
  GemmProblem base(const KernelArgs &args) const {
    GemmProblem p;
    p.dtype = args.inputs[0].dtype;
    p.activation = activation_;
    p.allow_tf32 = tf32_;
    return p;
  }
  void gemm(const GemmProblem &p, double alpha, double beta, const KernelArgs &args) const {
    const GemmRejection why = lib_.rejection(p);
    XRT_CHECK(!why, UnsupportedOperationError, node_.where(), ": ", lib_.name,
              " cannot run this GEMM: ", why.detail);
    lib_.gemm(p, alpha, beta, args.stream, device_, args.workspace, args.workspace_bytes);
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
    if (b_one) {
      // B shared by every batch: one tall GEMM over all of A's rows.
      p.m = nb * m;
      p.a = {ia.data, k, 1, 0};
      p.b = {ib.data, nn, 1, 0};
      p.c = out.data;
      gemm(p, 1.0, 0.0, args);
    } else if ((a_one || pa == batch) && pb == batch) {
      // Same-shaped batches (or a shared A): one strided batched GEMM.
      p.batch = nb;
      p.a = {ia.data, k, 1, a_one ? 0 : m * k};
      p.b = {ib.data, nn, 1, k * nn};
      p.c = out.data;
      p.c_bs = m * nn;
      gemm(p, 1.0, 0.0, args);
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
        gemm(q, 1.0, 0.0, args);
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

PreparedKernelPtr prepare_onnx_matmul(const PrepareContext &pc, CudaGemmLibrary lib,
                                      std::size_t workspace_bytes) {
  XRT_CHECK(pc.ctx != nullptr && is_onnx_matmul(pc), InvalidArgumentError,
            "prepare_onnx_matmul needs the context and an ONNX MatMul/Gemm node");
  return std::make_shared<OnnxMatmulCuda>(std::move(lib), *pc.node, pc.ctx->device.index,
                                          pc.ctx->allow_tf32, workspace_bytes);
}

}  // namespace xpuruntime::matmul
