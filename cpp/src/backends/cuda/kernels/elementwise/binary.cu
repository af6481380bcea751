// Binary (Add ... Xor) and variadic (Min/Max/Sum/Mean) elementwise kernels with
// numpy broadcasting. Three shapes of loop per (op, dtype): both operands dense
// (16-byte vector loads when aligned), one operand a scalar, and the general
// collapsed-stride walk. Integer + - * wrap like numpy; integer division and
// modulo by zero give 0 (never a trap), as the CPU kernels.
#include <cmath>

#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/elementwise/elementwise_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

template <BinaryOp K, typename C>
__device__ __forceinline__ auto binary_apply(C a, C b) {
  if constexpr (K == BinaryOp::kEqual)
    return a == b;
  else if constexpr (K == BinaryOp::kLess)
    return a < b;
  else if constexpr (K == BinaryOp::kGreater)
    return a > b;
  else if constexpr (K == BinaryOp::kLessOrEqual)
    return a <= b;
  else if constexpr (K == BinaryOp::kGreaterOrEqual)
    return a >= b;
  else if constexpr (K == BinaryOp::kAnd)
    return static_cast<bool>(a) && static_cast<bool>(b);
  else if constexpr (K == BinaryOp::kOr)
    return static_cast<bool>(a) || static_cast<bool>(b);
  else if constexpr (K == BinaryOp::kXor)
    return static_cast<bool>(a) != static_cast<bool>(b);
  else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<std::conditional_t<std::is_same_v<C, bool>, uint8_t, C>>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;  // no int promotion
    if constexpr (K == BinaryOp::kAdd) return static_cast<C>(static_cast<U>(W(U(a)) + W(U(b))));
    if constexpr (K == BinaryOp::kSub) return static_cast<C>(static_cast<U>(W(U(a)) - W(U(b))));
    if constexpr (K == BinaryOp::kMul) return static_cast<C>(static_cast<U>(W(U(a)) * W(U(b))));
    if constexpr (K == BinaryOp::kDiv) {
      if (b == 0) return C(0);
      if constexpr (std::is_signed_v<C>) {
        if (b == C(-1)) return static_cast<C>(static_cast<U>(U(0) - U(a)));  // INT_MIN / -1
      }
      return static_cast<C>(a / b);
    }
    if constexpr (K == BinaryOp::kMod || K == BinaryOp::kFmod) {
      if (b == 0) return C(0);
      if constexpr (std::is_signed_v<C>) {
        if (b == C(-1)) return C(0);
      }
      C r = static_cast<C>(a % b);
      if constexpr (K == BinaryOp::kMod && std::is_signed_v<C>) {
        if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);  // sign of the divisor
      }
      return r;
    }
    if constexpr (K == BinaryOp::kPow) {
      return static_cast<C>(pow(static_cast<double>(a), static_cast<double>(b)));
    }
    if constexpr (K == BinaryOp::kMin) return b < a ? b : a;
    if constexpr (K == BinaryOp::kMax) return b > a ? b : a;
  } else {
    if constexpr (K == BinaryOp::kAdd) return a + b;
    if constexpr (K == BinaryOp::kSub) return a - b;
    if constexpr (K == BinaryOp::kMul) return a * b;
    if constexpr (K == BinaryOp::kDiv) return a / b;
    if constexpr (K == BinaryOp::kPow) {
      if (b == C(2)) return a * a;  // the common exponents exactly, as the CPU kernel
      if (b == C(3)) return a * a * a;
      if (b == C(0.5)) return std::sqrt(a);
      return std::pow(a, b);
    }
    if constexpr (K == BinaryOp::kMod || K == BinaryOp::kFmod) {
      C r = std::fmod(a, b);
      if constexpr (K == BinaryOp::kMod) {
        if (r != C(0) && ((r < C(0)) != (b < C(0)))) r += b;
      }
      return r;
    }
    // NaN in either operand gives NaN (numpy's maximum/minimum, the ONNX reference).
    if constexpr (K == BinaryOp::kMin) return (a != a || b != b) ? a + b : (b < a ? b : a);
    if constexpr (K == BinaryOp::kMax) return (a != a || b != b) ? a + b : (b > a ? b : a);
  }
}

template <BinaryOp K, typename T>
using out_t = std::conditional_t<binary_is_compare(K), bool, T>;

// A 16-byte vector of T's (kV = 16 / sizeof(T) elements) and the output vector of the
// same element count (bool outputs: 16 / sizeof(T) bytes), for the vectorized kernels.
template <typename T>
inline constexpr int kVecOf = 16 / sizeof(T);
template <typename T>
struct alignas(16) InVec {
  T v[kVecOf<T>];
};
template <typename O, int N>
struct alignas(sizeof(O) * N) OutVec {
  O v[N];
};

// mode 0: both dense; 1: a dense, b scalar; 2: a scalar, b dense; 3: general.
template <BinaryOp K, typename T, int kMode>
__global__ void binary_kernel(const T* __restrict__ a, const T* __restrict__ b,
                              out_t<K, T>* __restrict__ out, StridedIndex ix) {
  using C = compute_t<T>;
  using O = out_t<K, T>;
  const int64_t n = ix.numel;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kMode == 3) {
    for (int64_t i = tid; i < n; i += stride) {
      out[i] = store<O>(
          binary_apply<K, C>(load(a[strided_offset(ix, 0, i)]), load(b[strided_offset(ix, 1, i)])));
    }
  } else {
    const C sa = kMode == 2 ? load(a[0]) : C{};
    const C sb = kMode == 1 ? load(b[0]) : C{};
    for (int64_t i = tid; i < n; i += stride) {
      const C x = kMode == 2 ? sa : load(a[i]);
      const C y = kMode == 1 ? sb : load(b[i]);
      out[i] = store<O>(binary_apply<K, C>(x, y));
    }
  }
}

// Both dense and 16-byte aligned: vectors of 16 / sizeof(T) elements per access
// (8 for the 16-bit floats), the tail element-wise.
template <BinaryOp K, typename T>
__global__ void binary_vec_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                  out_t<K, T>* __restrict__ out, int64_t n) {
  using C = compute_t<T>;
  using O = out_t<K, T>;
  constexpr int kV = 16 / sizeof(T);
  using VI = InVec<T>;
  using VO = OutVec<O, kV>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nv = n / kV;
  for (int64_t i = tid; i < nv; i += stride) {
    const VI x = reinterpret_cast<const VI*>(a)[i];
    const VI y = reinterpret_cast<const VI*>(b)[i];
    VO z;
#pragma unroll
    for (int j = 0; j < kV; ++j) z.v[j] = store<O>(binary_apply<K, C>(load(x.v[j]), load(y.v[j])));
    reinterpret_cast<VO*>(out)[i] = z;
  }
  for (int64_t i = nv * kV + tid; i < n; i += stride) {
    out[i] = store<O>(binary_apply<K, C>(load(a[i]), load(b[i])));
  }
}

// One operand dense, the other constant along the innermost collapsed dim (a per-channel
// scale or bias on [N, C, H*W], an SE gate [N, C, 1, 1]): one block per row of `inner`
// elements reads the broadcast operand once and the row in 16-byte vectors where
// aligned (the general walk's per-element index divisions made PoolFormer's layer-scale
// Mul and residual Add run at under half of the memory bandwidth).
template <BinaryOp K, typename T, bool kDenseFirst>
__global__ void binary_row_kernel(const T* __restrict__ dense, const T* __restrict__ bcast,
                                  out_t<K, T>* __restrict__ out, StridedIndex ix, int bk,
                                  int64_t inner, bool vec) {
  using C = compute_t<T>;
  using O = out_t<K, T>;
  constexpr int kV = 16 / sizeof(T);
  const int64_t row = blockIdx.x;
  const C v = load(bcast[strided_offset(ix, bk, row * inner)]);
  const T* d = dense + row * inner;
  O* o = out + row * inner;
  auto op = [v](C x) { return kDenseFirst ? binary_apply<K, C>(x, v) : binary_apply<K, C>(v, x); };
  if (kV > 1 && vec) {
    using VI = InVec<T>;
    using VO = OutVec<O, kV>;
    for (int64_t i = threadIdx.x; i < inner / kV; i += blockDim.x) {
      const VI x = reinterpret_cast<const VI*>(d)[i];
      VO z;
#pragma unroll
      for (int j = 0; j < kV; ++j) z.v[j] = store<O>(op(load(x.v[j])));
      reinterpret_cast<VO*>(o)[i] = z;
    }
  } else {
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) o[i] = store<O>(op(load(d[i])));
  }
}

// How an operand is read by binary_vec_walk_kernel: in output order, constant along the
// innermost collapsed dim, or contiguous along it (a row broadcast over the outer dims).
enum class InnerRead : int { kDense, kConstant, kContiguous };

// A broadcast where every operand's innermost collapsed dim has stride 0 or 1 and its
// extent is a multiple of the vector width: 16-byte vectors of the output, each operand's
// offset found once per vector (an SE gate [N, 1, 1, C] times channels-last [N, H, W, C],
// a bias [C] over [N, H, W, C] rows). The general walk's per-element offsets made the
// channels-last SE Mul 22 us on EfficientNet-B0's first stage.
template <BinaryOp K, typename T, InnerRead RA, InnerRead RB>
__global__ void binary_vec_walk_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                       out_t<K, T>* __restrict__ out, StridedIndex ix) {
  using C = compute_t<T>;
  using O = out_t<K, T>;
  constexpr int kV = 16 / sizeof(T);
  using VI = InVec<T>;
  using VO = OutVec<O, kV>;
  const int64_t nv = ix.numel / kV;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < nv;
       i += stride) {
    const int64_t e = i * kV;
    C x[kV], y[kV];
    if constexpr (RA == InnerRead::kConstant) {
      const C v = load(a[strided_offset(ix, 0, e)]);
#pragma unroll
      for (int j = 0; j < kV; ++j) x[j] = v;
    } else {
      const VI v = *reinterpret_cast<const VI*>(
          a + (RA == InnerRead::kDense ? e : strided_offset(ix, 0, e)));
#pragma unroll
      for (int j = 0; j < kV; ++j) x[j] = load(v.v[j]);
    }
    if constexpr (RB == InnerRead::kConstant) {
      const C v = load(b[strided_offset(ix, 1, e)]);
#pragma unroll
      for (int j = 0; j < kV; ++j) y[j] = v;
    } else {
      const VI v = *reinterpret_cast<const VI*>(
          b + (RB == InnerRead::kDense ? e : strided_offset(ix, 1, e)));
#pragma unroll
      for (int j = 0; j < kV; ++j) y[j] = load(v.v[j]);
    }
    VO z;
#pragma unroll
    for (int j = 0; j < kV; ++j) z.v[j] = store<O>(binary_apply<K, C>(x[j], y[j]));
    reinterpret_cast<VO*>(out)[i] = z;
  }
}

bool aligned(const void* p, std::size_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

// How binary_vec_walk_kernel reads operand k, or false where it cannot (inner stride
// other than 0 and 1).
bool inner_read(const StridedIndex& ix, int k, InnerRead& r) {
  if (ix.dense[k]) {
    r = InnerRead::kDense;
    return true;
  }
  const int64_t st = ix.strides[k][ix.rank - 1];
  if (st != 0 && st != 1) return false;
  r = st == 0 ? InnerRead::kConstant : InnerRead::kContiguous;
  return true;
}

template <BinaryOp K, typename T, InnerRead RA>
void launch_vec_walk_b(InnerRead rb, const T* a, const T* b, out_t<K, T>* out,
                       const StridedIndex& ix, cudaStream_t s) {
  constexpr int kV = 16 / sizeof(T);
  const unsigned grid = grid_for(ix.numel, 256, kV);
  switch (rb) {
    case InnerRead::kDense:
      return binary_vec_walk_kernel<K, T, RA, InnerRead::kDense>
          <<<grid, 256, 0, s>>>(a, b, out, ix);
    case InnerRead::kConstant:
      return binary_vec_walk_kernel<K, T, RA, InnerRead::kConstant>
          <<<grid, 256, 0, s>>>(a, b, out, ix);
    case InnerRead::kContiguous:
      return binary_vec_walk_kernel<K, T, RA, InnerRead::kContiguous>
          <<<grid, 256, 0, s>>>(a, b, out, ix);
  }
}

// binary_vec_walk_kernel for this index, when it applies (returns false otherwise).
template <BinaryOp K, typename T>
bool try_vec_walk(const StridedIndex& ix, const T* a, const T* b, out_t<K, T>* out,
                  cudaStream_t s) {
  constexpr int kV = 16 / sizeof(T);
  if constexpr (kV <= 1) {
    return false;
  } else {
    InnerRead ra, rb;
    if (ix.rank < 2 || ix.dims[ix.rank - 1] % kV != 0 || !inner_read(ix, 0, ra) ||
        !inner_read(ix, 1, rb) || !aligned(a, 16) || !aligned(b, 16) ||
        !aligned(out, sizeof(out_t<K, T>) * kV))
      return false;
    // Outer strides of a contiguous operand are multiples of the inner extent, so its
    // vectors stay 16-byte aligned; a constant operand is read one element at a time.
    switch (ra) {
      case InnerRead::kDense:
        launch_vec_walk_b<K, T, InnerRead::kDense>(rb, a, b, out, ix, s);
        break;
      case InnerRead::kConstant:
        launch_vec_walk_b<K, T, InnerRead::kConstant>(rb, a, b, out, ix, s);
        break;
      case InnerRead::kContiguous:
        launch_vec_walk_b<K, T, InnerRead::kContiguous>(rb, a, b, out, ix, s);
        break;
    }
    return true;
  }
}

// Operand k of ix is constant along the innermost collapsed dim, whose extent is large
// enough to give a block a row (binary_row_kernel).
bool row_broadcast(const StridedIndex& ix, int k) {
  return ix.rank >= 2 && ix.strides[k][ix.rank - 1] == 0 && ix.dims[ix.rank - 1] >= 128 &&
         ix.numel / ix.dims[ix.rank - 1] <= 0x7fffffff;
}

template <BinaryOp K, TypeSet S>
void binary_typed(DType t, const StridedIndex& ix, const void* a, const void* b, void* out,
                  cudaStream_t s) {
  visit_dtype<S>(t, "binary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using O = out_t<K, T>;
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    O* po = static_cast<O*>(out);
    constexpr int kThreads = 256;
    constexpr int kV = 16 / sizeof(T);
    if (ix.dense[0] && ix.dense[1]) {
      if (kV > 1 && aligned(a, 16) && aligned(b, 16) && aligned(out, sizeof(O) * kV)) {
        binary_vec_kernel<K, T>
            <<<grid_for(ix.numel, kThreads, kV), kThreads, 0, s>>>(pa, pb, po, ix.numel);
      } else {
        binary_kernel<K, T, 0><<<grid_for(ix.numel, kThreads), kThreads, 0, s>>>(pa, pb, po, ix);
      }
    } else if ((ix.dense[0] && row_broadcast(ix, 1)) || (ix.dense[1] && row_broadcast(ix, 0))) {
      const bool dense_first = ix.dense[0];
      const int64_t inner = ix.dims[ix.rank - 1];
      const T* dense = dense_first ? pa : pb;
      const T* bc = dense_first ? pb : pa;
      const bool vec = inner % kV == 0 && aligned(dense, 16) && aligned(out, sizeof(O) * kV);
      const unsigned rows = static_cast<unsigned>(ix.numel / inner);
      const int threads = inner >= 1024 ? 256 : 128;
      if (dense_first) {
        binary_row_kernel<K, T, true><<<rows, threads, 0, s>>>(dense, bc, po, ix, 1, inner, vec);
      } else {
        binary_row_kernel<K, T, false><<<rows, threads, 0, s>>>(dense, bc, po, ix, 0, inner, vec);
      }
    } else if (!(ix.scalar[0] || ix.scalar[1]) && try_vec_walk<K, T>(ix, pa, pb, po, s)) {
      // launched
    } else if (ix.dense[0] && ix.scalar[1]) {
      binary_kernel<K, T, 1><<<grid_for(ix.numel, kThreads), kThreads, 0, s>>>(pa, pb, po, ix);
    } else if (ix.scalar[0] && ix.dense[1]) {
      binary_kernel<K, T, 2><<<grid_for(ix.numel, kThreads), kThreads, 0, s>>>(pa, pb, po, ix);
    } else {
      binary_kernel<K, T, 3><<<grid_for(ix.numel, kThreads), kThreads, 0, s>>>(pa, pb, po, ix);
    }
    XRT_CUDA_LAUNCH_CHECK();
  });
}

// Folds up to kMaxOperands broadcast inputs in one pass, in the compute type.
template <BinaryOp K, typename T>
// p0 may be `out` itself (a chained pass): no __restrict__ on either.
__global__ void variadic_kernel(const T* p0, const T* __restrict__ p1, const T* __restrict__ p2,
                                int count, T* out, StridedIndex ix, double scale) {
  using C = compute_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < ix.numel;
       i += stride) {
    C acc = load(p0[strided_offset(ix, 0, i)]);
    if (count > 1) acc = binary_apply<K, C>(acc, load(p1[strided_offset(ix, 1, i)]));
    if (count > 2) acc = binary_apply<K, C>(acc, load(p2[strided_offset(ix, 2, i)]));
    if (scale != 1.0) {
      if constexpr (std::is_integral_v<C>) {
        // Integer Mean: truncating division by the count, as the CPU kernel.
        acc = static_cast<C>(acc / static_cast<C>(llround(1.0 / scale)));
      } else {
        acc = static_cast<C>(acc * static_cast<C>(scale));
      }
    }
    out[i] = store<T>(acc);
  }
}

}  // namespace

void launch_binary(BinaryOp op, DType t, const StridedIndex& ix, const void* a, const void* b,
                   void* out, void* stream) {
  if (ix.numel <= 0) return;
  cudaStream_t s = as_stream(stream);
  switch (op) {
    // clang-format off
#define XRT_B(K, S) \
  case BinaryOp::K: return binary_typed<BinaryOp::K, TypeSet::S>(t, ix, a, b, out, s);
    XRT_B(kAdd, kNumeric)
    XRT_B(kSub, kNumeric)
    XRT_B(kMul, kNumeric)
    XRT_B(kDiv, kNumeric)
    XRT_B(kPow, kNumeric)
    XRT_B(kMod, kNumeric)
    XRT_B(kFmod, kNumeric)
    XRT_B(kMin, kNumeric)
    XRT_B(kMax, kNumeric)
    XRT_B(kEqual, kAll)
    XRT_B(kLess, kNumeric)
    XRT_B(kGreater, kNumeric)
    XRT_B(kLessOrEqual, kNumeric)
    XRT_B(kGreaterOrEqual, kNumeric)
#undef XRT_B
    // clang-format on
    case BinaryOp::kAnd:
    case BinaryOp::kOr:
    case BinaryOp::kXor: {
      XRT_CHECK(t == DType::kBool, UnsupportedOperationError, "And/Or/Xor (cuda) take bool, got ",
                dtype_name(t));
      if (op == BinaryOp::kAnd)
        return binary_typed<BinaryOp::kAnd, TypeSet::kAll>(t, ix, a, b, out, s);
      if (op == BinaryOp::kOr)
        return binary_typed<BinaryOp::kOr, TypeSet::kAll>(t, ix, a, b, out, s);
      return binary_typed<BinaryOp::kXor, TypeSet::kAll>(t, ix, a, b, out, s);
    }
  }
}

void launch_variadic(BinaryOp op, DType t, const StridedIndex& ix, const void* const* inputs,
                     int count, void* out, double scale, void* stream) {
  if (ix.numel <= 0) return;
  XRT_CHECK(count >= 1 && count <= kMaxOperands, InvalidArgumentError,
            "launch_variadic: count must be 1..", kMaxOperands, ", got ", count);
  cudaStream_t s = as_stream(stream);
  visit_dtype<TypeSet::kNumeric>(t, "variadic", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p[3] = {static_cast<const T*>(inputs[0]),
                     count > 1 ? static_cast<const T*>(inputs[1]) : nullptr,
                     count > 2 ? static_cast<const T*>(inputs[2]) : nullptr};
    T* o = static_cast<T*>(out);
    const unsigned g = grid_for(ix.numel, 256);
    switch (op) {
      case BinaryOp::kAdd:
        variadic_kernel<BinaryOp::kAdd, T><<<g, 256, 0, s>>>(p[0], p[1], p[2], count, o, ix, scale);
        break;
      case BinaryOp::kMin:
        variadic_kernel<BinaryOp::kMin, T><<<g, 256, 0, s>>>(p[0], p[1], p[2], count, o, ix, scale);
        break;
      case BinaryOp::kMax:
        variadic_kernel<BinaryOp::kMax, T><<<g, 256, 0, s>>>(p[0], p[1], p[2], count, o, ix, scale);
        break;
      default:
        XRT_THROW(InvalidArgumentError, "launch_variadic: op must be Add, Min or Max");
    }
    XRT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace xpuruntime::cuda_ops
