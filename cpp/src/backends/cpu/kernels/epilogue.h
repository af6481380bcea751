// Epilogues the compiler fuses into Conv/MatMul/Gemm, as the CPU kernels apply
// them; what a node's epilogue is comes from ops::Epilogue
// (xpuruntime/ops/epilogue.h), the one reader of its attributes.
#pragma once

#include "backends/cpu/kernels/elementwise.h"
#include "xpuruntime/ops/epilogue.h"

namespace xpuruntime::cpu {

// Applies an epilogue's activation to y in place (no-op without one).
inline void apply_activation(const ops::Epilogue& e, TensorView& y) {
  if (e.has_activation()) run_unary(e.activation, e.params, y.dtype, y.data, y.data, y.numel());
}

// y[..., j] += bias[j] over the last dimension.
inline void add_row_bias(TensorView& y, const TensorView& bias) {
  const int64_t nn = bias.numel();
  if (nn == 0) return;
  const int64_t rows = y.numel() / nn;
  visit_dtype(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    using N = Num<T>;
    T* py = y.ptr<T>();
    const T* pb = bias.ptr<const T>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < nn; ++j)
        py[r * nn + j] = N::store(static_cast<typename N::C>(N::load(py[r * nn + j]) + N::load(pb[j])));
  });
}

}  // namespace xpuruntime::cpu
