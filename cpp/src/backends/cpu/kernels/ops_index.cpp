// The index ops on the CPU: GatherND, ScatterND, ScatterElements, every dtype.
// Indices may be negative (counted from the end); one out of range is an
// InvalidArgumentError naming the node, the index and the dimension.
#include <cstring>

#include "backends/cpu/kernels/cpu_op.h"
#include "backends/cpu/kernels/parallel.h"
#include "xpuruntime/ops/index.h"

namespace xpuruntime::cpu {
namespace {

using ops::ScatterReduction;

OpDef make(const std::string& type) {
  OpDef d;
  d.op_type = type;
  d.kernel = "cpu";
  return d;
}

// Row-major strides of a shape, in elements.
Shape strides_of(const Shape& s) {
  Shape st(s.size(), 1);
  for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

int64_t checked_index(const Node& n, int64_t i, int64_t dim, int64_t axis) {
  XRT_CHECK(i >= -dim && i < dim, InvalidArgumentError, n.where(), ": index ", i,
            " is out of range for axis ", axis, " of size ", dim);
  return i < 0 ? i + dim : i;
}

// dst[i] = reduce(dst[i], src[i]) over `count` elements of T.
template <typename T>
void combine(ScatterReduction r, T* dst, const T* src, int64_t count) {
  using N = Num<T>;
  using C = typename N::C;
  for (int64_t i = 0; i < count; ++i) {
    const C a = N::load(dst[i]), b = N::load(src[i]);
    C v = b;
    switch (r) {
      case ScatterReduction::kNone:
        break;
      case ScatterReduction::kAdd:
        v = static_cast<C>(a + b);
        break;
      case ScatterReduction::kMul:
        v = static_cast<C>(a * b);
        break;
      case ScatterReduction::kMax:
        v = a < b ? b : a;
        break;
      case ScatterReduction::kMin:
        v = b < a ? b : a;
        break;
    }
    dst[i] = N::store(v);
  }
}

void gather_nd(const ops::GatherNDAttrs& a, const Node& n, const std::vector<TensorView>& in,
               std::vector<TensorView>& out) {
  const Shape& ds = in[0].shape;
  const Shape& is = in[1].shape;
  const int64_t b = a.batch_dims, last = is.back();
  const Shape dst = strides_of(ds);
  int64_t batches = 1, per_batch = 1, inner = 1;
  for (int64_t i = 0; i < b; ++i) batches *= ds[i];
  for (std::size_t i = b; i + 1 < is.size(); ++i) per_batch *= is[i];
  for (std::size_t i = b + last; i < ds.size(); ++i) inner *= ds[i];
  const int64_t batch_stride = b > 0 ? dst[b - 1] : 0;
  const std::vector<int64_t> idx = in[1].ints();
  const std::size_t es = dtype_size(in[0].dtype);
  const char* src = static_cast<const char*>(in[0].data);
  char* y = static_cast<char*>(out[0].data);
  const int64_t tuples = batches * per_batch;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = (t / per_batch) * batch_stride;
    for (int64_t k = 0; k < last; ++k)
      off += checked_index(n, idx[t * last + k], ds[b + k], b + k) * dst[b + k];
    if (inner) std::memcpy(y + t * inner * es, src + off * es, inner * es);
  }
}

void scatter_nd(const ops::ScatterAttrs& a, const Node& n, const std::vector<TensorView>& in,
                std::vector<TensorView>& out) {
  const Shape& ds = in[0].shape;
  const Shape& is = in[1].shape;
  const int64_t last = is.back();
  const Shape dst = strides_of(ds);
  int64_t tuples = 1, inner = 1;
  for (std::size_t i = 0; i + 1 < is.size(); ++i) tuples *= is[i];
  for (std::size_t i = last; i < ds.size(); ++i) inner *= ds[i];
  const std::vector<int64_t> idx = in[1].ints();
  if (out[0].data != in[0].data) std::memcpy(out[0].data, in[0].data, in[0].nbytes());
  visit_dtype(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    T* y = out[0].ptr<T>();
    const T* u = in[2].ptr<const T>();
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = 0;
      for (int64_t k = 0; k < last; ++k)
        off += checked_index(n, idx[t * last + k], ds[k], k) * dst[k];
      combine<T>(a.reduction, y + off, u + t * inner, inner);
    }
  });
}

void scatter_elements(const ops::ScatterAttrs& a, const Node& n, const std::vector<TensorView>& in,
                      std::vector<TensorView>& out) {
  const Shape& ds = in[0].shape;
  const Shape& is = in[1].shape;
  const int64_t r = in[0].rank();
  const int64_t axis = norm_axis(n, a.axis, r);
  const Shape dst = strides_of(ds);
  const std::vector<int64_t> idx = in[1].ints();
  if (out[0].data != in[0].data) std::memcpy(out[0].data, in[0].data, in[0].nbytes());
  visit_dtype(in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    T* y = out[0].ptr<T>();
    const T* u = in[2].ptr<const T>();
    const int64_t total = in[1].numel();
    for (int64_t e = 0; e < total; ++e) {
      int64_t rem = e, off = 0;
      for (int64_t i = r - 1; i >= 0; --i) {
        const int64_t c = rem % is[i];
        rem /= is[i];
        off += (i == axis ? checked_index(n, idx[e], ds[axis], axis) : c) * dst[i];
      }
      combine<T>(a.reduction, y + off, u + e, 1);
    }
  });
}

}  // namespace

void register_index_ops(std::vector<OpDef>& defs) {
  {
    OpDef d = make("GatherND");
    set_parsed_body<ops::GatherNDAttrs>(d, gather_nd);
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("ScatterND");
    set_parsed_body<ops::ScatterAttrs>(d, scatter_nd);
    defs.push_back(std::move(d));
  }
  {
    OpDef d = make("ScatterElements");
    set_parsed_body<ops::ScatterAttrs>(d, scatter_elements);
    defs.push_back(std::move(d));
  }
}

}  // namespace xpuruntime::cpu
