// Tuning harness for the skinny GEMM (benchmarks/skinny_sweep/run_sweep.sh builds it
// once per configuration; not part of the build): the kernel compiled with the
// XRT_SKINNY_* macros given on the command line, timed against cuBLAS in one process.
// GPU time per call from a CUDA graph of 20 calls; "hot" = the same B every call
// (L2-resident when it fits), "cold" = 8 B copies rotated (beyond L2).
#include "backends/cuda/kernels/blas/skinny_gemm.cu"
#include "harness.cuh"

#include <cublas_v2.h>

#include <cmath>
#include <cstdio>
#include <vector>

using namespace xpuruntime;

__global__ void empty_kernel(int* p) { if (p != nullptr && threadIdx.x == 1234) *p = 0; }

int main(int argc, char** argv) {
  const char* tag = argc > 1 ? argv[1] : "default";
  const bool with_cublas = argc > 2;
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t h; CK(cublasCreate(&h)); CK(cublasSetStream(h, s));
  if (with_cublas) {
    auto plain = [&](int) { empty_kernel<<<256, 128, 0, s>>>(nullptr); };
    auto clustered = [&](int) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(256); cfg.blockDim = dim3(128); cfg.stream = s;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = 8; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr; cfg.numAttrs = 1;
      CK(cudaLaunchKernelEx(&cfg, empty_kernel, (int*)nullptr));
    };
    std::printf("empty kernel 256x128: %.2f us per call in a graph; with clusters of 8: %.2f us\n",
                graph_us(s, plain), graph_us(s, clustered));
  }
  struct Shape { int m, n, k; };
  const Shape shapes[] = {{16, 4096, 4096}, {1, 4096, 4096}, {16, 11008, 4096}, {16, 4096, 11008}, {8, 768, 768}};
  for (const Shape sh : shapes) {
    const size_t nb = (size_t)sh.k * sh.n;
    __half *A, *B, *C, *R;
    CK(cudaMalloc(&A, (size_t)sh.m * sh.k * 2)); CK(cudaMalloc(&B, nb * 2 * 8));
    CK(cudaMalloc(&C, (size_t)sh.m * sh.n * 2)); CK(cudaMalloc(&R, (size_t)sh.m * sh.n * 2));
    fill<<<1024, 256, 0, s>>>(A, (size_t)sh.m * sh.k, 1); fill<<<4096, 256, 0, s>>>(B, nb * 8, 2);
    for (int kmajor = 0; kmajor < 2; ++kmajor) {
      auto problem = [&](int copy) {
        matmul::GemmProblem p;
        p.dtype = DType::kFloat16; p.m = sh.m; p.n = sh.n; p.k = sh.k;
        p.a = {A, sh.k, 1, 0};
        p.b = kmajor ? matmul::MatrixRef{B + copy * nb, 1, sh.k, 0} : matmul::MatrixRef{B + copy * nb, sh.n, 1, 0};
        p.c = C; p.c_rs = sh.n; p.c_cs = 1;
        return p;
      };
      // cuBLAS, column-major view: C^T (n x m) = op(B^T) (n x k) * A^T (k x m)
      auto cublas = [&](int copy) {
        const float one = 1.f, zero = 0.f;
        const __half* b = B + copy * nb;
        CK(cublasGemmEx(h, kmajor ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, sh.n, sh.m, sh.k, &one, b, CUDA_R_16F,
                        kmajor ? sh.k : sh.n, A, CUDA_R_16F, sh.k, &zero, R, CUDA_R_16F, sh.n, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
      };
      matmul::skinny_gemm(problem(0), s, 0);
      cublas(0);
      CK(cudaStreamSynchronize(s));
      std::vector<__half> c((size_t)sh.m * sh.n), r(c.size());
      CK(cudaMemcpy(c.data(), C, c.size() * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(r.data(), R, r.size() * 2, cudaMemcpyDeviceToHost));
      double err = 0, mag = 0;
      for (size_t i = 0; i < c.size(); ++i) {
        err = std::max(err, std::fabs((double)__half2float(c[i]) - __half2float(r[i])));
        mag = std::max(mag, std::fabs((double)__half2float(r[i])));
      }
      const float hot = graph_us(s, [&](int) { matmul::skinny_gemm(problem(0), s, 0); });
      const float cold = graph_us(s, [&](int i) { matmul::skinny_gemm(problem(i % 8), s, 0); });
      float bhot = 0, bcold = 0;
      if (with_cublas) {
        bhot = graph_us(s, [&](int) { cublas(0); });
        bcold = graph_us(s, [&](int i) { cublas(i % 8); });
      }
      const double gb = nb * 2 / 1e9;
      std::printf("%-34s %5dx%5dx%5d %s splits=%d  hot %7.2f us (%5.0f GB/s)  cold %7.2f us (%5.0f GB/s)  "
                  "cublas hot %7.2f cold %7.2f  relerr %.2e\n",
                  tag, sh.m, sh.n, sh.k, kmajor ? "Kmaj" : "Nmaj", matmul::skinny_splits(problem(0), sms), hot,
                  gb / hot * 1e6, cold, gb / cold * 1e6, bhot, bcold, err / mag);
    }
    cudaFree(A); cudaFree(B); cudaFree(C); cudaFree(R);
  }
  return 0;
}
