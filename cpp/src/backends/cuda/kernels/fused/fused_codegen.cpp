#include "backends/cuda/kernels/fused/fused_codegen.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "xpuruntime/error.h"

namespace xpuruntime::cuda_ops {
namespace {

// The device functions the instructions call: the same formulas as the unary
// kernels (elementwise/unary.cu), in fp32.
constexpr const char* kPrelude = R"(
struct FusedArgs {
  const void* in[16];
  void* out;
  long long numel;
  int rank;
  int all_dense;
  long long dims[8];
  long long strides[16][8];
};
__device__ __forceinline__ float xrt_clampf(float v, float lo, float hi) {
  const float a = v < lo ? lo : v;  // min(max(v, lo), hi): hi wins when lo > hi (numpy)
  return a > hi ? hi : a;           // NaN passes through
}
__device__ __forceinline__ float xrt_pow(float a, float b) {
  if (b == 2.0f) return a * a;
  if (b == 3.0f) return a * a * a;
  if (b == 0.5f) return sqrtf(a);
  return powf(a, b);
}
__device__ __forceinline__ float xrt_min(float a, float b) {
  return (a != a || b != b) ? a + b : (b < a ? b : a);
}
__device__ __forceinline__ float xrt_max(float a, float b) {
  return (a != a || b != b) ? a + b : (b > a ? b : a);
}
)";

// Loads that widen an element to fp32 and a store that rounds once, per dtype. No
// header: NVRTC compiles these without cuda_fp16.h (the PTX conversions directly).
constexpr const char* kFloatIo = R"(
typedef float xrt_t;
__device__ __forceinline__ float xrt_ld(const float* p) { return *p; }
__device__ __forceinline__ float xrt_st(float v) { return v; }
)";
constexpr const char* kHalfIo = R"(
typedef unsigned short xrt_t;
__device__ __forceinline__ float xrt_ld(const unsigned short* p) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(*p));
  return f;
}
__device__ __forceinline__ unsigned short xrt_st(float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
)";
constexpr const char* kBFloat16Io = R"(
typedef unsigned short xrt_t;
__device__ __forceinline__ float xrt_ld(const unsigned short* p) {
  return __uint_as_float(((unsigned int)*p) << 16);
}
__device__ __forceinline__ unsigned short xrt_st(float v) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
)";

// The vector kernel's argument (FusedVecArgs in fused_codegen.h) and its V-wide
// element group, aligned so that a group is one 4-, 8- or 16-byte access.
constexpr const char* kVectorPrelude = R"(
struct FusedVecArgs {
  const void* in[16];
  void* out;
  unsigned int nvec;
  int rank;
  unsigned int dense_mask;
  unsigned int div[8];
  unsigned int mul[8];
  unsigned int shr[8];
  unsigned int strides[16][8];
};
template <int V>
struct alignas(V * sizeof(xrt_t)) xrt_vec {
  xrt_t v[V];
};
template <int V>
__device__ __forceinline__ void xrt_load_vec(const FusedVecArgs& a, int k, unsigned off,
                                             xrt_vec<V>& r) {
  const xrt_t* p = (const xrt_t*)a.in[k] + off;
  if ((a.dense_mask >> k) & 1u) {
    r = *(const xrt_vec<V>*)p;
  } else {
    const xrt_t e = *p;
#pragma unroll
    for (int l = 0; l < V; ++l) r.v[l] = e;
  }
}
)";

// A float literal that round-trips exactly (and spells infinities and NaN).
std::string lit(double v) {
  const float f = static_cast<float>(v);
  if (std::isnan(f)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(f)) return f > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.9gf", f);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s.insert(s.size() - 1, ".0");
  return s;
}

std::string unary_expr(ops::Unary k, const ops::UnaryParams& p, const std::string& x) {
  using U = ops::Unary;
  switch (k) {
    case U::kIdentity:
      return x;
    case U::kNeg:
      return "(-" + x + ")";
    case U::kAbs:
      return "fabsf(" + x + ")";
    case U::kSqrt:
      return "sqrtf(" + x + ")";
    case U::kExp:
      return "expf(" + x + ")";
    case U::kLog:
      return "logf(" + x + ")";
    case U::kErf:
      return "erff(" + x + ")";
    case U::kTanh:
      return "tanhf(" + x + ")";
    case U::kSigmoid:
      return "(1.0f / (1.0f + expf(-" + x + ")))";
    case U::kRelu:
      return "(" + x + " < 0.0f ? 0.0f : " + x + ")";
    case U::kLeakyRelu:
      return "(" + x + " < 0.0f ? " + lit(p.alpha) + " * " + x + " : " + x + ")";
    case U::kHardSigmoid:
      return "xrt_clampf(" + lit(p.alpha) + " * " + x + " + " + lit(p.beta) + ", 0.0f, 1.0f)";
    case U::kHardSwish:
      return "(" + x + " * xrt_clampf(" + x + " / 6.0f + 0.5f, 0.0f, 1.0f))";
    case U::kGelu:
      return "(0.5f * " + x + " * (1.0f + erff(" + x + " * 0.70710678118654752f)))";
    case U::kGeluTanh:
      return "(0.5f * " + x + " * (1.0f + tanhf(0.7978845608028654f * (" + x + " + 0.044715f * " +
             x + " * " + x + " * " + x + "))))";
    case U::kReciprocal:
      return "(1.0f / " + x + ")";
    case U::kClip:
      return "xrt_clampf(" + x + ", " + lit(p.lo) + ", " + lit(p.hi) + ")";
    case U::kFloor:
      return "floorf(" + x + ")";
    case U::kCeil:
      return "ceilf(" + x + ")";
    case U::kRound:
      return "rintf(" + x + ")";
    case U::kSin:
      return "sinf(" + x + ")";
    case U::kCos:
      return "cosf(" + x + ")";
    case U::kSoftplus:
      return "(" + x + " > 20.0f ? " + x + " : log1pf(expf(" + x + ")))";
    case U::kSign:
      return "(" + x + " > 0.0f ? 1.0f : (" + x + " < 0.0f ? -1.0f : " + x + "))";
    case U::kElu:
      return "(" + x + " < 0.0f ? " + lit(p.alpha) + " * expm1f(" + x + ") : " + x + ")";
    case U::kNot:
      break;
  }
  XRT_THROW(UnsupportedOperationError, "fused elementwise (cuda): unary kind ", static_cast<int>(k),
            " has no float form");
}

std::string binary_expr(ops::FusedBin b, const std::string& l, const std::string& r) {
  using B = ops::FusedBin;
  switch (b) {
    case B::kAdd:
      return "(" + l + " + " + r + ")";
    case B::kSub:
      return "(" + l + " - " + r + ")";
    case B::kMul:
      return "(" + l + " * " + r + ")";
    case B::kDiv:
      return "(" + l + " / " + r + ")";
    case B::kPow:
      return "xrt_pow(" + l + ", " + r + ")";
    case B::kMin:
      return "xrt_min(" + l + ", " + r + ")";
    case B::kMax:
      return "xrt_max(" + l + ", " + r + ")";
  }
  XRT_THROW(UnsupportedOperationError, "fused elementwise (cuda): binary code ",
            static_cast<int>(b), " is unknown");
}

// The program's instructions as statements on `acc`; operand(k) spells input k's
// element (a load in the general kernel, a lane of a loaded vector in the vector one).
template <typename Operand>
void emit_program(std::ostringstream& s, const ops::ElementwiseProgram& program, int inputs,
                  const std::string& indent, Operand operand) {
  for (const ops::ElementwiseInstr& in : program.instrs) {
    if (in.kind == ops::ElementwiseInstr::Kind::kUnary) {
      s << indent << "acc = " << unary_expr(in.unary, in.params, "acc") << ";\n";
      continue;
    }
    XRT_CHECK(in.operand >= 0 && in.operand < inputs, InvalidModelError,
              "fused elementwise (cuda): operand ", in.operand, " is not an input (", inputs,
              " inputs)");
    const std::string v = operand(in.operand);
    s << indent << "acc = "
      << (in.kind == ops::ElementwiseInstr::Kind::kBinaryOperandLeft
              ? binary_expr(in.binary, v, "acc")
              : binary_expr(in.binary, "acc", v))
      << ";\n";
  }
}

}  // namespace

bool fused_dtype_supported(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

std::string fused_source(const ops::ElementwiseProgram& program, int inputs, DType dtype) {
  XRT_CHECK(inputs >= 1 && inputs <= kFusedMaxInputs, UnsupportedOperationError,
            "fused elementwise (cuda): ", inputs, " inputs (at most ", kFusedMaxInputs, ")");
  XRT_CHECK(fused_dtype_supported(dtype), UnsupportedOperationError,
            "fused elementwise (cuda): dtype ", dtype_name(dtype),
            " (float32, float16 and bfloat16 are generated)");
  std::ostringstream s;
  s << "// fused (" << dtype_name(dtype) << "): " << program.ops << "\n"
    << kPrelude
    << (dtype == DType::kFloat16    ? kHalfIo
        : dtype == DType::kBFloat16 ? kBFloat16Io
                                    : kFloatIo)
    << kVectorPrelude;
  // The general kernel: any broadcast, 64-bit offsets, one element per thread.
  s << "extern \"C\" __global__ void xrt_fused(FusedArgs a) {\n"
    << "  const long long step = (long long)gridDim.x * blockDim.x;\n"
    << "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.numel; i += "
       "step) {\n"
    << "    long long off[" << inputs << "];\n"
    << "    if (a.all_dense) {\n"
    << "      for (int k = 0; k < " << inputs << "; ++k) off[k] = i;\n"
    << "    } else {\n"
    << "      for (int k = 0; k < " << inputs << "; ++k) off[k] = 0;\n"
    << "      long long r = i;\n"
    << "      for (int d = a.rank - 1; d >= 0; --d) {\n"
    << "        const long long q = r / a.dims[d], c = r - q * a.dims[d];\n"
    << "        for (int k = 0; k < " << inputs << "; ++k) off[k] += c * a.strides[k][d];\n"
    << "        r = q;\n"
    << "      }\n"
    << "    }\n"
    << "    float acc = xrt_ld((const xrt_t*)a.in[0] + off[0]);\n";
  emit_program(s, program, inputs, "    ", [](int k) {
    return "xrt_ld((const xrt_t*)a.in[" + std::to_string(k) + "] + off[" + std::to_string(k) + "])";
  });
  s << "    ((xrt_t*)a.out)[i] = xrt_st(acc);\n  }\n}\n";
  // The vector kernel: V elements of the innermost dimension per thread, 32-bit
  // offsets and magic-number divisions (see FusedVecArgs). Inputs that walk the
  // innermost dimension are read with one V-wide load; the others (broadcast along it:
  // NCHW per-channel parameters, scalars) with one scalar load.
  s << "template <int V>\n__device__ __forceinline__ void xrt_fused_vec(const FusedVecArgs& a) {\n"
    << "  const unsigned step = gridDim.x * blockDim.x;\n"
    << "  for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < a.nvec; j += step) {\n"
    << "    unsigned off[" << inputs << "];\n"
    << "#pragma unroll\n"
    << "    for (int k = 0; k < " << inputs << "; ++k) off[k] = 0;\n"
    << "    unsigned r = j;\n"
    << "#pragma unroll\n"
    << "    for (int d = " << kFusedMaxRank - 1 << "; d >= 0; --d) {\n"
    << "      if (d >= a.rank) continue;\n"
    << "      const unsigned q = d == 0 ? 0u : (__umulhi(r, a.mul[d]) + r) >> a.shr[d];\n"
    << "      const unsigned c = r - q * a.div[d];\n"
    << "#pragma unroll\n"
    << "      for (int k = 0; k < " << inputs << "; ++k) off[k] += c * a.strides[k][d];\n"
    << "      r = q;\n"
    << "    }\n";
  for (int k = 0; k < inputs; ++k)
    s << "    xrt_vec<V> r" << k << ";\n    xrt_load_vec<V>(a, " << k << ", off[" << k << "], r"
      << k << ");\n";
  s << "    xrt_vec<V> o;\n"
    << "#pragma unroll\n"
    << "    for (int l = 0; l < V; ++l) {\n"
    << "      float acc = xrt_ld(&r0.v[l]);\n";
  emit_program(s, program, inputs, "      ",
               [](int k) { return "xrt_ld(&r" + std::to_string(k) + ".v[l])"; });
  s << "      o.v[l] = xrt_st(acc);\n"
    << "    }\n"
    << "    ((xrt_vec<V>*)a.out)[j] = o;\n"
    << "  }\n}\n";
  for (int v : fused_vector_widths(dtype))
    s << "extern \"C\" __global__ void " << fused_vector_kernel(v) << "(FusedVecArgs a) {\n"
      << "  xrt_fused_vec<" << v << ">(a);\n}\n";
  return s.str();
}

std::vector<int> fused_vector_widths(DType dtype) {
  // 16-, 8- and 4-byte accesses: the widest one the innermost dimension and the
  // pointers allow is taken at run time.
  return dtype == DType::kFloat32 ? std::vector<int>{4, 2} : std::vector<int>{8, 4, 2};
}

std::string fused_vector_kernel(int width) { return "xrt_fused_v" + std::to_string(width); }

}  // namespace xpuruntime::cuda_ops
