// The few oneDNN calls whose spelling changed between 2.x (Debian's libdnnl-dev 2.6)
// and 3.x (PyPI's onednn-cpu-gomp, a source build): 3.0 dropped the operation
// descriptors (a primitive descriptor is built from the engine and the memory
// descriptors directly), the eltwise post-op's scale and memory::desc::dims().
// Everything else the kernels use is the same in both.
#pragma once

#ifdef XRT_HAVE_ONEDNN
#include <dnnl.hpp>

namespace xpuruntime::cpu::onednn {

inline constexpr bool kOnednn3 = DNNL_VERSION_MAJOR >= 3;

inline void append_eltwise(dnnl::post_ops& po, dnnl::algorithm alg, float alpha, float beta) {
#if DNNL_VERSION_MAJOR >= 3
  po.append_eltwise(alg, alpha, beta);
#else
  po.append_eltwise(1.f, alg, alpha, beta);
#endif
}

inline dnnl::memory::dims dims_of(const dnnl::memory::desc& md) {
#if DNNL_VERSION_MAJOR >= 3
  return md.get_dims();
#else
  return md.dims();
#endif
}

// Forward-inference direct convolution; `bias` null: none.
inline dnnl::convolution_forward::primitive_desc conv_pd(
    const dnnl::memory::desc& x, const dnnl::memory::desc& w, const dnnl::memory::desc* bias,
    const dnnl::memory::desc& y, const dnnl::memory::dims& strides, const dnnl::memory::dims& dil,
    const dnnl::memory::dims& pl, const dnnl::memory::dims& pr, const dnnl::primitive_attr& attr,
    const dnnl::engine& eng) {
  const auto fwd = dnnl::prop_kind::forward_inference;
  const auto alg = dnnl::algorithm::convolution_direct;
#if DNNL_VERSION_MAJOR >= 3
  if (bias) return {eng, fwd, alg, x, w, *bias, y, strides, dil, pl, pr, attr};
  return {eng, fwd, alg, x, w, y, strides, dil, pl, pr, attr};
#else
  if (bias) return {dnnl::convolution_forward::desc(fwd, alg, x, w, *bias, y, strides, dil, pl, pr), attr, eng};
  return {dnnl::convolution_forward::desc(fwd, alg, x, w, y, strides, dil, pl, pr), attr, eng};
#endif
}

// C = A·B (+ bias); `bias` null: none.
inline dnnl::matmul::primitive_desc matmul_pd(const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                                              const dnnl::memory::desc* bias, const dnnl::memory::desc& c,
                                              const dnnl::primitive_attr& attr, const dnnl::engine& eng) {
#if DNNL_VERSION_MAJOR >= 3
  if (bias) return {eng, a, b, *bias, c, attr};
  return {eng, a, b, c, attr};
#else
  if (bias) return {dnnl::matmul::desc(a, b, *bias, c), attr, eng};
  return {dnnl::matmul::desc(a, b, c), attr, eng};
#endif
}

}  // namespace xpuruntime::cpu::onednn

#endif
