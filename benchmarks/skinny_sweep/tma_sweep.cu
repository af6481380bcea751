// Tuning harness for the TMA skinny GEMM experiment (skinny_tma_experiment.cuh; not
// part of the build): ring depths and grid sizes next to cuBLAS's default and the
// shipped cp.async kernel, in one process. GPU time per call from a CUDA graph of 20
// calls, median of 15 replays; "hot" = the same B every call, "cold" = 8 copies of
// B rotated. relerr against cuBLAS; outputs are poisoned before each checked run.
// Build and run: benchmarks/skinny_sweep/run_tma_sweep.sh
#include "backends/cuda/kernels/blas/skinny_gemm.cu"
#include "harness.cuh"
#include "skinny_tma_experiment.cuh"

#include <cublas_v2.h>

#include <cmath>
#include <functional>
#include <iterator>
#include <string>

using namespace xpuruntime;
namespace st = xpuruntime::matmul::skinny_tma;

// Smallest power-of-two split (cluster size, up to 8) giving every SM `cps` CTAs,
// keeping at least two stages per split.
int splits_for(int n, int k, int sms, int cps) {
  const int tiles = (n + st::kBlockN - 1) / st::kBlockN;
  int s = 1;
  while (s < 8 && tiles * s < sms * cps && (k + 2 * s - 1) / (2 * s) >= 2 * st::kBlockK) s *= 2;
  return s;
}

struct Variant {
  std::string name;
  std::function<cudaError_t(const CUtensorMap&, const st::Args&, bool, int)> run;  // (map, args, kmajor, splits)
  int cps;
  int forced_splits = 0;  // 0: splits_for(cps)
};

template <int kStages>
Variant make(const char* name, int cps, cudaStream_t s, int forced_splits = 0) {
  return {name,
          [s](const CUtensorMap& m, const st::Args& a, bool kmajor, int splits) {
            return kmajor ? st::launch<__half, true, kStages>(m, a, splits, s)
                          : st::launch<__half, false, kStages>(m, a, splits, s);
          },
          cps, forced_splits};
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasSetStream(h, s));
  const std::vector<Variant> variants = {make<4>("tma_s4", 1, s), make<6>("tma_s6", 1, s), make<8>("tma_s8", 1, s),
                                         make<4>("tma_s4_c2", 2, s), make<6>("tma_s6_c2", 2, s),
                                         make<8>("tma_s8_x4", 1, s, 4),  make<10>("tma_s10_x4", 1, s, 4),
                                         make<8>("tma_s8_x2", 1, s, 2)};
  struct Shape {
    int m, n, k;
  };
  const Shape shapes[] = {{16, 4096, 4096}, {1, 4096, 4096}, {16, 11008, 4096}, {16, 4096, 11008}, {8, 768, 768},
                          {16, 3072, 768},  {13, 4096, 4096}, {16, 4100, 4104}};
  const char* only = std::getenv("XRT_SWEEP_SHAPES");
  const int n_shapes = only ? std::atoi(only) : static_cast<int>(std::size(shapes));
  std::printf("%-14s %-18s %5s %6s  %8s %8s  %6s\n", "variant", "shape", "B", "splits", "hot_us", "cold_us", "relerr");
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
      const int ldb = kmajor ? sh.k : sh.n;
      auto cublas = [&](int copy) { cublas_hgemm(h, kmajor, sh.m, sh.n, sh.k, A, B + copy * nb, R); };
      cublas(0);
      CK(cudaStreamSynchronize(s));
      std::vector<__half> r((size_t)sh.m * sh.n);
      CK(cudaMemcpy(r.data(), R, r.size() * 2, cudaMemcpyDeviceToHost));
      auto check = [&]() { return rel_err(C, r); };
      std::printf("%-14s %-18s %5s %6s  %8.2f %8.2f\n", "cublas", shape, lay, "-",
                  graph_us(s, [&](int) { cublas(0); }), graph_us(s, [&](int i) { cublas(i % 8); }));
      auto problem = [&](int copy) {
        matmul::GemmProblem p;
        p.dtype = DType::kFloat16;
        p.m = sh.m, p.n = sh.n, p.k = sh.k;
        p.a = {A, sh.k, 1, 0};
        p.b = kmajor ? matmul::MatrixRef{B + copy * nb, 1, sh.k, 0} : matmul::MatrixRef{B + copy * nb, sh.n, 1, 0};
        p.c = C, p.c_rs = sh.n, p.c_cs = 1;
        return p;
      };
      CK(cudaMemset(C, 0xff, r.size() * 2));
      matmul::skinny_gemm(problem(0), s, 0);
      CK(cudaStreamSynchronize(s));
      const double e_old = check();
      std::printf("%-14s %-18s %5s %6d  %8.2f %8.2f  %.1e\n", "cp.async", shape, lay,
                  matmul::skinny_splits(problem(0), sms),
                  graph_us(s, [&](int) { matmul::skinny_gemm(problem(0), s, 0); }),
                  graph_us(s, [&](int i) { matmul::skinny_gemm(problem(i % 8), s, 0); }), e_old);
      std::vector<CUtensorMap> maps(8);
      bool maps_ok = true;
      for (int i = 0; i < 8; ++i) maps_ok &= st::make_map(&maps[i], B + i * nb, sh.n, sh.k, ldb, kmajor);
      if (!maps_ok) {
        std::printf("tensor map encoding failed for %s %s\n", shape, lay);
        continue;
      }
      st::Args args{};
      args.a = reinterpret_cast<const uint16_t*>(A);
      args.a_rs = sh.k;
      args.c = reinterpret_cast<uint16_t*>(C);
      args.c_rs = sh.n, args.c_cs = 1;
      args.m = sh.m, args.n = sh.n, args.k = sh.k;
      for (const Variant& v : variants) {
        const int splits = v.forced_splits ? v.forced_splits : splits_for(sh.n, sh.k, sms, v.cps);
        CK(cudaMemset(C, 0xff, r.size() * 2));
        const cudaError_t le = v.run(maps[0], args, kmajor, splits);
        if (le != cudaSuccess) {
          std::printf("%-14s %-18s %5s launch failed: %s\n", v.name.c_str(), shape, lay, cudaGetErrorString(le));
          cudaGetLastError();
          continue;
        }
        CK(cudaStreamSynchronize(s));
        const double e = check();
        const float hot = graph_us(s, [&](int) { CK(v.run(maps[0], args, kmajor, splits)); });
        const float cold = graph_us(s, [&](int i) { CK(v.run(maps[i % 8], args, kmajor, splits)); });
        std::printf("%-14s %-18s %5s %6d  %8.2f %8.2f  %.1e%s\n", v.name.c_str(), shape, lay, splits, hot, cold, e,
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
