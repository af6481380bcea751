// Byte-generic strided copy (one walk over collapsed dims, both sides strided) and
// the tiled batched transpose of the last two dimensions.
//
// The walk is what head transposes, concatenations and slices cost, so it is made
// cheap in the two ways that matter on the GPU: where the innermost dimension is
// contiguous on both sides, whole 16/8/4-byte vectors move per thread (a [B, S, H, 64]
// fp16 head transpose moves 8 halves at a time), and where every offset fits int32 the
// per-dimension divisions are multiply-high + shift instead of 64-bit divisions.
#include "backends/cuda/kernels/common/device_types.cuh"
#include "backends/cuda/kernels/data/data_impl.h"

namespace xpuruntime::cuda_ops {
namespace {

// A 16-byte unit for the widest vectorized copies.
struct alignas(16) Bytes16 {
  uint4 v;
};

// The copy plan with 32-bit offsets and precomputed divisors.
struct CopyIndex32 {
  int rank = 0;
  uint32_t numel = 0;
  FastDivisor dims[kMaxCopyRank] = {};
  int32_t in_strides[kMaxCopyRank] = {};
  int32_t out_strides[kMaxCopyRank] = {};
  int32_t in_base = 0;
  int32_t out_base = 0;
};

template <typename E>
__global__ void copy32_kernel(const E* __restrict__ in, E* __restrict__ out, CopyIndex32 ix) {
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < ix.numel; i += stride) {
    uint32_t r = i;
    int32_t io = ix.in_base, oo = ix.out_base;
    for (int d = ix.rank - 1; d >= 0; --d) {
      const uint32_t q = fast_div(ix.dims[d], r);
      const int32_t c = static_cast<int32_t>(r - q * ix.dims[d].divisor);
      io += c * ix.in_strides[d];
      oo += c * ix.out_strides[d];
      r = q;
    }
    out[oo] = in[io];
  }
}

template <typename E>
__global__ void copy_kernel(const E* __restrict__ in, E* __restrict__ out, CopyIndex ix) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < ix.numel;
       i += stride) {
    int64_t r = i, io = ix.in_base, oo = ix.out_base;
    for (int d = ix.rank - 1; d >= 0; --d) {
      const int64_t q = r / ix.dims[d];
      const int64_t c = r - q * ix.dims[d];
      io += c * ix.in_strides[d];
      oo += c * ix.out_strides[d];
      r = q;
    }
    out[oo] = in[io];
  }
}

constexpr int kTile = 32;

template <typename E>
__global__ void transpose_tiled_kernel(const E* __restrict__ in, E* __restrict__ out, int64_t batch,
                                       int64_t rows, int64_t cols) {
  __shared__ E tile[kTile][kTile + 1];  // +1: no bank conflicts on the transposed read
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile,
                c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const E* ib = in + b * rows * cols;
    E* ob = out + b * rows * cols;
    for (int y = threadIdx.y; y < kTile; y += blockDim.y) {
      const int64_t r = r0 + y, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[y][threadIdx.x] = ib[r * cols + c];
    }
    __syncthreads();
    for (int y = threadIdx.y; y < kTile; y += blockDim.y) {
      const int64_t c = c0 + y, r = r0 + threadIdx.x;
      if (c < cols && r < rows) ob[c * rows + r] = tile[threadIdx.x][y];
    }
    __syncthreads();
  }
}

// 16-bit elements (the fp16/bf16 NCHW<->NHWC transposes of channels-last regions):
// 64x64 tiles, each thread moving two adjacent elements as one 32-bit word on both
// the read and the write side (the 32x32 kernel above moves 2 bytes per access and
// reached about a third of HBM bandwidth on an H200). Needs even rows and cols and
// 4-byte aligned pointers.
constexpr int kTile2 = 64;

__global__ void transpose_tiled_kernel_x2(const uint16_t* __restrict__ in,
                                          uint16_t* __restrict__ out, int64_t batch, int64_t rows,
                                          int64_t cols) {
  __shared__ uint16_t tile[kTile2][kTile2 + 2];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile2,
                c0 = static_cast<int64_t>(blockIdx.x) * kTile2;
  const int tx = threadIdx.x, ty = threadIdx.y;  // 32 x 8
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const uint16_t* ib = in + b * rows * cols;
    uint16_t* ob = out + b * rows * cols;
    for (int y = ty; y < kTile2; y += 8) {
      const int64_t r = r0 + y, c = c0 + 2 * tx;
      if (r < rows && c < cols) {
        const uint32_t v = *reinterpret_cast<const uint32_t*>(ib + r * cols + c);
        tile[y][2 * tx] = static_cast<uint16_t>(v & 0xffffu);
        tile[y][2 * tx + 1] = static_cast<uint16_t>(v >> 16);
      }
    }
    __syncthreads();
    for (int y = ty; y < kTile2; y += 8) {
      const int64_t c = c0 + y, r = r0 + 2 * tx;
      if (c < cols && r < rows) {
        const uint32_t v = static_cast<uint32_t>(tile[2 * tx][y]) |
                           (static_cast<uint32_t>(tile[2 * tx + 1][y]) << 16);
        *reinterpret_cast<uint32_t*>(ob + c * rows + r) = v;
      }
    }
    __syncthreads();
  }
}

}  // namespace

namespace {

// The widest unit (bytes, a multiple of elem, at most 16) that the copy can move
// per thread: the innermost dimension contiguous on both sides, its length, every
// other stride, both bases and both pointers multiples of it. elem when none is wider.
std::size_t copy_unit(std::size_t elem, const CopyIndex& ix, const void* in, const void* out) {
  const int last = ix.rank - 1;
  if (last < 0 || ix.in_strides[last] != 1 || ix.out_strides[last] != 1) return elem;
  for (std::size_t unit = 16; unit > elem; unit /= 2) {
    if (unit % elem != 0) continue;
    const auto w = static_cast<int64_t>(unit / elem);
    bool ok = ix.dims[last] % w == 0 && ix.in_base % w == 0 && ix.out_base % w == 0 &&
              reinterpret_cast<uintptr_t>(in) % unit == 0 &&
              reinterpret_cast<uintptr_t>(out) % unit == 0;
    for (int d = 0; ok && d < last; ++d)
      ok = ix.in_strides[d] % w == 0 && ix.out_strides[d] % w == 0;
    if (ok) return unit;
  }
  return elem;
}

// ix re-expressed in units of `unit` bytes (unit a multiple of elem that copy_unit chose).
CopyIndex in_units(const CopyIndex& ix, std::size_t elem, std::size_t unit) {
  const auto w = static_cast<int64_t>(unit / elem);
  if (w == 1) return ix;
  CopyIndex u = ix;
  const int last = ix.rank - 1;
  u.dims[last] = ix.dims[last] / w;
  for (int d = 0; d < last; ++d) {
    u.in_strides[d] = ix.in_strides[d] / w;
    u.out_strides[d] = ix.out_strides[d] / w;
  }
  u.in_base = ix.in_base / w;
  u.out_base = ix.out_base / w;
  u.numel = ix.numel / w;
  return u;
}

template <typename E>
void copy_typed(const CopyIndex& ix, const void* in, void* out, cudaStream_t s) {
  const auto* pi = static_cast<const E*>(in);
  auto* po = static_cast<E*>(out);
  if (fits_int32(ix.rank, ix.numel, ix.dims, {ix.in_strides, ix.out_strides},
                 {ix.in_base, ix.out_base})) {
    CopyIndex32 x;
    x.rank = ix.rank;
    x.numel = static_cast<uint32_t>(ix.numel);
    for (int d = 0; d < ix.rank; ++d) {
      x.dims[d] = make_fast_divisor(static_cast<uint32_t>(ix.dims[d]));
      x.in_strides[d] = static_cast<int32_t>(ix.in_strides[d]);
      x.out_strides[d] = static_cast<int32_t>(ix.out_strides[d]);
    }
    x.in_base = static_cast<int32_t>(ix.in_base);
    x.out_base = static_cast<int32_t>(ix.out_base);
    copy32_kernel<E><<<grid_for(ix.numel, 256), 256, 0, s>>>(pi, po, x);
  } else {
    copy_kernel<E><<<grid_for(ix.numel, 256), 256, 0, s>>>(pi, po, ix);
  }
  XRT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_copy(std::size_t elem, const CopyIndex& ix, const void* in, void* out, void* stream) {
  if (ix.numel <= 0) return;
  cudaStream_t s = as_stream(stream);
  const std::size_t unit = copy_unit(elem, ix, in, out);
  const CopyIndex u = in_units(ix, elem, unit);
  if (unit == 16) return copy_typed<Bytes16>(u, in, out, s);
  visit_elem_size(unit, "copy",
                  [&](auto tag) { copy_typed<typename decltype(tag)::type>(u, in, out, s); });
}

void launch_transpose_tiled(std::size_t elem, int64_t batch, int64_t rows, int64_t cols,
                            const void* in, void* out, void* stream) {
  if (batch * rows * cols <= 0) return;
  XRT_CHECK((cols + kTile - 1) / kTile < (int64_t{1} << 31) && (rows + kTile - 1) / kTile < 65536,
            InvalidArgumentError, "Transpose: ", rows, " x ", cols,
            " is too large for the tiled kernel");
  const bool pairs = elem == 2 && rows % 2 == 0 && cols % 2 == 0 &&
                     reinterpret_cast<uintptr_t>(in) % 4 == 0 &&
                     reinterpret_cast<uintptr_t>(out) % 4 == 0;
  if (pairs) {
    const dim3 grid(static_cast<unsigned>((cols + kTile2 - 1) / kTile2),
                    static_cast<unsigned>((rows + kTile2 - 1) / kTile2),
                    static_cast<unsigned>(batch < 65535 ? batch : 65535));
    transpose_tiled_kernel_x2<<<grid, dim3(32, 8), 0, as_stream(stream)>>>(
        static_cast<const uint16_t*>(in), static_cast<uint16_t*>(out), batch, rows, cols);
    XRT_CUDA_LAUNCH_CHECK();
    return;
  }
  visit_elem_size(elem, "Transpose", [&](auto tag) {
    using E = typename decltype(tag)::type;
    const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                    static_cast<unsigned>((rows + kTile - 1) / kTile),
                    static_cast<unsigned>(batch < 65535 ? batch : 65535));
    transpose_tiled_kernel<E><<<grid, dim3(kTile, 8), 0, as_stream(stream)>>>(
        static_cast<const E*>(in), static_cast<E*>(out), batch, rows, cols);
    XRT_CUDA_LAUNCH_CHECK();
  });
}

namespace {

// One launch of a Concat: blockIdx.y picks the input; its units (E-sized pieces of
// its rows) are walked by a grid-stride loop, each written at its row's column
// offset. Reads are dense per input, writes dense within each row segment.
struct ConcatArgs {
  const void* in[kConcatMaxInputs];
  FastDivisor width[kConcatMaxInputs];  // units per row of input k
  uint32_t col[kConcatMaxInputs];       // its first column (units) in the output row
  uint32_t units[kConcatMaxInputs];     // its units in all
  uint32_t out_width;                   // units per output row
};

template <typename E>
__global__ void concat_kernel(ConcatArgs a, E* __restrict__ out) {
  const int k = blockIdx.y;
  const E* __restrict__ in = static_cast<const E*>(a.in[k]);
  const uint32_t n = a.units[k], col = a.col[k], w = a.width[k].divisor;
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t row = fast_div(a.width[k], i);
    out[static_cast<uint64_t>(row) * a.out_width + col + (i - row * w)] = in[i];
  }
}

template <typename E>
void launch_concat_units(const ConcatArgs& a, int count, uint32_t max_units, void* out,
                         cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>(std::min<uint32_t>((max_units + 255) / 256, 4096));
  concat_kernel<E><<<dim3(blocks, static_cast<unsigned>(count)), 256, 0, s>>>(a, static_cast<E*>(out));
  XRT_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool launch_concat(int count, const void* const* inputs, const int64_t* width_bytes,
                   const int64_t* col_bytes, int64_t rows, int64_t out_row_bytes, void* out,
                   void* stream) {
  if (count <= 0 || count > kConcatMaxInputs || rows <= 0) return false;
  // The widest unit (16, 8, 4, 2 or 1 bytes) that divides every width and offset and
  // to which every pointer is aligned.
  uint64_t bits = static_cast<uint64_t>(out_row_bytes) | reinterpret_cast<uintptr_t>(out);
  for (int k = 0; k < count; ++k)
    bits |= static_cast<uint64_t>(width_bytes[k]) | static_cast<uint64_t>(col_bytes[k]) |
            reinterpret_cast<uintptr_t>(inputs[k]);
  int64_t unit = 16;
  while (unit > 1 && bits % static_cast<uint64_t>(unit) != 0) unit /= 2;
  const int64_t out_width = out_row_bytes / unit;
  if (rows * out_width >= (int64_t{1} << 31)) return false;
  ConcatArgs a{};
  uint32_t max_units = 0;
  for (int k = 0; k < count; ++k) {
    const int64_t w = width_bytes[k] / unit;
    a.in[k] = inputs[k];
    a.width[k] = make_fast_divisor(static_cast<uint32_t>(w));
    a.col[k] = static_cast<uint32_t>(col_bytes[k] / unit);
    a.units[k] = static_cast<uint32_t>(rows * w);
    max_units = std::max(max_units, a.units[k]);
  }
  a.out_width = static_cast<uint32_t>(out_width);
  if (max_units == 0) return true;
  cudaStream_t s = as_stream(stream);
  switch (unit) {
    case 16:
      launch_concat_units<Bytes16>(a, count, max_units, out, s);
      break;
    case 8:
      launch_concat_units<uint64_t>(a, count, max_units, out, s);
      break;
    case 4:
      launch_concat_units<uint32_t>(a, count, max_units, out, s);
      break;
    case 2:
      launch_concat_units<uint16_t>(a, count, max_units, out, s);
      break;
    default:
      launch_concat_units<uint8_t>(a, count, max_units, out, s);
  }
  return true;
}

}  // namespace xpuruntime::cuda_ops
