// Tuning harness for the register-streaming skinny GEMM experiment
// (skinny_stream_experiment.cuh; not part of the build): several tile
// configurations next to cuBLAS's default and the shipped cp.async kernel, in one
// process. GPU time per call from a CUDA graph of 20 calls,
// median of 15 replays; "hot" = the same B every call (L2-resident when it fits),
// "cold" = 8 copies of B rotated (streamed from HBM). relerr against cuBLAS.
// Build and run: benchmarks/skinny_sweep/run_stream_sweep.sh
#include "backends/cuda/kernels/blas/skinny_gemm.cu"
#include "harness.cuh"
#include "skinny_stream_experiment.cuh"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

using namespace xpuruntime;
namespace ss = xpuruntime::matmul::skinny_stream;

struct Variant {
  std::string name;
  // (args, batch, stream, kmajor, sms) -> launches
  std::function<void(const ss::Args&, bool, int, cudaStream_t)> run;
};

template <bool kK, int kWN, int kWK, int kU>
void run_cfg(const ss::Args& a, int sms, int cps, cudaStream_t s) {
  using Cfg = ss::Config<kK, kWN, kWK, kU>;
  const int splits = ss::choose_splits(ss::cdiv(a.n, Cfg::kBlockN), a.k, sms, cps);
  CK((ss::launch<__half, kK, kWN, kWK, kU>(a, splits, 1, s, 0)));
}

// One configuration for both layouts: N-major takes kUN steps per buffer, K-major kUK.
template <int kWN, int kWK, int kUN, int kUK>
Variant make(const char* name, int cps) {
  return {name, [cps](const ss::Args& a, bool kmajor, int sms, cudaStream_t s) {
            if (kmajor) {
              run_cfg<true, kWN, kWK, kUK>(a, sms, cps, s);
            } else {
              run_cfg<false, kWN, kWK, kUN>(a, sms, cps, s);
            }
          }};
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasSetStream(h, s));
  std::vector<Variant> variants = {
      make<4, 2, 4, 2>("wn4wk2_u4", 1),   make<4, 2, 8, 4>("wn4wk2_u8", 1),
      make<2, 4, 4, 2>("wn2wk4_u4", 1),   make<8, 1, 4, 2>("wn8wk1_u4", 1),
      make<4, 2, 4, 2>("wn4wk2_u4_c2", 2), make<2, 2, 4, 2>("wn2wk2_u4_c2", 2),
      make<4, 1, 8, 4>("wn4wk1_u8_c2", 2), make<2, 4, 8, 4>("wn2wk4_u8", 1),
  };
  struct Shape {
    int m, n, k;
  };
  const Shape shapes[] = {{16, 4096, 4096}, {1, 4096, 4096}, {16, 11008, 4096}, {16, 4096, 11008}, {8, 768, 768},
                          {16, 3072, 768},  {13, 4096, 4096}};
  std::printf("%-14s %-18s %5s  %8s %8s  %6s\n", "variant", "shape", "B", "hot_us", "cold_us", "relerr");
  const char* only = std::getenv("XRT_SWEEP_SHAPES");  // run only the first N shapes
  const int n_shapes = only ? std::atoi(only) : static_cast<int>(std::size(shapes));
  for (int si = 0; si < n_shapes; ++si) {
    const Shape sh = shapes[si];
    const size_t nb = (size_t)sh.k * sh.n;
    __half *A, *B, *C, *R;
    CK(cudaMalloc(&A, (size_t)sh.m * sh.k * 2));
    CK(cudaMalloc(&B, nb * 2 * 8));
    CK(cudaMalloc(&C, (size_t)sh.m * sh.n * 2));
    CK(cudaMalloc(&R, (size_t)sh.m * sh.n * 2));
    fill<<<1024, 256, 0, s>>>(A, (size_t)sh.m * sh.k, 1);
    fill<<<4096, 256, 0, s>>>(B, nb * 8, 2);
    for (int kmajor = 0; kmajor < 2; ++kmajor) {
      char shape[64];
      std::snprintf(shape, sizeof shape, "%dx%dx%d", sh.m, sh.n, sh.k);
      const char* lay = kmajor ? "Kmaj" : "Nmaj";
      auto cublas = [&](int copy) { cublas_hgemm(h, kmajor, sh.m, sh.n, sh.k, A, B + copy * nb, R); };
      cublas(0);
      CK(cudaStreamSynchronize(s));
      std::vector<__half> r((size_t)sh.m * sh.n);
      CK(cudaMemcpy(r.data(), R, r.size() * 2, cudaMemcpyDeviceToHost));
      auto check = [&]() { return rel_err(C, r); };
      std::printf("%-14s %-18s %5s  %8.2f %8.2f\n", "cublas", shape, lay, graph_us(s, [&](int) { cublas(0); }),
                  graph_us(s, [&](int i) { cublas(i % 8); }));
      auto problem = [&](int copy) {
        matmul::GemmProblem p;
        p.dtype = DType::kFloat16;
        p.m = sh.m;
        p.n = sh.n;
        p.k = sh.k;
        p.a = {A, sh.k, 1, 0};
        p.b = kmajor ? matmul::MatrixRef{B + copy * nb, 1, sh.k, 0} : matmul::MatrixRef{B + copy * nb, sh.n, 1, 0};
        p.c = C;
        p.c_rs = sh.n;
        p.c_cs = 1;
        return p;
      };
      CK(cudaMemset(C, 0xff, r.size() * 2));
      matmul::skinny_gemm(problem(0), s, 0);
      CK(cudaStreamSynchronize(s));
      const double e_old = check();
      std::printf("%-14s %-18s %5s  %8.2f %8.2f  %.1e\n", "cp.async", shape, lay,
                  graph_us(s, [&](int) { matmul::skinny_gemm(problem(0), s, 0); }),
                  graph_us(s, [&](int i) { matmul::skinny_gemm(problem(i % 8), s, 0); }), e_old);
      for (const Variant& v : variants) {
        auto args = [&](int copy) {
          ss::Args a{};
          a.a = reinterpret_cast<const uint16_t*>(A);
          a.a_rs = sh.k, a.a_cs = 1, a.a_bs = 0;
          a.b = reinterpret_cast<const uint16_t*>(B + copy * nb);
          a.ldb = kmajor ? sh.k : sh.n;
          a.b_bs = 0;
          a.c = reinterpret_cast<uint16_t*>(C);
          a.c_rs = sh.n, a.c_cs = 1, a.c_bs = 0;
          a.bias = nullptr;
          a.m = sh.m, a.n = sh.n, a.k = sh.k;
          a.activation = 0;
          a.a_vector = 1;
          return a;
        };
        CK(cudaMemset(C, 0xff, r.size() * 2));
        v.run(args(0), kmajor, sms, s);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        const double e = check();
        const float hot = graph_us(s, [&](int) { v.run(args(0), kmajor, sms, s); });
        const float cold = graph_us(s, [&](int i) { v.run(args(i % 8), kmajor, sms, s); });
        std::printf("%-14s %-18s %5s  %8.2f %8.2f  %.1e%s\n", v.name.c_str(), shape, lay, hot, cold, e,
                    e < 2e-3 ? "" : "  WRONG");
      }
    }
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    cudaFree(R);
  }
  return 0;
}
