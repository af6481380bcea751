// cuBLASLt GEMM (see cublaslt_gemm_impl.h).
//
// Per problem shape a Plan holds the matmul descriptor and the three matrix
// layouts (creating them costs microseconds per call otherwise), the heuristic's
// answers per (workspace, alignment), and the explicit algorithm ids already
// checked against it. The bias pointer is an attribute of the shared descriptor,
// so setting it and enqueuing the matmul happen under the plan's mutex (an
// asynchronous enqueue: microseconds). Handles: one cublasLtHandle_t per device;
// cuBLASLt keeps no stream or workspace in it, so threads share it.
#include "backends/cuda/kernels/blas/cublaslt_gemm_impl.h"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "backends/cuda/kernels/blas/cublas_common.h"
#include "backends/cuda/cuda_check.h"

namespace xpuruntime::matmul {
namespace {

static_assert(sizeof(cublasLtMatmulAlgo_t) == 8 * sizeof(uint64_t),
              "algorithm ids serialize the 8 words of cublasLtMatmulAlgo_t");

constexpr const char* kIdPrefix = "lt1:";
constexpr uint32_t kMaxAlignment = 256;  // what cuBLASLt assumes when not told

cublasLtHandle_t lt_handle(int device) {
  static std::mutex mu;
  static auto* handles = new std::vector<cublasLtHandle_t>();  // never destroyed (exit order)
  std::lock_guard lock(mu);
  if (device >= static_cast<int>(handles->size())) handles->resize(device + 1, nullptr);
  cublasLtHandle_t& h = (*handles)[device];
  if (h == nullptr) XRT_CUBLAS_CHECK(cublasLtCreate(&h));  // caller holds a DeviceGuard
  return h;
}

struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

template <typename T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  XRT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)));
}
template <typename T>
void set_attr(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const T& v) {
  XRT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, a, &v, sizeof(v)));
}
template <typename T>
void set_attr(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const T& v) {
  XRT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, a, &v, sizeof(v)));
}

cublasLtEpilogue_t epilogue_of(const GemmProblem& p, const ColMajorGemm& g) {
  // Row sums of A: A is the column-major Y (Aᵀ, reduced over k per column of C')
  // when the operands were swapped, else X (reduced per row of C').
  if (p.a_row_sums != nullptr) return g.swapped ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA;
  const bool bias = p.bias != nullptr;
  switch (p.activation) {
    case Activation::kRelu: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case Activation::kGelu: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    default: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

uint32_t alignment_of(const void* ptr) {
  const auto v = reinterpret_cast<uintptr_t>(ptr);
  if (v == 0) return kMaxAlignment;
  return static_cast<uint32_t>(std::min<uintptr_t>(kMaxAlignment, v & (~v + 1)));
}

struct PlanKey {
  int device;
  DType dtype;
  bool tf32;
  int64_t batch, m, n, k;
  bool tx, ty;
  int64_t ldx, ldy, ldc, sx, sy, sc;
  Activation act;
  bool bias, row_sums;
  auto operator<=>(const PlanKey&) const = default;
};

// Alignment of X, Y, C in bytes and the workspace cap: what the heuristic must respect.
using HeuristicKey = std::tuple<std::size_t, uint32_t, uint32_t, uint32_t>;

struct CheckedAlgo {
  cublasLtMatmulAlgo_t algo;
  std::size_t workspace = 0;
  std::array<uint32_t, 3> min_alignment{};  // X, Y, C
};

class Plan {
 public:
  Plan(const GemmProblem& p, const ColMajorGemm& g) {
    const cudaDataType t = cuda_data_type(p.dtype);
    const bool tf32 = p.dtype == DType::kFloat32 && p.allow_tf32;
    const cublasComputeType_t compute = p.dtype == DType::kFloat64 ? CUBLAS_COMPUTE_64F
                                        : tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                               : CUBLAS_COMPUTE_32F;
    const cudaDataType scale = p.dtype == DType::kFloat64 ? CUDA_R_64F : CUDA_R_32F;
    cublasLtMatmulDesc_t d = nullptr;
    XRT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, compute, scale));
    desc_.reset(d);
    const cublasOperation_t ox = g.x.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t oy = g.y.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    set_attr(d, CUBLASLT_MATMUL_DESC_TRANSA, ox);
    set_attr(d, CUBLASLT_MATMUL_DESC_TRANSB, oy);
    set_attr(d, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue_of(p, g));
    if (p.bias != nullptr) set_attr(d, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, int64_t{0});
    x_ = make_layout(t, g.x.transpose ? g.k : g.m, g.x.transpose ? g.m : g.k, g.x.ld,
                     p.batch, g.x.batch_stride);
    y_ = make_layout(t, g.y.transpose ? g.n : g.k, g.y.transpose ? g.k : g.n, g.y.ld,
                     p.batch, g.y.batch_stride);
    c_ = make_layout(t, g.m, g.n, g.ldc, p.batch, g.c_batch_stride);
  }

  // Heuristic answers, best first (cached). Caller holds mu().
  const std::vector<cublasLtMatmulHeuristicResult_t>& heuristics(cublasLtHandle_t h,
                                                                 const HeuristicKey& key) {
    auto it = heuristics_.find(key);
    if (it != heuristics_.end()) return it->second;
    cublasLtMatmulPreference_t pref = nullptr;
    XRT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    Preference owned(pref);
    set_attr(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(std::get<0>(key)));
    set_attr(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, std::get<1>(key));
    set_attr(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, std::get<2>(key));
    set_attr(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, std::get<3>(key));
    set_attr(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, std::get<3>(key));
    std::array<cublasLtMatmulHeuristicResult_t, 16> results{};
    int returned = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, desc(), x(), y(), c(), c(), pref,
                                                       static_cast<int>(results.size()),
                                                       results.data(), &returned);
    std::vector<cublasLtMatmulHeuristicResult_t> ok;
    if (st == CUBLAS_STATUS_SUCCESS) {
      for (int i = 0; i < returned; ++i) {
        if (results[i].state == CUBLAS_STATUS_SUCCESS) ok.push_back(results[i]);
      }
    } else if (st != CUBLAS_STATUS_NOT_SUPPORTED) {
      throw_cublas_error("cublasLtMatmulAlgoGetHeuristic", st, __FILE__, __LINE__);
    }
    return heuristics_.emplace(key, std::move(ok)).first->second;
  }

  // An explicit id checked against this problem (cached). Caller holds mu().
  const CheckedAlgo& checked(cublasLtHandle_t h, const std::string& id) {
    auto it = checked_.find(id);
    if (it != checked_.end()) return it->second;
    CheckedAlgo ca;
    cublaslt_parse_algorithm_id(id, &ca.algo);
    cublasLtMatmulHeuristicResult_t r{};
    cublasStatus_t st = cublasLtMatmulAlgoCheck(h, desc(), x(), y(), c(), c(), &ca.algo, &r);
    if (st != CUBLAS_STATUS_SUCCESS) {
      XRT_THROW(UnsupportedOperationError, "cublasLt: algorithm ", cublaslt_describe_algorithm(id),
                " is not valid for this problem (cublasLtMatmulAlgoCheck: ",
                cublasGetStatusName(st), "); it was tuned for another shape, dtype or cuBLASLt "
                "version: re-tune and re-export the pins");
    }
    ca.workspace = r.workspaceSize;
    const cublasLtMatmulAlgoCapAttributes_t caps[3] = {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES,
                                                       CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES,
                                                       CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES};
    for (int i = 0; i < 3; ++i) {
      uint32_t v = 1;
      std::size_t written = 0;
      if (cublasLtMatmulAlgoCapGetAttribute(&ca.algo, caps[i], &v, sizeof(v), &written) ==
          CUBLAS_STATUS_SUCCESS) {
        ca.min_alignment[i] = v;
      }
    }
    return checked_.emplace(id, ca).first->second;
  }

  std::mutex& mu() { return mu_; }
  cublasLtMatmulDesc_t desc() const { return desc_.get(); }
  cublasLtMatrixLayout_t x() const { return x_.get(); }
  cublasLtMatrixLayout_t y() const { return y_.get(); }
  cublasLtMatrixLayout_t c() const { return c_.get(); }

 private:
  static Layout make_layout(cudaDataType t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                            int64_t batch_stride) {
    cublasLtMatrixLayout_t l = nullptr;
    XRT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(rows),
                                                static_cast<uint64_t>(cols), ld));
    Layout owned(l);
    if (batch > 1) {
      set_attr(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
      set_attr(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, batch_stride);
    }
    return owned;
  }

  std::mutex mu_;
  MatmulDesc desc_;
  Layout x_, y_, c_;
  std::map<HeuristicKey, std::vector<cublasLtMatmulHeuristicResult_t>> heuristics_;
  std::map<std::string, CheckedAlgo> checked_;
};

std::shared_ptr<Plan> plan_for(const GemmProblem& p, const ColMajorGemm& g, int device) {
  static std::mutex mu;
  static auto* plans = new std::map<PlanKey, std::shared_ptr<Plan>>();  // never destroyed
  const PlanKey key{device, p.dtype, p.dtype == DType::kFloat32 && p.allow_tf32, p.batch, g.m, g.n,
                    g.k, g.x.transpose, g.y.transpose, g.x.ld, g.y.ld, g.ldc,
                    p.batch > 1 ? g.x.batch_stride : 0, p.batch > 1 ? g.y.batch_stride : 0,
                    p.batch > 1 ? g.c_batch_stride : 0, p.activation, p.bias != nullptr,
                    p.a_row_sums != nullptr};
  std::lock_guard lock(mu);
  auto it = plans->find(key);
  if (it != plans->end()) return it->second;
  // Dynamic shapes could grow the cache without bound; plans in use stay alive
  // through their shared_ptr when it is cleared.
  if (plans->size() >= 4096) plans->clear();
  auto plan = std::make_shared<Plan>(p, g);
  plans->emplace(key, plan);
  return plan;
}

std::string problem_str(const GemmProblem& p) {
  return std::string(dtype_name(p.dtype)) + " batch " + std::to_string(p.batch) + " M=" +
         std::to_string(p.m) + " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k) +
         (p.bias ? " +bias" : "") + (p.a_row_sums ? " +row sums of A" : "") + " act=" + std::string(activation_name(p.activation));
}

}  // namespace

GemmRejection cublaslt_rejection(const GemmProblem& p) {
  using K = GemmRejection::Kind;
  if (p.dtype != DType::kFloat32 && p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16) {
    return {K::kDtype, "cublasLt runs float32, float16 and bfloat16, not " +
                           std::string(dtype_name(p.dtype))};
  }
  auto g = to_col_major(p);
  if (!g) return {K::kLayout, "an operand has no unit stride; cuBLASLt needs one per matrix"};
  if (p.bias != nullptr && !g->swapped) {
    return {K::kLayout, "a bias needs a row-major output (the epilogue adds one vector element "
                        "per row of the column-major result)"};
  }
  if (p.k == 0 && p.m > 0 && p.n > 0) {
    return {K::kShape, "k == 0 (an empty reduction) is not supported by cuBLASLt"};
  }
  if (p.a_row_sums != nullptr) {
    if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16) {
      return {K::kDtype, "the fused row sums of A (BGRAD epilogue) run float16 and bfloat16"};
    }
    if (p.bias != nullptr || p.activation != Activation::kNone || p.batch != 1) {
      return {K::kEpilogue, "the fused row sums of A combine with no bias, activation or batch"};
    }
  }
  if (p.batch > INT32_MAX) return {K::kShape, "batch exceeds 2^31-1"};
  return {};
}

std::vector<std::string> cublaslt_heuristic_algorithms(const GemmProblem& p, int device,
                                                      std::size_t workspace_limit, int max_count) {
  const GemmRejection why = cublaslt_rejection(p);
  XRT_CHECK(!why, InvalidArgumentError, "cublasLt matmul: ", why.detail);
  std::vector<std::string> ids;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return ids;
  const ColMajorGemm g = *to_col_major(p);
  cuda::DeviceGuard guard(device);
  cublasLtHandle_t h = lt_handle(device);
  auto plan = plan_for(p, g, device);
  std::lock_guard lock(plan->mu());
  const auto& hs = plan->heuristics(h, {workspace_limit, kMaxAlignment, kMaxAlignment, kMaxAlignment});
  XRT_CHECK(!hs.empty(), UnsupportedOperationError, "cublasLt: the heuristic offers no algorithm for ",
            problem_str(p), " within a ", workspace_limit, "-byte workspace");
  for (const auto& r : hs) {
    if (static_cast<int>(ids.size()) >= max_count) break;
    ids.push_back(cublaslt_algorithm_id(&r.algo));
  }
  return ids;
}

std::size_t cublaslt_workspace_need(const GemmProblem& p, int device, std::size_t workspace_limit,
                                    const std::string& algorithm) {
  if (cublaslt_rejection(p) || p.m == 0 || p.n == 0 || p.batch == 0) return 0;
  const ColMajorGemm g = *to_col_major(p);
  cuda::DeviceGuard guard(device);
  cublasLtHandle_t h = lt_handle(device);
  auto plan = plan_for(p, g, device);
  std::lock_guard lock(plan->mu());
  if (!algorithm.empty()) return plan->checked(h, algorithm).workspace;
  // The operands' alignment is known only at run time (the arena's offsets are 64-byte
  // aligned, a caller's views less): the most the top choice needs under any of them.
  std::size_t need = 0;
  for (const uint32_t a : {16u, 64u, kMaxAlignment}) {
    const auto& hs = plan->heuristics(h, {workspace_limit, a, a, a});
    if (!hs.empty()) need = std::max(need, hs.front().workspaceSize);
  }
  return need;
}

void cublaslt_gemm(const GemmProblem& p, void* stream, int device, void* workspace,
                   std::size_t workspace_bytes, const std::string& algorithm, double alpha_in,
                   double beta_in) {
  const GemmRejection why = cublaslt_rejection(p);
  XRT_CHECK(!why, InvalidArgumentError, "cublasLt matmul: ", why.detail);
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  if (workspace == nullptr) workspace_bytes = 0;
  const ColMajorGemm g = *to_col_major(p);
  cuda::DeviceGuard guard(device);
  cublasLtHandle_t h = lt_handle(device);
  auto plan = plan_for(p, g, device);
  const void* c_in = p.c_in != nullptr ? p.c_in : p.c;  // C ≠ D: a residual, same layout
  const uint32_t ax = alignment_of(g.x.data), ay = alignment_of(g.y.data),
                 ac = std::min(alignment_of(p.c), alignment_of(c_in));
  std::lock_guard lock(plan->mu());
  const cublasLtMatmulAlgo_t* algo = nullptr;
  if (algorithm.empty()) {
    const auto& hs = plan->heuristics(h, {workspace_bytes, ax, ay, ac});
    XRT_CHECK(!hs.empty(), UnsupportedOperationError, "cublasLt: the heuristic offers no algorithm for ",
              problem_str(p), " within a ", workspace_bytes, "-byte workspace");
    algo = &hs.front().algo;
  } else {
    const CheckedAlgo& ca = plan->checked(h, algorithm);
    XRT_CHECK(ca.workspace <= workspace_bytes, UnsupportedOperationError, "cublasLt: algorithm ",
              cublaslt_describe_algorithm(algorithm), " needs a ", ca.workspace,
              "-byte workspace but ", workspace_bytes, " bytes are allowed (ExecutionPolicy "
              "workspace_limit_bytes); raise the limit or re-tune under it");
    XRT_CHECK(ax >= ca.min_alignment[0] && ay >= ca.min_alignment[1] && ac >= ca.min_alignment[2],
              UnsupportedOperationError, "cublasLt: algorithm ", cublaslt_describe_algorithm(algorithm),
              " needs operands aligned to ", ca.min_alignment[0], "/", ca.min_alignment[1], "/",
              ca.min_alignment[2], " bytes, these are aligned to ", ax, "/", ay, "/", ac,
              " (a view with an offset?); make the operands contiguous copies");
    algo = &ca.algo;
  }
  if (p.bias != nullptr) set_attr(plan->desc(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  // BGRAD epilogues write the reduction through the bias pointer.
  if (p.a_row_sums != nullptr) {
    set_attr(plan->desc(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(p.a_row_sums));
  }
  // fp32 scale factors for every dtype but float64 (the compute type is fp32).
  const float alpha_f = static_cast<float>(alpha_in), beta_f = static_cast<float>(beta_in);
  const double alpha_d = alpha_in, beta_d = beta_in;
  const bool f64 = p.dtype == DType::kFloat64;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  XRT_CUBLAS_CHECK(cublasLtMatmul(h, plan->desc(), alpha, g.x.data, plan->x(), g.y.data, plan->y(),
                                  beta, c_in, plan->c(), p.c, plan->c(), algo, workspace,
                                  workspace_bytes, static_cast<cudaStream_t>(stream)));
}

std::string cublaslt_algorithm_id(const void* algo) {
  uint64_t words[8];
  std::memcpy(words, algo, sizeof(words));
  std::string id = kIdPrefix;
  char buf[17];
  for (uint64_t w : words) {
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(w));
    id += buf;
  }
  return id;
}

void cublaslt_parse_algorithm_id(const std::string& id, void* algo) {
  const std::size_t prefix = std::strlen(kIdPrefix);
  XRT_CHECK(id.size() == prefix + 128 && id.compare(0, prefix, kIdPrefix) == 0, InvalidArgumentError,
            "cublasLt: malformed algorithm id '", id, "': expected '", kIdPrefix,
            "' followed by 128 hex digits (as written by tuning / export_pins)");
  uint64_t words[8];
  for (int i = 0; i < 8; ++i) {
    uint64_t w = 0;
    for (int j = 0; j < 16; ++j) {
      const char ch = id[prefix + i * 16 + j];
      int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
      XRT_CHECK(v >= 0, InvalidArgumentError, "cublasLt: malformed algorithm id '", id,
                "': '", ch, "' is no hex digit");
      w = (w << 4) | static_cast<uint64_t>(v);
    }
    words[i] = w;
  }
  std::memcpy(algo, words, sizeof(words));
}

std::string cublaslt_describe_algorithm(const std::string& id) {
  cublasLtMatmulAlgo_t algo;
  try {
    cublaslt_parse_algorithm_id(id, &algo);
  } catch (const InvalidArgumentError&) {
    return "'" + id + "' (malformed)";
  }
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t a) -> long long {
    uint32_t v32 = 0;
    std::size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, a, &v32, sizeof(v32), &written) !=
        CUBLAS_STATUS_SUCCESS) {
      return -1;
    }
    return v32;
  };
  int32_t algo_id = 0;
  std::size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof(algo_id),
                                       &written);
  return "id=" + std::to_string(algo_id) + " tile=" + std::to_string(get(CUBLASLT_ALGO_CONFIG_TILE_ID)) +
         " stages=" + std::to_string(get(CUBLASLT_ALGO_CONFIG_STAGES_ID)) +
         " splitK=" + std::to_string(get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM)) +
         " reduction=" + std::to_string(get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)) +
         " swizzle=" + std::to_string(get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING)) +
         " custom=" + std::to_string(get(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
}

std::string cublaslt_version() { return "cuBLASLt " + std::to_string(cublasLtGetVersion()); }

}  // namespace xpuruntime::matmul
