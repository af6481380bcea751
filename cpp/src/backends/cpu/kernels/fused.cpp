// FusedElementwise (domain "xrt"): a chain of elementwise ops the compiler merged
// (passes.cpp) so the data is read and written once instead of once per op, e.g.
// BERT's erf-GELU (Div, Erf, Add, Mul, Mul) or GPT-2's tanh-GELU (8 ops).
//
// The program is an ops::ElementwiseProgram (xpuruntime/ops/elementwise_program.h),
// read from the node once when the kernel is prepared. Operands are full-shape,
// scalars, or suffix-broadcast rows (bias); float32 only.
// Branch-free float code (clamps, selects) vectorizes only when comparisons may be
// speculated; results are identical, only FP exception flags could differ. Before
// every include so inline helpers share these options and stay inlinable.
#pragma GCC optimize("no-trapping-math")
#include <cmath>

#include "backends/cpu/kernels/elementwise.h"
#include "backends/cpu/kernels/fused.h"
#include "backends/cpu/kernels/isa_clones.h"
#include "backends/cpu/kernels/parallel.h"
#include "xpuruntime/ops/elementwise_program.h"
#include "xpuruntime/ops/op_schema.h"

namespace xpuruntime::cpu {
namespace {

constexpr int64_t kBlock = 512;

using Instr = ops::ElementwiseInstr;

inline float bin(int code, float a, float b) {
  switch (static_cast<FusedBin>(code)) {
    case FusedBin::kAdd: return a + b;
    case FusedBin::kSub: return a - b;
    case FusedBin::kMul: return a * b;
    case FusedBin::kDiv: return a / b;
    case FusedBin::kPow:
      if (b == 2.0f) return a * a;
      if (b == 3.0f) return a * a * a;
      if (b == 0.5f) return std::sqrt(a);
      return std::pow(a, b);
    case FusedBin::kMin: return std::isnan(a) || std::isnan(b) ? NAN : (b < a ? b : a);
    case FusedBin::kMax: return std::isnan(a) || std::isnan(b) ? NAN : (b > a ? b : a);
  }
  return a;
}

template <Unary K>
void unary_block(float* acc, int64_t n, const UnaryParams& p) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) acc[i] = apply_unary_k<K, float>(acc[i], p);
}

void apply_unary_block(Unary k, float* acc, int64_t n, const UnaryParams& p) {
  switch (k) {
    case Unary::kErf: return unary_block<Unary::kErf>(acc, n, p);
    case Unary::kTanh: return unary_block<Unary::kTanh>(acc, n, p);
    case Unary::kExp: return unary_block<Unary::kExp>(acc, n, p);
    case Unary::kSigmoid: return unary_block<Unary::kSigmoid>(acc, n, p);
    case Unary::kRelu: return unary_block<Unary::kRelu>(acc, n, p);
    case Unary::kSqrt: return unary_block<Unary::kSqrt>(acc, n, p);
    case Unary::kGelu: return unary_block<Unary::kGelu>(acc, n, p);
    case Unary::kGeluTanh: return unary_block<Unary::kGeluTanh>(acc, n, p);
    case Unary::kHardSwish: return unary_block<Unary::kHardSwish>(acc, n, p);
    case Unary::kHardSigmoid: return unary_block<Unary::kHardSigmoid>(acc, n, p);
    case Unary::kClip: return unary_block<Unary::kClip>(acc, n, p);
    default:
      for (int64_t i = 0; i < n; ++i) acc[i] = apply_unary<float>(k, acc[i], p);
  }
}

template <FusedBin B>
void bin_loop(bool swap, float* acc, const float* o, int64_t n) {
  if (swap) {
#pragma omp simd
    for (int64_t k = 0; k < n; ++k) acc[k] = bin(static_cast<int>(B), o[k], acc[k]);
  } else {
#pragma omp simd
    for (int64_t k = 0; k < n; ++k) acc[k] = bin(static_cast<int>(B), acc[k], o[k]);
  }
}

// The other operand a scalar: broadcast in a register, not filled into a block.
template <FusedBin B>
void bin_scalar_loop(bool swap, float* acc, float c, int64_t n) {
  if (swap) {
#pragma omp simd
    for (int64_t k = 0; k < n; ++k) acc[k] = bin(static_cast<int>(B), c, acc[k]);
  } else {
#pragma omp simd
    for (int64_t k = 0; k < n; ++k) acc[k] = bin(static_cast<int>(B), acc[k], c);
  }
}

void binary_scalar_block(FusedBin b, bool swap, float* acc, float c, int64_t n) {
  switch (b) {
    case FusedBin::kAdd: return bin_scalar_loop<FusedBin::kAdd>(swap, acc, c, n);
    case FusedBin::kSub: return bin_scalar_loop<FusedBin::kSub>(swap, acc, c, n);
    case FusedBin::kMul: return bin_scalar_loop<FusedBin::kMul>(swap, acc, c, n);
    case FusedBin::kDiv: return bin_scalar_loop<FusedBin::kDiv>(swap, acc, c, n);
    case FusedBin::kPow: return bin_scalar_loop<FusedBin::kPow>(swap, acc, c, n);
    case FusedBin::kMin: return bin_scalar_loop<FusedBin::kMin>(swap, acc, c, n);
    case FusedBin::kMax: return bin_scalar_loop<FusedBin::kMax>(swap, acc, c, n);
  }
}

void binary_block(FusedBin b, bool swap, float* acc, const float* o, int64_t n) {
  switch (b) {
    case FusedBin::kAdd: return bin_loop<FusedBin::kAdd>(swap, acc, o, n);
    case FusedBin::kSub: return bin_loop<FusedBin::kSub>(swap, acc, o, n);
    case FusedBin::kMul: return bin_loop<FusedBin::kMul>(swap, acc, o, n);
    case FusedBin::kDiv: return bin_loop<FusedBin::kDiv>(swap, acc, o, n);
    case FusedBin::kPow: return bin_loop<FusedBin::kPow>(swap, acc, o, n);
    case FusedBin::kMin: return bin_loop<FusedBin::kMin>(swap, acc, o, n);
    case FusedBin::kMax: return bin_loop<FusedBin::kMax>(swap, acc, o, n);
  }
}

// The inputs of one run: element count per input (full = total, 1 = scalar, else a
// suffix row).
struct Operands {
  const std::vector<Instr>* prog;
  const std::vector<TensorView>* in;
  const int64_t* cnt;
  int64_t total;
  float* y;
};

// Blocks [b_begin, b_end) of the output, each computed in registers/L1 from the
// inputs with one pass over memory. Compiled once per x86-64 level and picked at load
// time (the library's baseline is SSE2; the transcendental polynomials are most of an
// activation chain's cost and run 2-4x faster at 256/512 bits). flatten inlines the
// per-op loops into each clone so they are vectorized at its width. Same operations in
// the same order in every clone (no FMA contraction under -std=c++20): the bits do
// not depend on the clone.
[[gnu::flatten]] XRT_ISA_CLONES void eval_blocks(const Operands& o, int64_t b_begin,
                                                  int64_t b_end) {
  const std::vector<Instr>& prog = *o.prog;
  const std::vector<TensorView>& in = *o.in;
  const int64_t* cnt = o.cnt;
  const int64_t total = o.total;
  for (int64_t b = b_begin; b < b_end; ++b) {
    alignas(64) float acc[kBlock];
    alignas(64) float opnd[kBlock];
    const int64_t start = b * kBlock, len = std::min(kBlock, total - start);
    auto load = [&](std::size_t i, float* dst) {
      const float* src = in[i].ptr<const float>();
      if (cnt[i] == total) {
        for (int64_t k = 0; k < len; ++k) dst[k] = src[start + k];
      } else if (cnt[i] == 1) {
        for (int64_t k = 0; k < len; ++k) dst[k] = src[0];
      } else {
        // A suffix row (a bias, channels-last per-channel parameters): copied in
        // contiguous runs, no division per element.
        const int64_t row = cnt[i];
        int64_t pos = start % row;
        for (int64_t k = 0; k < len;) {
          const int64_t run = std::min(row - pos, len - k);
          for (int64_t j = 0; j < run; ++j) dst[k + j] = src[pos + j];
          k += run;
          pos = 0;
        }
      }
    };
    load(0, acc);
    for (const Instr& ins : prog) {
      if (ins.kind == Instr::Kind::kUnary) {
        apply_unary_block(ins.unary, acc, len, ins.params);
        continue;
      }
      const std::size_t oi = static_cast<std::size_t>(ins.operand);
      const float* src = opnd;
      if (ins.binary == FusedBin::kPow && cnt[oi] == 1 && ins.kind != Instr::Kind::kBinaryOperandLeft) {
        // x^c with a constant exponent (GPT-2's tanh-GELU cubes): a loop per exponent,
        // so the common ones vectorize instead of branching per element into pow().
        const float c = in[oi].ptr<const float>()[0];
        if (c == 2.0f) {
          for (int64_t k = 0; k < len; ++k) acc[k] = acc[k] * acc[k];
        } else if (c == 3.0f) {
          for (int64_t k = 0; k < len; ++k) acc[k] = acc[k] * acc[k] * acc[k];
        } else if (c == 0.5f) {
          for (int64_t k = 0; k < len; ++k) acc[k] = std::sqrt(acc[k]);
        } else if (c != 1.0f) {
          for (int64_t k = 0; k < len; ++k) acc[k] = std::pow(acc[k], c);
        }
        continue;
      }
      if (cnt[oi] == 1) {
        binary_scalar_block(ins.binary, ins.kind == Instr::Kind::kBinaryOperandLeft, acc,
                            in[oi].ptr<const float>()[0], len);
        continue;
      }
      if (cnt[oi] == total) {
        src = in[oi].ptr<const float>() + start;  // read in place
      } else {
        load(oi, opnd);
      }
      binary_block(ins.binary, ins.kind == Instr::Kind::kBinaryOperandLeft, acc, src, len);
    }
    for (int64_t k = 0; k < len; ++k) o.y[start + k] = acc[k];
  }
}

void run_program(const std::vector<Instr>& prog, const Node& n, const std::vector<TensorView>& in,
                 std::vector<TensorView>& out) {
  const int64_t total = out[0].numel();
  std::vector<int64_t> cnt(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    cnt[i] = in[i].numel();
    XRT_CHECK(cnt[i] == total || cnt[i] == 1 || (cnt[i] > 0 && total % cnt[i] == 0),
              InvalidModelError, n.where(), ": operand ", i, " does not broadcast as a suffix");
  }
  const Operands o{&prog, &in, cnt.data(), total, out[0].ptr<float>()};
  const int64_t blocks = (total + kBlock - 1) / kBlock;
  parallel_for(blocks, total, [&](int64_t b0, int64_t b1) { eval_blocks(o, b0, b1); });
}

// Per-dimension element strides of an operand of shape `s` read in the broadcast walk
// of `out` (right-aligned; 0 where s has a 1 or no dimension).
std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t acc = 1;
  for (std::size_t k = 0; k < s.size(); ++k) {
    const std::size_t d = s.size() - 1 - k, od = out.size() - 1 - k;
    if (s[d] != 1) st[od] = acc;
    acc *= s[d];
  }
  return st;
}

// RotaryHalf: y = x * cos + rotate_half(x) * sin over rows of x's last dimension;
// cos/sin rows found through their broadcast strides.
template <typename T>
void rotary_half(const std::vector<TensorView>& in, TensorView& out) {
  using N = Num<T>;
  const Shape& xs = in[0].shape;
  const int64_t d = xs.back(), half = d / 2, rows = d > 0 ? in[0].numel() / d : 0;
  const std::vector<int64_t> cs = broadcast_strides(in[1].shape, xs),
                             ss = broadcast_strides(in[2].shape, xs);
  const T* x = in[0].ptr<const T>();
  const T* c = in[1].ptr<const T>();
  const T* s = in[2].ptr<const T>();
  T* y = out.ptr<T>();
  parallel_for(rows, rows * d, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t co = 0, so = 0, q = r;
      for (std::size_t k = xs.size() - 1; k-- > 0;) {
        const int64_t i = q % xs[k];
        q /= xs[k];
        co += i * cs[k];
        so += i * ss[k];
      }
      const T* xr = x + r * d;
      const T* cr = c + co;
      const T* sr = s + so;
      T* yr = y + r * d;
      for (int64_t j = 0; j < d; ++j) {
        const auto rot = j < half ? -N::load(xr[j + half]) : N::load(xr[j - half]);
        yr[j] = N::store(N::load(xr[j]) * N::load(cr[j]) + rot * N::load(sr[j]));
      }
    }
  });
}

}  // namespace

void register_fused_ops(std::vector<OpDef>& defs) {
  {
    OpDef r;
    r.op_type = "RotaryHalf";
    r.kernel = "cpu";
    r.run = [](const Node&, const std::vector<TensorView>& in, std::vector<TensorView>& out) {
      visit_dtype(in[0].dtype, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (kIsFloat<T>) rotary_half<T>(in, out[0]);
      });
    };
    defs.push_back(std::move(r));
  }
  OpDef d;
  d.op_type = "FusedElementwise";
  d.kernel = "cpu";
  // The blocked evaluation reads each operand as the output, a scalar or a repeating
  // suffix row; an operand broadcast along an inner dim (NCHW per-channel [C, 1, 1])
  // is another kernel's case (the fusion pass then leaves the chain unfused).
  d.supports = [](const Node& n, const std::vector<Meta>& in) {
    std::vector<Shape> shapes;
    for (const Meta& m : in) {
      if (!m.known()) return Support::yes();  // checked when run, as before
      shapes.push_back(*m.shape);
    }
    const Shape out = ops::broadcast_shapes(n, shapes);
    for (std::size_t k = 0; k < in.size(); ++k) {
      const Shape& s = *in[k].shape;
      std::size_t lead = 0;
      while (lead < s.size() && s[lead] == 1) ++lead;
      const auto len = static_cast<std::ptrdiff_t>(s.size() - lead);
      if (graph::shape_numel(s) != 1 &&
          !std::equal(s.begin() + static_cast<std::ptrdiff_t>(lead), s.end(), out.end() - len))
        return Support::no(reason::kShapeUnsupported,
                           "FusedElementwise on the CPU reads operands that broadcast as a "
                           "suffix of the output or a scalar; operand " +
                               std::to_string(k) + " does not");
    }
    return Support::yes();
  };
  // The program is parsed once per plan step.
  set_parsed_body<ops::ElementwiseProgram>(
      d, [](const ops::ElementwiseProgram& p, const Node& n, const std::vector<TensorView>& in,
            std::vector<TensorView>& out) { run_program(p.instrs, n, in, out); });
  defs.push_back(std::move(d));
}

}  // namespace xpuruntime::cpu
