// cuBLAS GEMM (see cublas_gemm_impl.h).
//
// Handles: cuBLAS handles carry a stream, a workspace and a math mode, so one
// handle must not serve two threads at once. Each device keeps a pool; a call
// leases one, sets all three, runs, and returns it. Handles are never destroyed:
// destroying them from static destructors races with the CUDA context's own
// teardown at exit, and a process needs only as many as it has concurrent callers.
#include "backends/cuda/kernels/blas/cublas_gemm_impl.h"

#include <cublas_v2.h>

#include <memory>
#include <mutex>
#include <vector>

#include "backends/cuda/kernels/blas/cublas_common.h"
#include "backends/cuda/cuda_check.h"

namespace xpuruntime::matmul {
namespace {

class HandlePool {
 public:
  static HandlePool& of(int device) {
    static std::mutex mu;
    static auto* pools = new std::vector<std::unique_ptr<HandlePool>>();  // leaked: see above
    std::lock_guard lock(mu);
    if (device >= static_cast<int>(pools->size())) pools->resize(device + 1);
    auto& p = (*pools)[device];
    if (!p) p = std::make_unique<HandlePool>();
    return *p;
  }
  cublasHandle_t acquire() {
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        cublasHandle_t h = free_.back();
        free_.pop_back();
        return h;
      }
    }
    cublasHandle_t h = nullptr;
    XRT_CUBLAS_CHECK(cublasCreate(&h));  // on the current device (the caller's guard)
    return h;
  }
  void release(cublasHandle_t h) {
    std::lock_guard lock(mu_);
    free_.push_back(h);
  }

 private:
  std::mutex mu_;
  std::vector<cublasHandle_t> free_;
};

class HandleLease {
 public:
  explicit HandleLease(int device) : pool_(HandlePool::of(device)), h_(pool_.acquire()) {}
  ~HandleLease() { pool_.release(h_); }
  HandleLease(const HandleLease&) = delete;
  HandleLease& operator=(const HandleLease&) = delete;
  cublasHandle_t get() const { return h_; }

 private:
  HandlePool& pool_;
  cublasHandle_t h_;
};

cublasOperation_t op_of(const ColMajorOperand& o) { return o.transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

GemmRejection cublas_rejection(const GemmProblem& p) {
  using K = GemmRejection::Kind;
  if (p.dtype != DType::kFloat32 && p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16 &&
      p.dtype != DType::kFloat64) {
    return {K::kDtype, "cublas runs float32, float16, bfloat16 and float64, not " +
                           std::string(dtype_name(p.dtype))};
  }
  if (p.c_in != nullptr) {
    return {K::kEpilogue, "cublas reads C in place only; a residual from another tensor runs on "
                          "cublasLt"};
  }
  if (p.bias != nullptr || p.activation != Activation::kNone) {
    return {K::kEpilogue, "cublasGemmEx has no epilogue (bias/activation); cublasLt fuses them"};
  }
  if (!to_col_major(p)) return {K::kLayout, "an operand has no unit stride; cuBLAS needs one per matrix"};
  return row_sums_rejection(p, "cublas");
}

void cublas_gemm(const GemmProblem& p, void* stream, int device, void* workspace,
                 std::size_t workspace_bytes, double alpha_in, double beta_in) {
  const GemmRejection why = cublas_rejection(p);
  XRT_CHECK(!why, InvalidArgumentError, "cublas matmul: ", why.detail);
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  const ColMajorGemm g = *to_col_major(p);
  cuda::DeviceGuard guard(device);
  HandleLease lease(device);
  cublasHandle_t h = lease.get();
  // cublasSetStream also resets the handle to its own default workspace pool, so a
  // pooled handle never keeps a workspace freed after an earlier call.
  XRT_CUBLAS_CHECK(cublasSetStream(h, static_cast<cudaStream_t>(stream)));
  if (workspace != nullptr) {
    XRT_CHECK(workspace_bytes >= kCublasMinWorkspace, InvalidArgumentError, "cublas matmul: a ",
              workspace_bytes, "-byte workspace is below the ", kCublasMinWorkspace,
              " bytes cuBLAS needs to run every routine");
    XRT_CUBLAS_CHECK(cublasSetWorkspace(h, workspace, workspace_bytes));
  }
  const bool tf32 = p.dtype == DType::kFloat32 && p.allow_tf32;
  XRT_CUBLAS_CHECK(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  const cudaDataType t = cuda_data_type(p.dtype);
  const cublasComputeType_t compute = p.dtype == DType::kFloat64 ? CUBLAS_COMPUTE_64F
                                      : tf32                     ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                 : CUBLAS_COMPUTE_32F;
  // fp32 scale factors for every dtype but float64 (the compute type is fp32).
  const float alpha_f = static_cast<float>(alpha_in), beta_f = static_cast<float>(beta_in);
  const double alpha_d = alpha_in, beta_d = beta_in;
  const void* alpha = p.dtype == DType::kFloat64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = p.dtype == DType::kFloat64 ? static_cast<const void*>(&beta_d) : &beta_f;
  if (p.batch == 1) {
    XRT_CUBLAS_CHECK(cublasGemmEx_64(h, op_of(g.x), op_of(g.y), g.m, g.n, g.k, alpha, g.x.data, t,
                                     g.x.ld, g.y.data, t, g.y.ld, beta, p.c, t, g.ldc, compute,
                                     CUBLAS_GEMM_DEFAULT));
  } else {
    XRT_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
        h, op_of(g.x), op_of(g.y), g.m, g.n, g.k, alpha, g.x.data, t, g.x.ld, g.x.batch_stride,
        g.y.data, t, g.y.ld, g.y.batch_stride, beta, p.c, t, g.ldc, g.c_batch_stride, p.batch,
        compute, CUBLAS_GEMM_DEFAULT));
  }
}

std::string cublas_version() {
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  return "cuBLAS " + std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(patch);
}

}  // namespace xpuruntime::matmul
