// Registry kernels of the index ops: GatherND (batch_dims), ScatterND and
// ScatterElements (reduction none, add, mul, max, min), int32 or int64 indices.
//
// An out-of-range index is an InvalidArgumentError naming the node, the index
// and the axis, as on the CPU. Indices that are plan constants are checked on
// the host (once for the prepared shapes); indices computed at run time are
// checked by the kernel, which records the first bad one in the step's
// workspace and never follows it; the record is read back after the launch (a
// synchronizing 24-byte copy). Inside a CUDA graph capture that read is
// impossible: a replayed step still touches no memory outside its tensors
// (GatherND gives zeros, the scatters skip the update) but cannot raise.
#include "backends/cuda/kernels/data/index_kernels.h"

#include <cuda_runtime_api.h>

#include <memory>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/common/shape_cache.h"
#include "backends/cuda/kernels/data/index_impl.h"
#include "xpuruntime/error.h"

namespace xpuruntime::cuda_ops {
namespace {

using ops::ScatterReduction;
using HostIndices = std::shared_ptr<const std::vector<int64_t>>;

// The workspace holding the kernel's IndexError record (rounded up for
// alignment).
constexpr std::size_t kErrorBytes = 256;

[[noreturn]] void throw_bad_index(const IndexError& e, const std::string& what) {
  XRT_THROW(InvalidArgumentError, what, ": index ", e.index, " is out of range for axis ", e.axis,
            " of size ", e.dim, "; indices must lie in [-size, size)");
}

// Checks a value from constant indices on the host, recording the first bad
// one.
void check_host(int64_t v, int64_t dim, int axis, IndexError& bad) {
  if ((v < -dim || v >= dim) && bad.flag == 0) bad = IndexError{1, axis, v, dim};
}

// Zeroes the record before the launch (nullptr when the indices are checked on
// the host).
IndexError* error_record(const KernelArgs& a, bool host_checked, const std::string& what) {
  if (host_checked) return nullptr;
  XRT_CHECK(a.workspace != nullptr && a.workspace_bytes >= sizeof(IndexError), InvalidArgumentError,
            what, ": needs ", kErrorBytes, " bytes of workspace for its index check, got ",
            a.workspace_bytes);
  XRT_CUDA_CHECK(
      cudaMemsetAsync(a.workspace, 0, sizeof(IndexError), static_cast<cudaStream_t>(a.stream)));
  return static_cast<IndexError*>(a.workspace);
}

// Reads the record back after the launch and raises what the kernel found.
void raise_recorded(const IndexError* dev, const std::string& what, void* stream) {
  if (dev == nullptr) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  XRT_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;  // see the file comment
  IndexError h;
  XRT_CUDA_CHECK(cudaMemcpyAsync(&h, dev, sizeof(h), cudaMemcpyDeviceToHost, s));
  XRT_CUDA_CHECK(cudaStreamSynchronize(s));
  if (h.flag != 0) throw_bad_index(h, what);
}

// The constant indices as host integers (null when computed at run time).
HostIndices host_indices(const PrepareContext& pc) {
  const graph::HostTensor* t = constant_input(pc, 1);
  return t != nullptr ? std::make_shared<const std::vector<int64_t>>(t->to_ints()) : nullptr;
}

int64_t product(const Shape& s, std::size_t begin, std::size_t end) {
  int64_t p = 1;
  for (std::size_t i = begin; i < end && i < s.size(); ++i) p *= s[i];
  return p;
}

Support index_basics(const OpContext& ctx, std::size_t inputs) {
  Support s = first_refusal({require_arity(ctx, inputs), require_dense(ctx),
                             require_dtype(ctx, 1, kIndexTypes, "indices")});
  if (!s.ok) return s;
  const std::size_t e = dtype_size(ctx.inputs[0].dtype);
  if (e != 1 && e != 2 && e != 4 && e != 8)
    return Support::no(reason::kDtypeUnsupported,
                       "element size " + std::to_string(e) + " bytes is not 1, 2, 4 or 8");
  if (ctx.inputs[0].shape.size() > static_cast<std::size_t>(kMaxIndexRank) ||
      ctx.inputs[1].shape.size() > static_cast<std::size_t>(kMaxIndexRank))
    return Support::no(reason::kShapeUnsupported,
                       "data or indices of rank above " + std::to_string(kMaxIndexRank));
  return Support::yes();
}

// The reductions other than none compute: numeric dtypes only (bool has no
// sum).
Support reduction_dtype(const OpContext& ctx) {
  const auto it = ctx.attrs.find("reduction");
  if (it == ctx.attrs.end() || it->second == "none") return Support::yes();
  return require_dtype(ctx, 0, kNumericTypes, "data");
}

// ---- GatherND ----
struct NDPlan {
  NDIndex ix;
  IndexError bad;  // the first bad constant index for these shapes (flag 0: none)
};

NDPlan gather_nd_plan(const Shape& ds, const Shape& is, int64_t b, const HostIndices& host,
                      const std::string& what) {
  const int64_t r = static_cast<int64_t>(ds.size()), q = static_cast<int64_t>(is.size());
  XRT_CHECK(q >= 1 && b >= 0 && b < std::min(r, q) && is.back() >= 1 && is.back() <= r - b,
            InvalidArgumentError, what, ": data ", graph::shape_str(ds), " and indices ",
            graph::shape_str(is), " do not fit batch_dims ", b);
  for (int64_t i = 0; i < b; ++i)
    XRT_CHECK(ds[i] == is[i], InvalidArgumentError, what, ": batch dimension ", i, " of data ",
              graph::shape_str(ds), " and indices ", graph::shape_str(is), " differ");
  NDPlan p;
  NDIndex& ix = p.ix;
  const std::vector<int64_t> st = dense_strides(ds);
  ix.last = static_cast<int>(is.back());
  ix.first_axis = static_cast<int>(b);
  ix.per_batch = std::max<int64_t>(1, product(is, static_cast<std::size_t>(b), is.size() - 1));
  ix.tuples = product(is, 0, is.size() - 1);
  ix.batch_stride = b > 0 ? st[static_cast<std::size_t>(b - 1)] : 0;
  ix.inner = product(ds, static_cast<std::size_t>(b + ix.last), ds.size());
  for (int k = 0; k < ix.last; ++k) {
    ix.dims[k] = ds[static_cast<std::size_t>(b + k)];
    ix.strides[k] = st[static_cast<std::size_t>(b + k)];
  }
  if (host) {
    for (int64_t t = 0; t < ix.tuples && p.bad.flag == 0; ++t)
      for (int k = 0; k < ix.last; ++k)
        check_host((*host)[static_cast<std::size_t>(t * ix.last + k)], ix.dims[k],
                   ix.first_axis + k, p.bad);
  }
  return p;
}

void add_gather_nd(KernelRegistry& r) {
  add_kernel(
      r, "gathernd", {},
      "GatherND (batch_dims; int32/int64 indices, negatives; an out-of-range "
      "index is an "
      "InvalidArgumentError)",
      [](const OpContext& ctx) { return index_basics(ctx, 2); },
      [](const PrepareContext& pc) {
        const int64_t b = ops::GatherNDAttrs::from_node(*pc.node).batch_dims;
        const std::string what = where(pc);
        const HostIndices host = host_indices(pc);
        ShapeCached<NDPlan> plan({pc.ctx->inputs[0].shape, pc.ctx->inputs[1].shape},
                                 [b, host, what](const std::vector<Shape>& s) {
                                   return gather_nd_plan(s[0], s[1], b, host, what);
                                 });
        return make_prepared(
            [plan, host, what](const KernelArgs& a) {
              const NDPlan p = plan.get({a.inputs[0].shape, a.inputs[1].shape});
              if (p.bad.flag != 0) throw_bad_index(p.bad, what);
              if (p.ix.tuples * p.ix.inner == 0) return;
              IndexError* err = error_record(a, host != nullptr, what);
              launch_gather_nd(dtype_size(a.inputs[0].dtype), p.ix, a.inputs[0].data,
                               a.inputs[1].dtype, a.inputs[1].data, a.outputs[0].data, err,
                               a.stream);
              raise_recorded(err, what, a.stream);
            },
            host ? 0 : kErrorBytes);
      });
}

// ---- ScatterND, ScatterElements ----

// out = data (unless the executor already gave the data's buffer as out).
void copy_data(const KernelArgs& a) {
  if (a.outputs[0].data == a.inputs[0].data || a.inputs[0].nbytes() == 0) return;
  XRT_CUDA_CHECK(cudaMemcpyAsync(a.outputs[0].data, a.inputs[0].data, a.inputs[0].nbytes(),
                                 cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(a.stream)));
}

NDPlan scatter_nd_plan(const Shape& ds, const Shape& is, const Shape& us, const HostIndices& host,
                       const std::string& what) {
  XRT_CHECK(!is.empty() && is.back() >= 1 && is.back() <= static_cast<int64_t>(ds.size()),
            InvalidArgumentError, what, ": indices ", graph::shape_str(is),
            " need a last dimension in [1, data rank ", ds.size(), "]");
  Shape want(is.begin(), is.end() - 1);
  want.insert(want.end(), ds.begin() + is.back(), ds.end());
  XRT_CHECK(us == want, InvalidArgumentError, what, ": updates ", graph::shape_str(us),
            " must have shape ", graph::shape_str(want));
  NDPlan p;
  NDIndex& ix = p.ix;
  const std::vector<int64_t> st = dense_strides(ds);
  ix.last = static_cast<int>(is.back());
  ix.tuples = product(is, 0, is.size() - 1);
  ix.inner = product(ds, static_cast<std::size_t>(ix.last), ds.size());
  for (int k = 0; k < ix.last; ++k) {
    ix.dims[k] = ds[static_cast<std::size_t>(k)];
    ix.strides[k] = st[static_cast<std::size_t>(k)];
  }
  if (host) {
    for (int64_t t = 0; t < ix.tuples && p.bad.flag == 0; ++t)
      for (int k = 0; k < ix.last; ++k)
        check_host((*host)[static_cast<std::size_t>(t * ix.last + k)], ix.dims[k], k, p.bad);
  }
  return p;
}

struct ElementsPlan {
  ElementsScatterIndex ix;
  IndexError bad;
};

ElementsPlan scatter_elements_plan(const Shape& ds, const Shape& is, const Shape& us,
                                   int64_t axis_attr, const HostIndices& host,
                                   const std::string& what) {
  const int64_t r = static_cast<int64_t>(ds.size());
  XRT_CHECK(r >= 1 && is.size() == ds.size() && us == is, InvalidArgumentError, what, ": data ",
            graph::shape_str(ds), ", indices ", graph::shape_str(is), " and updates ",
            graph::shape_str(us), " must have one rank >= 1, and indices and updates one shape");
  const int64_t axis = axis_attr < 0 ? axis_attr + r : axis_attr;
  XRT_CHECK(axis >= 0 && axis < r, InvalidArgumentError, what, ": axis ", axis_attr,
            " is out of range for rank ", r);
  for (int64_t d = 0; d < r; ++d)
    XRT_CHECK(d == axis || is[static_cast<std::size_t>(d)] <= ds[static_cast<std::size_t>(d)],
              InvalidArgumentError, what, ": indices ", graph::shape_str(is), " exceed data ",
              graph::shape_str(ds), " outside axis ", axis);
  ElementsPlan p;
  ElementsScatterIndex& ix = p.ix;
  const std::vector<int64_t> dst = dense_strides(ds), ist = dense_strides(is);
  ix.rank = static_cast<int>(r);
  ix.axis = static_cast<int>(axis);
  ix.axis_len = ds[static_cast<std::size_t>(axis)];
  const int64_t count = is[static_cast<std::size_t>(axis)];
  ix.lines = count > 0 ? graph::shape_numel(is) / count : 0;
  for (int64_t d = 0; d < r; ++d) {
    ix.dims[d] = is[static_cast<std::size_t>(d)];
    ix.data_strides[d] = dst[static_cast<std::size_t>(d)];
    ix.index_strides[d] = ist[static_cast<std::size_t>(d)];
  }
  if (host) {
    for (const int64_t v : *host) {
      check_host(v, ix.axis_len, ix.axis, p.bad);
      if (p.bad.flag != 0) break;
    }
  }
  return p;
}

void add_scatters(KernelRegistry& r) {
  add_kernel(
      r, "scatternd", {},
      "ScatterND (reduction none/add/mul/max/min; updates applied in index "
      "order, duplicates as "
      "on the CPU; one thread per slice element)",
      [](const OpContext& ctx) {
        return first_refusal({index_basics(ctx, 3), reduction_dtype(ctx)});
      },
      [](const PrepareContext& pc) {
        const ScatterReduction red = ops::ScatterAttrs::from_node(*pc.node).reduction;
        const std::string what = where(pc);
        const HostIndices host = host_indices(pc);
        ShapeCached<NDPlan> plan(
            {pc.ctx->inputs[0].shape, pc.ctx->inputs[1].shape, pc.ctx->inputs[2].shape},
            [host, what](const std::vector<Shape>& s) {
              return scatter_nd_plan(s[0], s[1], s[2], host, what);
            });
        return make_prepared(
            [plan, red, host, what](const KernelArgs& a) {
              const NDPlan p = plan.get({a.inputs[0].shape, a.inputs[1].shape, a.inputs[2].shape});
              if (p.bad.flag != 0) throw_bad_index(p.bad, what);
              copy_data(a);
              if (p.ix.tuples * p.ix.inner == 0) return;
              IndexError* err = error_record(a, host != nullptr, what);
              launch_scatter_nd(a.inputs[0].dtype, red, p.ix, a.inputs[1].data, a.inputs[1].dtype,
                                a.inputs[2].data, a.outputs[0].data, err, a.stream);
              raise_recorded(err, what, a.stream);
            },
            host ? 0 : kErrorBytes);
      });
  add_kernel(
      r, "scatterelements", {},
      "ScatterElements along one axis (reduction none/add/mul/max/min; updates "
      "applied in index "
      "order, duplicates as on the CPU; one thread per line along the axis)",
      [](const OpContext& ctx) {
        return first_refusal({index_basics(ctx, 3), reduction_dtype(ctx)});
      },
      [](const PrepareContext& pc) {
        const ops::ScatterAttrs attrs = ops::ScatterAttrs::from_node(*pc.node);
        const int64_t axis = attrs.axis;
        const ScatterReduction red = attrs.reduction;
        const std::string what = where(pc);
        const HostIndices host = host_indices(pc);
        ShapeCached<ElementsPlan> plan(
            {pc.ctx->inputs[0].shape, pc.ctx->inputs[1].shape, pc.ctx->inputs[2].shape},
            [axis, host, what](const std::vector<Shape>& s) {
              return scatter_elements_plan(s[0], s[1], s[2], axis, host, what);
            });
        return make_prepared(
            [plan, red, host, what](const KernelArgs& a) {
              const ElementsPlan p =
                  plan.get({a.inputs[0].shape, a.inputs[1].shape, a.inputs[2].shape});
              if (p.bad.flag != 0) throw_bad_index(p.bad, what);
              copy_data(a);
              if (p.ix.lines == 0) return;
              IndexError* err = error_record(a, host != nullptr, what);
              launch_scatter_elements(a.inputs[0].dtype, red, p.ix, a.inputs[1].data,
                                      a.inputs[1].dtype, a.inputs[2].data, a.outputs[0].data, err,
                                      a.stream);
              raise_recorded(err, what, a.stream);
            },
            host ? 0 : kErrorBytes);
      });
}

}  // namespace

void register_index_kernels(KernelRegistry& registry) {
  add_gather_nd(registry);
  add_scatters(registry);
}

}  // namespace xpuruntime::cuda_ops
