// Plain-argument launchers of the elementwise CUDA kernels (no CUDA headers): the
// registry kernels in elementwise_kernels.cpp parse attributes and build index
// plans once, then call these per run. All pointers are device pointers of dense
// tensors; `stream` is a cudaStream_t. The 16-bit floats compute in fp32. NaN
// propagates as in the ONNX reference (numpy): Relu, Max, Min, Clip, Sign pass NaN.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/common/broadcast.h"
#include "xpuruntime/dtype.h"

namespace xpuruntime::cuda_ops {

enum class UnaryOp : int32_t {
  kNeg,
  kAbs,
  kSqrt,
  kExp,
  kLog,
  kErf,
  kTanh,
  kSigmoid,
  kRelu,
  kLeakyRelu,
  kHardSigmoid,
  kHardSwish,
  kGelu,
  kGeluTanh,
  kReciprocal,
  kFloor,
  kCeil,
  kRound,
  kSin,
  kCos,
  kSoftplus,
  kSign,
  kElu,
  kNot,
  kPowScalar,
  kIdentity
};

struct UnaryParams {
  double alpha = 0.0;  // LeakyRelu, Elu, HardSigmoid; the exponent of kPowScalar
  double beta = 0.0;   // HardSigmoid
};

// y[i] = op(x[i]) over n elements of dtype t.
void launch_unary(UnaryOp op, DType t, const UnaryParams& p, const void* x, void* y, int64_t n,
                  void* stream);

// Clip: bounds from device scalars (nullable) or, when null, from lo/hi (the
// attribute form of old opsets, or the dtype's range).
void launch_clip(DType t, const void* x, void* y, int64_t n, const void* lo_ptr, const void* hi_ptr,
                 double lo, double hi, void* stream);

enum class BinaryOp : int32_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMod,
  kFmod,
  kMin,
  kMax,
  kEqual,
  kLess,
  kGreater,
  kLessOrEqual,
  kGreaterOrEqual,
  kAnd,
  kOr,
  kXor
};
constexpr bool binary_is_compare(BinaryOp op) { return op >= BinaryOp::kEqual; }

// out = op(a, b) with numpy broadcasting described by ix (operands 0 = a, 1 = b).
// Comparisons and logic ops write bool.
void launch_binary(BinaryOp op, DType t, const StridedIndex& ix, const void* a, const void* b,
                   void* out, void* stream);

// out = fold(op, inputs) for Min/Max/Sum(=kAdd), then times `scale` when scale != 1
// (Mean). 1 <= count <= kMaxOperands: ix has one operand per input; the caller
// chains longer lists through out (which may alias an input of identical shape).
void launch_variadic(BinaryOp op, DType t, const StridedIndex& ix, const void* const* inputs,
                     int count, void* out, double scale, void* stream);

// IsNaN / IsInf: y[i] (bool) classifies float x[i] of dtype t (fp32, fp16, bf16,
// fp64). IsInf counts +inf when detect_positive, -inf when detect_negative.
enum class ClassifyOp : int32_t { kIsNaN, kIsInf };
void launch_classify(ClassifyOp op, DType t, const void* x, void* y, int64_t n,
                     bool detect_positive, bool detect_negative, void* stream);

// y = cast(x) (float -> int saturates, NaN -> 0; -> bool is != 0), as the CPU kernel.
void launch_cast(DType from, DType to, const void* x, void* y, int64_t n, void* stream);

// out = cond ? x : y, byte-generic (element size 1, 2, 4 or 8), operands 0/1/2 of ix.
void launch_where(std::size_t elem_size, const StridedIndex& ix, const void* cond, const void* x,
                  const void* y, void* out, void* stream);

}  // namespace xpuruntime::cuda_ops
