// GEMM kernel "onednn" (float32): C[b] = act(op(A[b])·op(B[b]) + bias) as oneDNN's
// matmul primitive on 3-D memory descriptors {batch, rows, cols} with the problem's
// own strides, so no operand is copied or packed:
//   - a transposed operand is a stride swap (rows or columns must be contiguous:
//     the cases blas_layout() accepts; others are rejected, cpu_blas copies them);
//   - an operand shared by the whole batch (batch stride 0) has batch dim 1, which
//     oneDNN's matmul broadcasts; C needs its own batch stride;
//   - the bias is the primitive's bias {1, 1, N}; GemmProblem's tanh-approximated
//     GELU is the post-op eltwise_gelu_tanh (the same function, NaN and ±inf
//     included). Relu runs as a pass over C after the primitive: oneDNN's
//     eltwise_relu turns NaN into 0 where every other kernel (and ONNX) keeps NaN;
//   - K = 0 writes act(bias) (or zeros) here; M, N or batch 0 write nothing.
// Measured on the 2-core AVX-512 dev machine (2 threads): oneDNN's brgemm reaches
// 184-229 GFLOP/s on transformer shapes with these plain layouts, against 92-144
// for OpenBLAS split by our pool, so no weight prepacking is done.
//
// Where oneDNN has only its reference implementation for a case (far slower than
// BLAS) the case is rejected, and run_gemm sends it to cpu_blas.
//
// Primitive cache: creating a matmul primitive costs 100 us or more, so primitives
// are kept per (dtype, dims, strides, bias, activation, threads) in a process-wide
// LRU of kOnednnGemmCacheSize entries, rejections included; the cache's mutex
// guards only lookups and builds. One primitive runs on several threads at once
// (a Conv's im2col tiles share one shape), so its scratchpad (brgemm's copy of B)
// is ours, per thread (scratchpad_mode::user): with the library's mode a primitive
// may own one buffer for all its executions (measured: wrong results from two
// tiles at once).
//
// Threads: oneDNN splits the work by the OpenMP thread count it sees when the
// primitive is created, so that count is part of the key: parallel_threads() (the
// plan's ThreadCap), or 1 inside an OpenMP parallel region (one of our pool's
// jobs, e.g. a Conv tile's GEMM), where a nested team would oversubscribe.
#include "backends/cpu/kernels/onednn/onednn_gemm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "backends/cpu/kernels/onednn/onednn_compat.h"
#include "backends/cpu/kernels/onednn/onednn_context.h"
#include "backends/cpu/kernels/contention.h"
#include "backends/cpu/kernels/parallel.h"
#include "xpuruntime/error.h"

#ifdef XRT_HAVE_ONEDNN
#include <omp.h>
#endif

namespace xpuruntime::cpu {
namespace {

using matmul::GemmProblem;
using matmul::GemmRejection;
using Kind = GemmRejection::Kind;

// One operand as oneDNN sees it: dims {batch or 1, rows, cols} and their
// strides.
struct Desc {
  std::array<int64_t, 3> dims{}, strides{};
};

// The 3-D descriptor of a rows×cols matrix with strides (rs, cs) repeated every
// bs elements over `batch`; nullopt with *why when oneDNN cannot address it
// fast.
std::optional<Desc> describe(const char* name, int64_t batch, int64_t rows, int64_t cols, int64_t rs,
                             int64_t cs, int64_t bs, bool output, std::string* why) {
  const auto l = matmul::blas_layout(rows, cols, rs, cs);
  if (!l) {
    *why = std::string(name) + " has neither contiguous rows nor contiguous columns (strides " +
           std::to_string(rs) + ", " + std::to_string(cs) + ")";
    return std::nullopt;
  }
  Desc d;
  // Strides of size-1 dims are set to the dense values oneDNN's layout matching
  // expects (they address nothing, and views from frameworks carry any value).
  d.strides[1] = l->transposed ? 1 : l->ld;
  d.strides[2] = l->transposed ? l->ld : 1;
  const int64_t extent =
      l->transposed ? std::max<int64_t>(cols, 1) * l->ld : std::max<int64_t>(rows, 1) * l->ld;
  d.dims = {batch, rows, cols};
  d.strides[0] = extent;
  if (batch > 1) {
    if (bs == 0 && !output) {
      d.dims[0] = 1;  // shared by every batch: oneDNN broadcasts a batch dim of 1
    } else if (bs <= 0 || (output && bs < extent)) {
      // Batches of an output that overlap would be written concurrently (inputs
      // may overlap: they are only read).
      *why =
          std::string(name) + "'s batch stride " + std::to_string(bs) +
          (output ? " is smaller than one matrix (" + std::to_string(extent) + " elements)" : " is negative");
      return std::nullopt;
    } else {
      d.strides[0] = bs;
    }
  }
  return d;
}

// The checks that need no primitive: dtype, epilogue, strides. Fills the three
// descriptors when p passes.
GemmRejection static_rejection(const GemmProblem& p, Desc* a, Desc* b, Desc* c) {
  if (!onednn::onednn_available()) return {Kind::kShape, onednn::onednn_info()};
  if (p.dtype != DType::kFloat32) {
    return {Kind::kDtype, "the onednn GEMM runs float32 only, not " + std::string(dtype_name(p.dtype)) +
                              " (cpu_blas runs float64, float16 and bfloat16)"};
  }
  if (GemmRejection r = matmul::row_sums_rejection(p, "onednn")) return r;
  if (p.batch < 0 || p.m < 0 || p.n < 0 || p.k < 0) return {};  // dims unknown yet
  if (p.batch == 0 || p.m == 0 || p.n == 0) return {};          // nothing to address
  // One or two rows is a matrix-vector product (classifier heads, one-token decoding):
  // memory-bound, and the primitive's overhead shows. Measured (2 threads, AVX-512,
  // K 768-1280, N 768-3072): cpu_blas's split 2.4-4.4x faster at M <= 2; from M = 4
  // to 8 they trade places, from 16 oneDNN wins.
  if (p.m <= 2 && p.k > 0)
    return {Kind::kShape,
            "onednn: " + std::to_string(p.m) +
                " row(s): a matrix-vector product, faster on cpu_gemv (weights N x K) or "
                "cpu_blas's split"};
  std::string why;
  std::optional<Desc> da, db, dc;
  if (!(dc = describe("C", p.batch, p.m, p.n, p.c_rs, p.c_cs, p.c_bs, true, &why))) {
    return {Kind::kLayout, "onednn: " + why};
  }
  *c = *dc;
  if (p.k == 0) return {};  // A and B are not read
  if (!(da = describe("A", p.batch, p.m, p.k, p.a.rs, p.a.cs, p.a.bs, false, &why)) ||
      !(db = describe("B", p.batch, p.k, p.n, p.b.rs, p.b.cs, p.b.bs, false, &why))) {
    return {Kind::kLayout, "onednn: " + why + "; cpu_blas copies such operands first"};
  }
  if (p.batch > 1 && da->dims[0] == 1 && db->dims[0] == 1) {
    // oneDNN derives the output's batch from its inputs' (broadcast of 1 and 1
    // is 1).
    return {Kind::kLayout,
            "onednn: A and B are both shared by every batch (batch stride 0); "
            "oneDNN's matmul needs one of them per batch"};
  }
  *a = *da, *b = *db;
  return {};
}

float activate(matmul::Activation act, float v) {
  switch (act) {
    case matmul::Activation::kRelu:
      return v < 0.f ? 0.f : v;  // NaN stays NaN
    case matmul::Activation::kGelu: {
      const double x = v, s = std::sqrt(2.0 / 3.14159265358979323846);
      return static_cast<float>(0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x))));
    }
    default:
      return v;
  }
}

// K = 0: every C element is act(bias) (an empty sum is 0); oneDNN is not asked.
void write_empty_k(const GemmProblem& p) {
  auto* c = static_cast<float*>(p.c);
  const auto* bias = static_cast<const float*>(p.bias);
  for (int64_t bi = 0; bi < p.batch; ++bi)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j)
        c[bi * p.c_bs + i * p.c_rs + j * p.c_cs] = activate(p.activation, bias ? bias[j] : 0.f);
}

#ifdef XRT_HAVE_ONEDNN

using dnnl::memory;

// C = relu(C) in place, keeping NaN (x < 0 is false for NaN), over our pool (inline
// inside one of its jobs).
void relu_pass(const GemmProblem& p) {
  auto* c = static_cast<float*>(p.c);
  const int64_t rows = p.batch * p.m;
  parallel_for(rows, rows * p.n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = c + (r / p.m) * p.c_bs + (r % p.m) * p.c_rs;
      if (p.c_cs == 1) {
        for (int64_t j = 0; j < p.n; ++j) row[j] = row[j] < 0.f ? 0.f : row[j];
      } else {
        for (int64_t j = 0; j < p.n; ++j) row[j * p.c_cs] = row[j * p.c_cs] < 0.f ? 0.f : row[j * p.c_cs];
      }
    }
  });
}

// blocking_threads(): 1 on a contended machine, where an OpenMP barrier would wait for a
// descheduled thread (parallel.h).
int gemm_threads() { return omp_in_parallel() ? 1 : blocking_threads(); }

// Everything a primitive depends on, flattened: dtype, threads, bias,
// activation, m, n, k, then dims[0] and strides of A, B, C.
using Key = std::array<int64_t, 19>;

struct KeyHash {
  std::size_t operator()(const Key& k) const {
    std::size_t h = 0xcbf29ce484222325ull;
    for (int64_t v : k) h = (h ^ static_cast<std::size_t>(v)) * 0x100000001b3ull;
    return h;
  }
};

Key key_of(const GemmProblem& p, const Desc& a, const Desc& b, const Desc& c, int threads) {
  return {static_cast<int64_t>(p.dtype),
          threads,
          p.bias != nullptr,
          static_cast<int64_t>(p.activation),
          p.m,
          p.n,
          p.k,
          a.dims[0],
          a.strides[0],
          a.strides[1],
          a.strides[2],
          b.dims[0],
          b.strides[0],
          b.strides[1],
          b.strides[2],
          c.dims[0],
          c.strides[0],
          c.strides[1],
          c.strides[2]};
}

// A built primitive with its descriptors, or why oneDNN has none worth running.
struct Entry {
  std::optional<dnnl::matmul> prim;
  memory::desc a, b, c, bias, scratch;
  std::string impl;
  GemmRejection rejection;
};

memory::desc md(const Desc& d) {
  return memory::desc(memory::dims(d.dims.begin(), d.dims.end()), memory::data_type::f32,
                      memory::dims(d.strides.begin(), d.strides.end()));
}

std::shared_ptr<const Entry> build(const GemmProblem& p, const Desc& a, const Desc& b, const Desc& c,
                                   int threads) {
  auto e = std::make_shared<Entry>();
  onednn::OmpThreads omp(threads);
  try {
    e->a = md(a), e->b = md(b), e->c = md(c);
    e->bias = memory::desc({1, 1, p.n}, memory::data_type::f32, memory::dims{p.n, p.n, 1});
    dnnl::post_ops po;  // relu: relu_pass() after the primitive (see the top)
    if (p.activation == matmul::Activation::kGelu) {
      onednn::append_eltwise(po, dnnl::algorithm::eltwise_gelu_tanh, 0.f, 0.f);
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd =
        onednn::matmul_pd(e->a, e->b, p.bias ? &e->bias : nullptr, e->c, attr, onednn::cpu_engine());
    e->impl = pd.impl_info_str();
    e->scratch = pd.scratchpad_desc();
    if (e->impl.rfind("ref", 0) == 0) {
      e->rejection = {Kind::kLayout, "oneDNN has only its reference matmul (" + e->impl +
                                         ") for this case, slower than cpu_blas"};
    } else {
      e->prim.emplace(pd);
    }
  } catch (const dnnl::error& err) {
    e->rejection = {Kind::kShape, std::string("oneDNN has no matmul for this case: ") + err.what()};
  }
  return e;
}

// This thread's scratchpad of at least `bytes` (64-byte aligned; grows, never
// shrinks), valid until the thread asks again.
void* thread_scratchpad(std::size_t bytes) {
  struct Buf {
    std::unique_ptr<void, decltype(&std::free)> p{nullptr, &std::free};
    std::size_t size = 0;
  };
  thread_local Buf buf;
  if (buf.size < bytes) {
    const std::size_t n = (bytes + 63) / 64 * 64;
    buf.p.reset(std::aligned_alloc(64, n));
    XRT_CHECK(buf.p != nullptr, OutOfMemoryError, "onednn GEMM: cannot allocate ", n, " bytes of scratchpad");
    buf.size = n;
  }
  return buf.p.get();
}

// The process's primitives, least recently used first out.
class Cache {
 public:
  static Cache& instance() {
    static Cache* c = new Cache();  // never destroyed: plans may run during static teardown
    return *c;
  }

  std::shared_ptr<const Entry> get(const GemmProblem& p, const Desc& a, const Desc& b, const Desc& c,
                                   int threads) {
    const Key k = key_of(p, a, b, c, threads);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(k); it != index_.end()) {
      lru_.splice(lru_.end(), lru_, it->second);
      return it->second->second;
    }
    std::shared_ptr<const Entry> e = build(p, a, b, c, threads);
    if (lru_.size() >= kOnednnGemmCacheSize) {
      index_.erase(lru_.front().first);
      lru_.pop_front();
    }
    lru_.emplace_back(k, e);
    index_.emplace(k, std::prev(lru_.end()));
    return e;
  }

  std::size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return lru_.size();
  }

 private:
  std::mutex mu_;
  std::list<std::pair<Key, std::shared_ptr<const Entry>>> lru_;
  std::unordered_map<Key, std::list<std::pair<Key, std::shared_ptr<const Entry>>>::iterator, KeyHash> index_;
};

// The cached entry for a problem whose dims are all known and non-empty.
std::shared_ptr<const Entry> entry_for(const GemmProblem& p, const Desc& a, const Desc& b, const Desc& c) {
  return Cache::instance().get(p, a, b, c, gemm_threads());
}

#endif  // XRT_HAVE_ONEDNN

bool known_non_empty(const GemmProblem& p) { return p.batch > 0 && p.m > 0 && p.n > 0 && p.k > 0; }

}  // namespace

GemmRejection onednn_gemm_rejection(const GemmProblem& p) {
  Desc a, b, c;
  GemmRejection r = static_rejection(p, &a, &b, &c);
  if (r || !known_non_empty(p)) return r;
#ifdef XRT_HAVE_ONEDNN
  return entry_for(p, a, b, c)->rejection;
#else
  return r;
#endif
}

bool onednn_gemm_supports(const GemmProblem& p, std::string* why) {
  GemmRejection r = onednn_gemm_rejection(p);
  if (r && why) *why = r.detail;
  return !r;
}

bool try_onednn_gemm(const GemmProblem& p, std::string* why) {
  Desc a, b, c;
  if (GemmRejection r = static_rejection(p, &a, &b, &c)) {
    if (why) *why = r.detail;
    return false;
  }
  if (p.batch == 0 || p.m == 0 || p.n == 0) return true;
  if (p.k == 0) {
    write_empty_k(p);
    return true;
  }
#ifdef XRT_HAVE_ONEDNN
  const std::shared_ptr<const Entry> e = entry_for(p, a, b, c);
  if (e->rejection) {
    if (why) *why = e->rejection.detail;
    return false;
  }
  onednn::OmpThreads omp(gemm_threads());
  const dnnl::engine& eng = onednn::cpu_engine();
  dnnl::stream& st = onednn::thread_stream();
  try {
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, memory(e->a, eng, const_cast<void*>(p.a.data))},
        {DNNL_ARG_WEIGHTS, memory(e->b, eng, const_cast<void*>(p.b.data))},
        {DNNL_ARG_DST, memory(e->c, eng, p.c)}};
    if (p.bias) args.emplace(DNNL_ARG_BIAS, memory(e->bias, eng, const_cast<void*>(p.bias)));
    if (const std::size_t bytes = e->scratch.get_size(); bytes > 0)
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(e->scratch, eng, thread_scratchpad(bytes)));
    e->prim->execute(st, args);
    st.wait();
    if (p.activation == matmul::Activation::kRelu) relu_pass(p);
  } catch (const dnnl::error& err) {
    XRT_THROW(UnsupportedOperationError, "onednn GEMM (", p.batch, "x", p.m, "x", p.n, "x", p.k, ", ",
              e->impl, ") failed: ", err.what(), " (pin matmul to cpu_blas to run without oneDNN)");
  }
  return true;
#else
  return false;  // static_rejection rejected every problem already
#endif
}

void onednn_gemm(const GemmProblem& p) {
  XRT_CHECK(onednn::onednn_available(), BackendUnavailableError, "onednn GEMM: ", onednn::onednn_info());
  std::string why;
  XRT_CHECK(try_onednn_gemm(p, &why), UnsupportedOperationError, "onednn GEMM cannot run this problem (",
            p.batch, "x", p.m, "x", p.n, "x", p.k, "): ", why);
}

std::string onednn_gemm_impl(const GemmProblem& p) {
  Desc a, b, c;
  if (static_rejection(p, &a, &b, &c) || !known_non_empty(p)) return {};
#ifdef XRT_HAVE_ONEDNN
  const std::shared_ptr<const Entry> e = entry_for(p, a, b, c);
  return e->rejection ? std::string() : e->impl;
#else
  return {};
#endif
}

#ifdef XRT_HAVE_ONEDNN
// The key of a problem with its row count left out: the packed weights serve every
// M (a dynamic-shape step's, too), each M with its own primitive on the same packed
// weights descriptor.
Key key_any_m(const GemmProblem& p, const Desc& a, const Desc& b, const Desc& c, int threads) {
  Key k = key_of(p, a, b, c, threads);
  k[4] = 0;  // m
  return k;
}

struct PackedPrimitive {
  dnnl::matmul prim;
  memory::desc a, c, scratch;
};

struct OnednnPackedWeights::Impl {
  Key key;  // key_any_m of the problems it serves
  const void* b_src = nullptr;
  memory::desc bias;
  memory packed;
  // The primitive for the row count it was packed for (set once in make(), read
  // without the lock: a static-shape step's every run), then the others.
  std::shared_ptr<const PackedPrimitive> packed_m_prim;
  int64_t packed_m = -1;
  mutable std::mutex mu;
  mutable std::map<int64_t, std::shared_ptr<const PackedPrimitive>> by_m;  // null: none

  // The primitive for p's M on the packed weights (built on first use; at most 16 kept).
  std::shared_ptr<const PackedPrimitive> for_m(const GemmProblem& p, const Desc& a, const Desc& c,
                                               int threads) const {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = by_m.find(p.m); it != by_m.end()) return it->second;
    std::shared_ptr<const PackedPrimitive> made;
    onednn::OmpThreads omp(threads);
    try {
      auto pp = std::make_shared<PackedPrimitive>();
      pp->a = md(a), pp->c = md(c);
      dnnl::post_ops po;  // as build(): relu is relu_pass() after the primitive
      if (p.activation == matmul::Activation::kGelu)
        onednn::append_eltwise(po, dnnl::algorithm::eltwise_gelu_tanh, 0.f, 0.f);
      dnnl::primitive_attr attr;
      attr.set_post_ops(po);
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::matmul::primitive_desc pd = onednn::matmul_pd(
          pp->a, packed.get_desc(), p.bias ? &bias : nullptr, pp->c, attr, onednn::cpu_engine());
      if (std::string(pd.impl_info_str()).rfind("ref", 0) != 0) {
        pp->prim = dnnl::matmul(pd);
        pp->scratch = pd.scratchpad_desc();
        made = std::move(pp);
      }
    } catch (const dnnl::error&) {
      // no implementation on this packed layout for this M: the plain path runs it
    }
    if (by_m.size() >= 16) by_m.erase(by_m.begin());
    by_m.emplace(p.m, made);
    return made;
  }
};
#else
struct OnednnPackedWeights::Impl {};
#endif

OnednnPackedWeights::OnednnPackedWeights(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OnednnPackedWeights::~OnednnPackedWeights() = default;

std::shared_ptr<const OnednnPackedWeights> OnednnPackedWeights::make(const GemmProblem& p) {
#ifdef XRT_HAVE_ONEDNN
  Desc a, b, c;
  if (static_rejection(p, &a, &b, &c) || !known_non_empty(p)) return nullptr;
  if (b.dims[0] != 1) return nullptr;  // one B for every batch
  const int64_t ld = std::max(p.b.rs, p.b.cs);
  if ((ld * static_cast<int64_t>(sizeof(float))) % 2048 != 0) return nullptr;
  const int threads = gemm_threads();
  auto impl = std::make_unique<Impl>();
  onednn::OmpThreads omp(threads);
  try {
    impl->key = key_any_m(p, a, b, c, threads);
    impl->bias = memory::desc({1, 1, p.n}, memory::data_type::f32, memory::dims{p.n, p.n, 1});
    // The layout oneDNN prefers for this problem's M; other Ms reuse it.
    const memory::desc any(memory::dims(b.dims.begin(), b.dims.end()), memory::data_type::f32,
                           memory::format_tag::any);
    const dnnl::matmul::primitive_desc pd = onednn::matmul_pd(
        md(a), any, p.bias ? &impl->bias : nullptr, md(c), dnnl::primitive_attr(), onednn::cpu_engine());
    if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return nullptr;
    impl->packed = memory(pd.weights_desc(), onednn::cpu_engine());
    memory src(md(b), onednn::cpu_engine(), const_cast<void*>(p.b.data));
    dnnl::stream& st = onednn::thread_stream();
    dnnl::reorder(src, impl->packed).execute(st, src, impl->packed);
    st.wait();
    impl->b_src = p.b.data;
  } catch (const dnnl::error&) {
    return nullptr;  // the plain path runs it (and reports what oneDNN says)
  }
  // The primitive for this row count, built now, while preparing.
  impl->packed_m_prim = impl->for_m(p, a, c, threads);
  if (!impl->packed_m_prim) return nullptr;
  impl->packed_m = p.m;
  return std::make_shared<const OnednnPackedWeights>(std::move(impl));
#else
  (void)p;
  return nullptr;
#endif
}

bool OnednnPackedWeights::run(const GemmProblem& p) const {
#ifdef XRT_HAVE_ONEDNN
  if (p.b.data != impl_->b_src) return false;
  Desc a, b, c;
  if (static_rejection(p, &a, &b, &c) || !known_non_empty(p)) return false;
  const int threads = gemm_threads();
  if (key_any_m(p, a, b, c, threads) != impl_->key) return false;
  const std::shared_ptr<const PackedPrimitive> pp =
      p.m == impl_->packed_m ? impl_->packed_m_prim : impl_->for_m(p, a, c, threads);
  if (!pp) return false;
  onednn::OmpThreads omp(threads);
  const dnnl::engine& eng = onednn::cpu_engine();
  dnnl::stream& st = onednn::thread_stream();
  try {
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, memory(pp->a, eng, const_cast<void*>(p.a.data))},
        {DNNL_ARG_WEIGHTS, impl_->packed},
        {DNNL_ARG_DST, memory(pp->c, eng, p.c)}};
    if (p.bias) args.emplace(DNNL_ARG_BIAS, memory(impl_->bias, eng, const_cast<void*>(p.bias)));
    if (const std::size_t bytes = pp->scratch.get_size(); bytes > 0)
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(pp->scratch, eng, thread_scratchpad(bytes)));
    pp->prim.execute(st, args);
    st.wait();
    if (p.activation == matmul::Activation::kRelu) relu_pass(p);
  } catch (const dnnl::error& err) {
    XRT_THROW(UnsupportedOperationError, "onednn GEMM on packed weights (", p.batch, "x", p.m, "x",
              p.n, "x", p.k, ") failed: ", err.what(),
              " (pin matmul to cpu_blas to run without oneDNN)");
  }
  return true;
#else
  (void)p;
  return false;
#endif
}

std::size_t onednn_gemm_cache_size() {
#ifdef XRT_HAVE_ONEDNN
  return Cache::instance().size();
#else
  return 0;
#endif
}

}  // namespace xpuruntime::cpu
