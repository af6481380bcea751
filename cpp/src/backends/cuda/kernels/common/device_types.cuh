// Device-side helpers every CUDA op kernel shares: storage -> compute types (the
// 16-bit floats compute in fp32), dtype dispatch for launchers, grid sizing and
// the checked launch. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common/broadcast.h"
#include "xpuruntime/dtype.h"
#include "xpuruntime/error.h"

namespace xpuruntime::cuda_ops {

template <typename T>
struct Compute {
  using type = T;
};
template <>
struct Compute<__half> {
  using type = float;
};
template <>
struct Compute<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename Compute<T>::type;

template <typename T>
__device__ __forceinline__ compute_t<T> load(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

template <typename T, typename C>
__device__ __forceinline__ T store(C v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
inline constexpr bool is_float_v =
    std::is_floating_point_v<T> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with the storage type of dtype; throws for a dtype the
// set does not contain. Sets: floats (fp32/fp16/bf16/fp64), signed (floats +
// signed ints), numeric (signed + uint8), all (numeric + bool).
enum class TypeSet { kFloat, kSigned, kNumeric, kAll };

template <TypeSet S, typename F>
void visit_dtype(DType t, const char* what, F&& f) {
  constexpr bool kInts = S != TypeSet::kFloat;
  constexpr bool kUnsigned = S == TypeSet::kNumeric || S == TypeSet::kAll;
  switch (t) {
    case DType::kFloat32:
      return f(TypeTag<float>{});
    case DType::kFloat16:
      return f(TypeTag<__half>{});
    case DType::kBFloat16:
      return f(TypeTag<__nv_bfloat16>{});
    case DType::kFloat64:
      return f(TypeTag<double>{});
    default:
      break;
  }
  if constexpr (kInts) {
    switch (t) {
      case DType::kInt8:
        return f(TypeTag<int8_t>{});
      case DType::kInt16:
        return f(TypeTag<int16_t>{});
      case DType::kInt32:
        return f(TypeTag<int32_t>{});
      case DType::kInt64:
        return f(TypeTag<int64_t>{});
      default:
        break;
    }
  }
  if constexpr (kUnsigned) {
    if (t == DType::kUInt8) return f(TypeTag<uint8_t>{});
  }
  if constexpr (S == TypeSet::kAll) {
    if (t == DType::kBool) return f(TypeTag<bool>{});
  }
  XRT_THROW(UnsupportedOperationError, what, " (cuda): dtype ", dtype_name(t),
            " is not supported; supports() should have refused it");
}

// Grid for a grid-stride loop over n items with `threads` per block: enough blocks
// to fill the device several times over, never more than n needs.
inline unsigned grid_for(int64_t n, int threads, int per_thread = 1) {
  const int64_t work = (n + per_thread - 1) / per_thread;
  int64_t blocks = (work + threads - 1) / threads;
  // 132 SMs x 16 resident blocks of 256 threads is already ~2 waves; more only costs.
  if (blocks > 8192) blocks = 8192;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

// Into how many chunks to split each of `blocks` independent pieces of work of `items`
// items (a reduction whose parts are merged afterwards in a fixed order) so that the
// launch has about two blocks per SM of an H100/H200: chunks of at least `min_chunk`
// items, at most 64. 1 where the pieces alone fill the device. Never an empty chunk:
// (chunks - 1)^2 < items whenever chunks <= items / min_chunk and min_chunk >= 64.
inline int64_t split_chunks(int64_t blocks, int64_t items, int64_t min_chunk) {
  constexpr int64_t kBlocksWanted = 2 * 132, kMaxChunks = 64;
  if (blocks >= kBlocksWanted || items < 2 * min_chunk) return 1;
  int64_t c = (kBlocksWanted + blocks - 1) / blocks;
  if (c > items / min_chunk) c = items / min_chunk;
  return c < 1 ? 1 : (c > kMaxChunks ? kMaxChunks : c);
}

// Calls f(TypeTag<E>{}) with an unsigned integer type of elem bytes (the
// byte-generic data-movement kernels); throws for sizes other than 1, 2, 4, 8.
template <typename F>
void visit_elem_size(std::size_t elem, const char* what, F&& f) {
  switch (elem) {
    case 1:
      return f(TypeTag<uint8_t>{});
    case 2:
      return f(TypeTag<uint16_t>{});
    case 4:
      return f(TypeTag<uint32_t>{});
    case 8:
      return f(TypeTag<uint64_t>{});
    default:
      XRT_THROW(UnsupportedOperationError, what, " (cuda): element size ", elem,
                " is not supported (1, 2, 4 or 8 bytes)");
  }
}

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// Checks the launch that just happened (bad configuration, missing image) and
// names the op in the error.
#define XRT_CUDA_LAUNCH_CHECK() XRT_CUDA_CHECK(cudaGetLastError())

__device__ __forceinline__ uint32_t fast_div(const FastDivisor& f, uint32_t n) {
  return (__umulhi(n, f.magic) + n) >> f.shift;
}

// Offset of linear output index i in operand k of a StridedIndex: 32-bit math with
// the precomputed divisors when every offset fits (the common case), else int64
// (tensors above 2^31 elements are legal).
__device__ __forceinline__ int64_t strided_offset(const StridedIndex& ix, int k, int64_t i) {
  if (ix.small) {
    uint32_t r = static_cast<uint32_t>(i);
    int32_t off = 0;
#pragma unroll
    for (int d = kMaxRank - 1; d >= 0; --d) {
      if (d < ix.rank) {
        const uint32_t q = fast_div(ix.fast_dims[d], r);
        off += static_cast<int32_t>(r - q * ix.fast_dims[d].divisor) *
               static_cast<int32_t>(ix.strides[k][d]);
        r = q;
      }
    }
    return off;
  }
  int64_t off = 0;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (d < ix.rank) {
      const int64_t q = i / ix.dims[d];
      off += (i - q * ix.dims[d]) * ix.strides[k][d];
      i = q;
    }
  }
  return off;
}

}  // namespace xpuruntime::cuda_ops
