// MatMul (numpy semantics: 1-D promotion, broadcast batch dims) and Gemm, run by
// the GEMM kernel the dispatcher chose for op key `matmul`. Fused epilogues set by
// the compiler (ops::Epilogue): a bias row (MatMul input 2, N elements, added per
// column) and an activation applied to the result.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include "backends/cpu/kernels/matmul/cpu_gemm_impl.h"
#include "backends/cpu/kernels/matmul/cpu_gemm_packed.h"
#include "backends/cpu/kernels/onednn/onednn_context.h"
#include "backends/cpu/kernels/onednn/onednn_gemm.h"
#include "backends/cpu/kernels/elementwise.h"
#include "backends/cpu/kernels/conv_kernels.h"
#include "backends/cpu/kernels/gemm_call.h"
#include "backends/cpu/kernels/epilogue.h"
#include "backends/cpu/kernels/parallel.h"

#ifdef XRT_HAVE_CBLAS
#include "backends/cpu/kernels/matmul/cblas_api.h"
#endif

namespace xpuruntime::cpu {
namespace {

std::atomic<std::size_t> g_scratch_peak{0};
std::atomic<std::size_t> g_scratch_total{0};  // all threads' scratch buffers now

struct Scratch {
  void* p = nullptr;
  std::size_t bytes = 0;
  ~Scratch() {
    g_scratch_total.fetch_sub(bytes);
    std::free(p);
  }
};

}  // namespace

void onnx_matmul_run(const std::string& gemm, const MatmulStep& s, const Node& n,
                     const std::vector<TensorView>& in, std::vector<TensorView>& out,
                     const GemmFirst* first) {
  auto run = [&](const matmul::GemmProblem& q) {
    if (first == nullptr || !(*first)(q)) run_gemm(gemm, q);
  };
  Shape a = in[0].shape, b = in[1].shape;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  const int64_t m = a[a.size() - 2], k = a.back(), nn = b.back();
  Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape batch = broadcast_shapes(n, {ab, bb});
  const int64_t nb = shape_numel(batch);
  const std::size_t es = dtype_size(in[0].dtype);
  matmul::GemmProblem p;
  p.dtype = in[0].dtype;
  p.m = m;
  p.n = nn;
  p.k = k;
  p.c_rs = nn;
  const bool has_bias = s.epilogue.bias && in.size() > 2 && in[2].data;
  if (has_bias) p.bias = in[2].data;
  if (nb == 0 || m == 0 || nn == 0) return;
  // Batch dims of A and B left-padded to the output's batch rank.
  auto padded = [&](const Shape& s) {
    Shape full(batch.size() - s.size(), 1);
    full.insert(full.end(), s.begin(), s.end());
    return full;
  };
  const Shape pa = padded(ab), pb = padded(bb);
  const bool a_one = shape_numel(ab) == 1, b_one = shape_numel(bb) == 1;
  if (k == 0) {
    std::memset(out[0].data, 0, out[0].nbytes());
  } else if (b_one) {
    // B shared by every batch: one tall GEMM over all of A's rows.
    p.m = nb * m;
    p.a = {in[0].data, k, 1, 0};
    p.b = {in[1].data, nn, 1, 0};
    p.c = out[0].data;
    run(p);
  } else if ((a_one || pa == batch) && pb == batch) {
    // Same-shaped batches (or a shared A): one batched problem.
    p.batch = nb;
    p.a = {in[0].data, k, 1, a_one ? 0 : m * k};
    p.b = {in[1].data, nn, 1, k * nn};
    p.c = out[0].data;
    p.c_bs = m * nn;
    run(p);
  } else {
    // General broadcast of batch dims: one GEMM per output batch.
    auto strides = [&](const Shape& full, int64_t mat) {
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
        int64_t idx = rem % batch[d];
        rem /= batch[d];
        oa += idx * sta[d];
        ob += idx * stb[d];
      }
      matmul::GemmProblem q = p;
      q.a = {static_cast<const char*>(in[0].data) + oa * es, k, 1, 0};
      q.b = {static_cast<const char*>(in[1].data) + ob * es, nn, 1, 0};
      q.c = static_cast<char*>(out[0].data) + bi * m * nn * es;
      run(q);
    }
  }
  if (k == 0 && p.bias) {
    // An empty inner dimension still adds the fused bias.
    TensorView bias_view{in[2].dtype, {nn}, in[2].data};
    add_row_bias(out[0], bias_view);
  }
  apply_activation(s.epilogue, out[0]);
}

namespace {

}  // namespace

void onnx_gemm_run(const std::string& gemm, const MatmulStep& s, const Node& n,
                   const std::vector<TensorView>& in, std::vector<TensorView>& out,
                   const GemmFirst* first) {
  const bool ta = s.attrs.trans_a, tb = s.attrs.trans_b;
  const double alpha = s.attrs.alpha, beta = s.attrs.beta;
  const Shape& a = in[0].shape;
  const Shape& b = in[1].shape;
  const int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1], nn = tb ? b[0] : b[1];
  matmul::GemmProblem p;
  p.dtype = in[0].dtype;
  p.m = m;
  p.n = nn;
  p.k = k;
  p.a = ta ? matmul::MatrixRef{in[0].data, 1, m, 0} : matmul::MatrixRef{in[0].data, k, 1, 0};
  p.b = tb ? matmul::MatrixRef{in[1].data, 1, k, 0} : matmul::MatrixRef{in[1].data, nn, 1, 0};
  p.c = out[0].data;
  p.c_rs = nn;
  const bool has_c = in.size() > 2 && in[2].data && beta != 0.0;
  // A bias row (C of N elements, beta 1, alpha 1) goes into the GEMM epilogue.
  const bool bias_row = has_c && alpha == 1.0 && beta == 1.0 && in[2].numel() == nn &&
                        (in[2].rank() == 1 || (in[2].rank() == 2 && in[2].shape[0] == 1));
  if (bias_row) p.bias = in[2].data;
  if (m > 0 && nn > 0) {
    if (k == 0) std::memset(out[0].data, 0, out[0].nbytes());
    else if (first == nullptr || !(*first)(p)) run_gemm(gemm, p);
  }
  if ((has_c && !bias_row) || alpha != 1.0) {
    // Y = alpha * Y + beta * broadcast(C)
    visit_dtype(out[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      using N = Num<T>;
      using Cc = typename N::C;
      if constexpr (kIsFloat<T>) {
        T* y = out[0].ptr<T>();
        const Shape cst = has_c ? [&] {
          Shape s(2, 0);
          const Shape& cs = in[2].shape;
          Shape full(2 - std::min<std::size_t>(2, cs.size()), 1);
          full.insert(full.end(), cs.begin(), cs.end());
          s[0] = full[0] == 1 ? 0 : full[1];
          s[1] = full[1] == 1 ? 0 : 1;
          return s;
        }() : Shape{0, 0};
        const T* c = has_c ? in[2].ptr<const T>() : nullptr;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < nn; ++j) {
            Cc v = static_cast<Cc>(alpha) * N::load(y[i * nn + j]);
            if (c) v += static_cast<Cc>(beta) * N::load(c[i * cst[0] + j * cst[1]]);
            y[i * nn + j] = N::store(v);
          }
      }
    });
  }
  apply_activation(s.epilogue, out[0]);
}

namespace {

// Our pool splits the problem (batches, else column blocks, else row blocks) and
// each piece runs the kernel single-threaded: one thread pool for the whole plan,
// and a helper that is slow to start never stalls the caller. Every C element is
// computed by the same kernel over the same K order as unsplit, so results are
// identical. Nested in another parallel_for (a Conv tile) it runs as one piece.
template <typename F>
void split_gemm(const matmul::GemmProblem& p, F&& piece) {
  const int64_t es = static_cast<int64_t>(dtype_size(p.dtype));
  const int threads = parallel_threads();
  auto at = [es](const void* base, int64_t elems) { return static_cast<const char*>(base) + elems * es; };
  if (threads > 1 && p.batch >= threads) {
    parallel_for(p.batch, p.flops(), [&](int64_t b0, int64_t b1) {
      matmul::GemmProblem q = p;
      q.batch = b1 - b0;
      q.a.data = at(p.a.data, b0 * p.a.bs);
      q.b.data = at(p.b.data, b0 * p.b.bs);
      q.c = const_cast<char*>(at(p.c, b0 * p.c_bs));
      piece(q);
    });
  } else if (threads > 1 && p.n >= 64) {
    const int64_t blocks = (p.n + 31) / 32;  // 32-column pieces keep the micro-kernels' tiles whole
    parallel_for(blocks, p.flops(), [&](int64_t j0, int64_t j1) {
      const int64_t c0 = j0 * 32, c1 = std::min(p.n, j1 * 32);
      matmul::GemmProblem q = p;
      q.n = c1 - c0;
      q.b.data = at(p.b.data, c0 * p.b.cs);
      q.c = const_cast<char*>(at(p.c, c0 * p.c_cs));
      if (p.bias) q.bias = at(p.bias, c0);
      piece(q);
    });
  } else if (threads > 1 && p.m >= 64) {
    const int64_t blocks = (p.m + 15) / 16;
    parallel_for(blocks, p.flops(), [&](int64_t i0, int64_t i1) {
      const int64_t r0 = i0 * 16, r1 = std::min(p.m, i1 * 16);
      matmul::GemmProblem q = p;
      q.m = r1 - r0;
      q.a.data = at(p.a.data, r0 * p.a.rs);
      q.c = const_cast<char*>(at(p.c, r0 * p.c_rs));
      piece(q);
    });
  } else {
    piece(p);
  }
}

// One row of A (a classifier's Gemm at batch 1): a GEMV. OpenBLAS 0.3.21's sgemm
// packs B even for M = 1, doubling the memory traffic of a bandwidth-bound
// product. False when the problem is not of that form.
bool blas_gemv(const matmul::GemmProblem& q) {
#ifdef XRT_HAVE_CBLAS
  if (q.m != 1 || q.batch != 1 || q.activation != matmul::Activation::kNone || q.a.cs < 1 ||
      q.c_cs < 1 || (q.dtype != DType::kFloat32 && q.dtype != DType::kFloat64))
    return false;
  const bool rows_n = q.b.cs == 1 && q.b.rs >= q.n;  // B row-major K×N: y = Bᵀ·a
  const bool rows_k = q.b.rs == 1 && q.b.cs >= q.k;  // Bᵀ row-major N×K: y = Bᵀ·a
  if (!rows_n && !rows_k) return false;
  const auto t = rows_n ? CblasTrans : CblasNoTrans;
  const blasint rows = static_cast<blasint>(rows_n ? q.k : q.n), cols = static_cast<blasint>(rows_n ? q.n : q.k);
  const blasint ld = static_cast<blasint>(std::max<int64_t>(1, rows_n ? q.b.rs : q.b.cs));
  // y starts as the bias (or zero) and beta is 1: never scales stale arena bytes.
  auto run = [&](auto tag) {
    using T = decltype(tag);
    T* c = static_cast<T*>(q.c);
    const T* bias = static_cast<const T*>(q.bias);
    for (int64_t j = 0; j < q.n; ++j) c[j * q.c_cs] = bias ? bias[j] : T(0);
    const T* a = static_cast<const T*>(q.a.data);
    const T* b = static_cast<const T*>(q.b.data);
    const blasint incx = static_cast<blasint>(q.a.cs), incy = static_cast<blasint>(q.c_cs);
    if constexpr (std::is_same_v<T, float>) XRT_BLAS(cblas_sgemv)(CblasRowMajor, t, rows, cols, 1.f, b, ld, a, incx, 1.f, c, incy);
    else XRT_BLAS(cblas_dgemv)(CblasRowMajor, t, rows, cols, 1.0, b, ld, a, incx, 1.0, c, incy);
  };
  if (q.dtype == DType::kFloat32) run(float{});
  else run(double{});
  return true;
#else
  (void)q;
  return false;
#endif
}

// cpu_blocked's one-row product against a transposed B (a classifier's Gemm at
// batch 1, weights N×K): one AVX2 dot product per output instead of packing all
// of B for a single row. False when the problem is not of that form.
bool blocked_gemv(const matmul::GemmProblem& q) {
  if (q.m != 1 || q.batch != 1 || q.dtype != DType::kFloat32 ||
      q.activation != matmul::Activation::kNone || q.a.cs != 1 || q.c_cs != 1 || q.b.rs != 1 ||
      q.b.cs != q.k || !conv_kernels_avx2())
    return false;
  conv_gemv(ConvEpilogue{}, static_cast<const float*>(q.b.data), q.n, q.k,
            static_cast<const float*>(q.a.data), static_cast<const float*>(q.bias), nullptr,
            static_cast<float*>(q.c));
  return true;
}

void blas_single_threaded() {
#ifdef XRT_HAVE_CBLAS
  static std::once_flag once;
  std::call_once(once, [] { matmul::cpu_blas_set_threads(1); });
#endif
}

}  // namespace

const std::vector<std::string>& gemm_kernel_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    if (onednn::onednn_available()) v.push_back("onednn");
    if (matmul::cpu_blas_available()) v.push_back("cpu_blas");
    // After onednn and cpu_blas: front() is the GEMM of a Conv or attention built
    // outside a plan compile, whose B is made per call (cpu_packed would pack it each time).
    if (matmul::cpu_gemm_packed_available()) v.push_back("cpu_packed");
    v.push_back("cpu_blocked");
    return v;
  }();
  return names;
}

void run_gemm(const std::string& kernel, const matmul::GemmProblem& p) {
  // oneDNN threads itself (OpenMP, parallel_threads()): no split by our pool. A
  // problem it rejects (not float32, operands with no contiguous rows or columns,
  // the row-sums epilogue, or no fast oneDNN implementation for the case) runs on
  // the cpu_blas path below, which handles every problem, so a plan pinned to
  // onednn never fails on a layout; the registry's supports() gives the reason.
  if (kernel == "onednn" && try_onednn_gemm(p)) return;
  // cpu_packed threads itself over our pool (panels or row blocks); a problem it
  // cannot run (not float32, C columns strided, no AVX-512F) takes cpu_blocked.
  if (kernel == "cpu_packed" && !matmul::cpu_gemm_packed_rejection(p)) {
    matmul::cpu_gemm_packed(p);
    return;
  }
  if (kernel == "cpu_blas" || (kernel == "onednn" && matmul::cpu_blas_available())) {
    // OpenBLAS single-threaded inside each piece of our pool's split: its own
    // threads spin after every call and, at one thread per core, would fight our
    // pool's helpers for the cores between ops; its threaded level-3 driver also
    // serializes concurrent callers (the Conv tiles) on a global lock.
    blas_single_threaded();
    split_gemm(p, [](const matmul::GemmProblem& q) {
      if (!blas_gemv(q)) matmul::cpu_gemm_blas(q);
    });
  } else if (kernel == "cpu_blocked" || kernel == "cpu_gemv" || kernel == "onednn" ||
             kernel == "cpu_packed") {
    // cpu_gemv's one row against N x K weights is blocked_gemv; another shape (a step
    // whose row count changed at run time) takes cpu_blocked's GEMM.
    split_gemm(p, [](const matmul::GemmProblem& q) {
      if (!blocked_gemv(q)) matmul::cpu_gemm_blocked(q, 1);
    });
  } else {
    XRT_THROW(UnsupportedOperationError, "matmul kernel '", kernel,
              "' cannot run inside a CPU plan (CPU GEMM kernels: cpu_packed, onednn, cpu_gemv, "
              "cpu_blas, cpu_blocked)");
  }
}

namespace {

// An ONNX MatMul/Gemm node bound to one GEMM kernel (the one the dispatcher chose
// for it), its attributes and epilogue parsed once: the node is copied, so the
// prepared kernel outlives the plan's graph.
//
// With the onednn GEMM, 2-D constant weights and static shapes, the weights may be
// packed once here, when the session is built, into oneDNN's layout
// (onednn_gemm.h: OnednnPackedWeights); problems reading exactly those bytes with
// the shapes they were packed for run on the packed copy. With cpu_packed, 2-D
// constant float32 weights are always packed here (matmul::PackedB, any row count:
// the packing does not depend on M); every problem reading them runs on that copy.
class OnnxMatmulPrepared final : public PreparedKernel {
 public:
  OnnxMatmulPrepared(std::string gemm, Node node, graph::HostTensor weights, const OpContext* ctx)
      : gemm_(std::move(gemm)),
        node_(std::move(node)),
        step_(MatmulStep::from_node(node_)),
        is_gemm_(node_.op_type == "Gemm"),
        weights_(std::move(weights)) {
    if ((gemm_ != "onednn" && gemm_ != "cpu_packed") || !weights_.defined() ||
        weights_.dtype != DType::kFloat32 || weights_.shape.size() != 2 || ctx == nullptr ||
        ctx->inputs.size() < 2)
      return;
    std::optional<matmul::GemmProblem> p = problem_at_prepare(*ctx);
    if (!p) return;
    if (gemm_ == "onednn") {
      packed_ = OnednnPackedWeights::make(*p);
      if (packed_) first_ = [this](const matmul::GemmProblem& q) { return packed_->run(q); };
    } else if (matmul::cpu_gemm_packed_available() && p->k > 0 && p->n > 0) {
      packed_b_ = matmul::PackedB::pack_shared(p->b, p->k, p->n);  // weights_ keeps the bytes
      first_ = [this](const matmul::GemmProblem& q) {
        if (!packed_b_->serves(q) || matmul::cpu_gemm_packed_rejection(q)) return false;
        matmul::cpu_gemm_packed_run(q, *packed_b_);
        return true;
      };
    }
  }

  void run(const KernelArgs& args) const override {
    const std::vector<TensorView> in = views_of(args.inputs);
    std::vector<TensorView> out = views_of(args.outputs);
    const GemmFirst* first = first_ ? &first_ : nullptr;
    if (is_gemm_) onnx_gemm_run(gemm_, step_, node_, in, out, first);
    else onnx_matmul_run(gemm_, step_, node_, in, out, first);
  }

 private:
  // The GEMM problem run() will build (onnx_matmul_run / onnx_gemm_run: a 2-D B is
  // shared by every batch, so MatMul is one tall product), with the constant's
  // address as B and no A or C yet. Where A's rows are known only at run time (a
  // dynamic-shape step), a nominal 128: the packed weights serve every row count.
  // nullopt where the node is not of that form.
  std::optional<matmul::GemmProblem> problem_at_prepare(const OpContext& ctx) const {
    constexpr int64_t kNominalRows = 128;
    const Shape& a = ctx.inputs[0].shape;
    const Shape& b = weights_.shape;
    // The matmul context sees B as K×N: a Gemm's transB weights (N×K) by strides.
    const bool b_transposed = is_gemm_ && step_.attrs.trans_b;
    if (b.size() != 2 || ctx.inputs[1].shape != (b_transposed ? Shape{b[1], b[0]} : b))
      return std::nullopt;
    bool a_known = !a.empty();
    for (int64_t d : a) a_known = a_known && d > 0;
    matmul::GemmProblem p;
    p.dtype = DType::kFloat32;
    const bool has_c = ctx.inputs.size() > 2 && !ctx.inputs[2].shape.empty();
    if (!is_gemm_) {
      p.k = b[0];
      p.n = b[1];
      if (a_known && (a.size() < 2 || a.back() != p.k)) return std::nullopt;
      p.m = a_known ? shape_numel(a) / p.k : kNominalRows;
      p.a = {nullptr, p.k, 1, 0};
      p.b = {weights_.data, p.n, 1, 0};
      if (step_.epilogue.bias && has_c) p.bias = weights_.data;  // presence only
    } else {
      const bool ta = step_.attrs.trans_a, tb = step_.attrs.trans_b;
      if ((a_known && a.size() != 2) || step_.attrs.alpha != 1.0) return std::nullopt;
      p.k = tb ? b[1] : b[0];
      p.n = tb ? b[0] : b[1];
      p.m = a_known ? (ta ? a[1] : a[0]) : kNominalRows;
      p.a = ta ? matmul::MatrixRef{nullptr, 1, p.m, 0} : matmul::MatrixRef{nullptr, p.k, 1, 0};
      p.b = tb ? matmul::MatrixRef{weights_.data, 1, p.k, 0} : matmul::MatrixRef{weights_.data, p.n, 1, 0};
      if (has_c) {  // only a bias row with beta 1 runs as the GEMM's bias
        const Shape& c = ctx.inputs[2].shape;
        if (step_.attrs.beta != 1.0 || shape_numel(c) != p.n || c.size() > 2) return std::nullopt;
        p.bias = weights_.data;  // presence only
      }
    }
    p.c_rs = p.n;
    return p;
  }

  std::string gemm_;
  Node node_;
  MatmulStep step_;
  bool is_gemm_;
  graph::HostTensor weights_;  // the constant B (its address identifies it at run)
  std::shared_ptr<const OnednnPackedWeights> packed_;
  std::shared_ptr<const matmul::PackedB> packed_b_;  // cpu_packed's copy of the weights
  GemmFirst first_;
};

}  // namespace

PreparedKernelPtr prepare_cpu_matmul(const Kernel& kernel, const std::string& gemm,
                                     const PrepareContext& pc) {
  if (pc.node != nullptr && (pc.node->op_type == "MatMul" || pc.node->op_type == "Gemm")) {
    graph::HostTensor w;
    if (pc.constants.size() > 1 && pc.constants[1].defined()) w = pc.constants[1];
    return std::make_shared<OnnxMatmulPrepared>(gemm, *pc.node, std::move(w), pc.ctx);
  }
  return std::make_shared<CpuGemmPrepared>(gemm, kernel.Kernel::prepare(pc));
}

void* thread_scratch(std::size_t bytes, int slot) {
  thread_local Scratch scratch[2];
  Scratch& s = scratch[slot & 1];
  if (s.bytes < bytes) {
    std::free(s.p);
    std::size_t rounded = (bytes + 4095) / 4096 * 4096;
    s.p = std::aligned_alloc(64, rounded);
    XRT_CHECK(s.p != nullptr, OutOfMemoryError, "scratch allocation of ", rounded,
              " bytes failed");
    // The peak counts every thread's buffers together (Conv tiles hold one each).
    const std::size_t total = g_scratch_total.fetch_add(rounded - s.bytes) + rounded - s.bytes;
    s.bytes = rounded;
    std::size_t prev = g_scratch_peak.load();
    while (total > prev && !g_scratch_peak.compare_exchange_weak(prev, total)) {
    }
  }
  return s.p;
}

std::size_t scratch_peak_bytes() { return g_scratch_peak.load(); }

}  // namespace xpuruntime::cpu
