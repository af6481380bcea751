// Registry kernels of the data-movement ops: Transpose (tiled when the last two
// dims swap), Slice, Expand, Tile, Concat, Split, Identity (strided copies),
// Gather, GatherElements, Pad, Trilu, Range. Byte-generic: any dtype of 1, 2, 4 or
// 8 bytes. Values the kernels need on the host (Slice starts/steps, Pad pads,
// Trilu k) are read once when they are plan constants, else copied from the device
// per run (IntsInput); output shapes come from the executor.
#include "backends/cuda/kernels/data/data_kernels.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "backends/cuda/kernels/common/op_kernel.h"
#include "backends/cuda/kernels/common/shape_cache.h"
#include "backends/cuda/kernels/data/data_impl.h"
#include "xpuruntime/error.h"

namespace xpuruntime::cuda_ops {
namespace {

std::size_t elem_of(const OpContext& ctx) { return dtype_size(ctx.inputs[0].dtype); }

Support byte_sized(const OpContext& ctx) {
  const std::size_t e = ctx.inputs.empty() ? 4 : elem_of(ctx);
  if (e == 1 || e == 2 || e == 4 || e == 8) return Support::yes();
  return Support::no(reason::kDtypeUnsupported,
                     "element size " + std::to_string(e) + " bytes is not 1, 2, 4 or 8");
}

Support rank_at_most(const OpContext& ctx, std::size_t i, std::size_t r) {
  if (i < ctx.inputs.size() && ctx.inputs[i].shape.size() > r)
    return Support::no(reason::kShapeUnsupported,
                       "input " + std::to_string(i) + " has rank " +
                           std::to_string(ctx.inputs[i].shape.size()) +
                           "; the CUDA kernel takes rank <= " + std::to_string(r));
  return Support::yes();
}

Support basic(const OpContext& ctx, std::size_t inputs) {
  return first_refusal({require_arity(ctx, inputs), require_dense(ctx), byte_sized(ctx)});
}

int64_t norm(int64_t axis, int64_t rank, const std::string& what) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  XRT_CHECK(a >= 0 && a < rank, InvalidModelError, what, ": axis ", axis,
            " is out of range for rank ", rank);
  return a;
}

CopyIndex copy_index(const Shape& dims, const std::vector<int64_t>& in_strides,
                     const std::vector<int64_t>& out_strides, int64_t in_base, int64_t out_base,
                     const std::string& what) {
  CopyIndex ix;
  XRT_CHECK(make_copy_index(dims, in_strides, out_strides, in_base, out_base, ix),
            UnsupportedOperationError, what, ": more than ", kMaxCopyRank,
            " dimensions after collapsing");
  return ix;
}

// ---- Transpose ----
struct TransposePlan {
  CopyIndex ix;
  bool tiled = false;
  int64_t batch = 1, rows = 0, cols = 0;
};

TransposePlan transpose_plan(const Shape& s, std::vector<int64_t> perm, const std::string& what) {
  const int64_t r = static_cast<int64_t>(s.size());
  if (perm.empty())
    for (int64_t d = r - 1; d >= 0; --d) perm.push_back(d);
  XRT_CHECK(static_cast<int64_t>(perm.size()) == r, InvalidModelError, what, ": perm has ",
            perm.size(), " entries for rank ", r);
  const std::vector<int64_t> st = dense_strides(s);
  Shape out;
  std::vector<int64_t> in_strides;
  for (int64_t p : perm) {
    const int64_t d = norm(p, r, what);
    out.push_back(s[static_cast<std::size_t>(d)]);
    in_strides.push_back(st[static_cast<std::size_t>(d)]);
  }
  TransposePlan tp;
  tp.ix = copy_index(out, in_strides, dense_strides(out), 0, 0, what);
  const CopyIndex& ix = tp.ix;
  // Out dims (C, R) reading in [R, C] with strides (1, C): a 2-D transpose; with a
  // leading batch dim (B, C, R) and strides (R*C, 1, C): a batched one.
  if (ix.rank == 2 && ix.in_strides[0] == 1 && ix.in_strides[1] == ix.dims[0]) {
    tp.tiled = true;
    tp.rows = ix.dims[1];
    tp.cols = ix.dims[0];
  } else if (ix.rank == 3 && ix.in_strides[1] == 1 && ix.in_strides[2] == ix.dims[1] &&
             ix.in_strides[0] == ix.dims[1] * ix.dims[2]) {
    tp.tiled = true;
    tp.batch = ix.dims[0];
    tp.rows = ix.dims[2];
    tp.cols = ix.dims[1];
  }
  return tp;
}

void add_transpose(KernelRegistry& r) {
  add_kernel(
      r, "transpose", {},
      "Transpose (any permutation; 32x32 shared-memory tiles when the last two dims swap)",
      [](const OpContext& ctx) { return basic(ctx, 1); },
      [](const PrepareContext& pc) {
        const std::vector<int64_t> perm = pc.node->attr_ints("perm");
        const std::string what = where(pc);
        ShapeCached<TransposePlan> plan(
            {pc.ctx->inputs[0].shape},
            [perm, what](const std::vector<Shape>& s) { return transpose_plan(s[0], perm, what); });
        return make_prepared([plan](const KernelArgs& a) {
          const TransposePlan p = plan.get({a.inputs[0].shape});
          const std::size_t es = dtype_size(a.inputs[0].dtype);
          if (p.tiled)
            launch_transpose_tiled(es, p.batch, p.rows, p.cols, a.inputs[0].data, a.outputs[0].data,
                                   a.stream);
          else
            launch_copy(es, p.ix, a.inputs[0].data, a.outputs[0].data, a.stream);
        });
      });
}

// ---- Slice ----
// The copy reading in[start + i * step] per sliced axis into the dense output
// (whose shape the executor inferred with numpy clamping).
CopyIndex slice_plan(const Shape& in, const Shape& out, const std::vector<int64_t>& starts,
                     const std::vector<int64_t>& axes, const std::vector<int64_t>& steps,
                     const std::string& what) {
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> start(in.size(), 0), step(in.size(), 1);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const int64_t d = norm(i < axes.size() ? axes[i] : static_cast<int64_t>(i), rank, what);
    const int64_t dim = in[static_cast<std::size_t>(d)];
    const int64_t sp = i < steps.size() ? steps[i] : 1;
    XRT_CHECK(sp != 0, InvalidModelError, what, ": step 0");
    int64_t st = starts[i] < 0 ? starts[i] + dim : starts[i];
    st = sp > 0 ? std::clamp<int64_t>(st, 0, dim)
                : std::clamp<int64_t>(st, 0, std::max<int64_t>(dim - 1, 0));
    start[static_cast<std::size_t>(d)] = st;
    step[static_cast<std::size_t>(d)] = sp;
  }
  const std::vector<int64_t> ist = dense_strides(in);
  int64_t base = 0;
  std::vector<int64_t> strides;
  for (std::size_t d = 0; d < in.size(); ++d) {
    base += start[d] * ist[d];
    strides.push_back(step[d] * ist[d]);
  }
  return copy_index(out, strides, dense_strides(out), base, 0, what);
}

void add_slice(KernelRegistry& r) {
  add_kernel(
      r, "slice", {}, "Slice (negative starts and steps, numpy clamping) as one strided copy",
      [](const OpContext& ctx) { return basic(ctx, 1); },
      [](const PrepareContext& pc) {
        const std::string what = where(pc);
        if (pc.node->has("starts")) {  // opset 1: attributes
          const std::vector<int64_t> starts = pc.node->attr_ints("starts");
          const std::vector<int64_t> axes = pc.node->attr_ints("axes");
          ShapeCached<CopyIndex> plan({pc.ctx->inputs[0].shape, pc.ctx->outputs[0].shape},
                                      [starts, axes, what](const std::vector<Shape>& s) {
                                        return slice_plan(s[0], s[1], starts, axes, {}, what);
                                      });
          return make_prepared([plan](const KernelArgs& a) {
            if (a.outputs[0].numel() == 0) return;
            launch_copy(dtype_size(a.inputs[0].dtype),
                        plan.get({a.inputs[0].shape, a.outputs[0].shape}), a.inputs[0].data,
                        a.outputs[0].data, a.stream);
          });
        }
        const IntsInput starts(pc, 1, "starts"), axes(pc, 3, "axes"), steps(pc, 4, "steps");
        if ((!axes.present() || axes.constant()) && (!steps.present() || steps.constant()) &&
            starts.constant()) {
          const KernelArgs none;
          const std::vector<int64_t> st = starts.get(none), ax = axes.get(none),
                                     sp = steps.get(none);
          ShapeCached<CopyIndex> plan({pc.ctx->inputs[0].shape, pc.ctx->outputs[0].shape},
                                      [st, ax, sp, what](const std::vector<Shape>& s) {
                                        return slice_plan(s[0], s[1], st, ax, sp, what);
                                      });
          return make_prepared([plan](const KernelArgs& a) {
            if (a.outputs[0].numel() == 0) return;
            launch_copy(dtype_size(a.inputs[0].dtype),
                        plan.get({a.inputs[0].shape, a.outputs[0].shape}), a.inputs[0].data,
                        a.outputs[0].data, a.stream);
          });
        }
        return make_prepared([starts, axes, steps, what](const KernelArgs& a) {
          if (a.outputs[0].numel() == 0) return;
          launch_copy(dtype_size(a.inputs[0].dtype),
                      slice_plan(a.inputs[0].shape, a.outputs[0].shape, starts.get(a), axes.get(a),
                                 steps.get(a), what),
                      a.inputs[0].data, a.outputs[0].data, a.stream);
        });
      });
}

// ---- Expand, Tile, Identity: one copy each, planned from the input and output shapes ----
CopyIndex expand_plan(const Shape& in, const Shape& out, const std::string& what) {
  const std::vector<int64_t> ist = dense_strides(in);
  std::vector<int64_t> strides(out.size(), 0);
  const std::size_t off = out.size() - std::min(out.size(), in.size());
  for (std::size_t i = 0; i < in.size() && off + i < out.size(); ++i)
    strides[off + i] = in[i] == 1 ? 0 : ist[i];
  return copy_index(out, strides, dense_strides(out), 0, 0, what);
}

CopyIndex tile_plan(const Shape& in, const Shape& out, const std::string& what) {
  XRT_CHECK(in.size() == out.size(), InvalidModelError, what,
            ": output rank differs from input rank");
  const std::vector<int64_t> ist = dense_strides(in), ost = dense_strides(out);
  Shape dims;
  std::vector<int64_t> is, os;
  for (std::size_t d = 0; d < in.size(); ++d) {
    const int64_t reps = in[d] == 0 ? 0 : out[d] / in[d];
    XRT_CHECK(in[d] == 0 || reps * in[d] == out[d], InvalidModelError, what, ": output dim ",
              out[d], " is not a multiple of input dim ", in[d]);
    // out coordinate = rep * in[d] + j: a [reps, in[d]] pair of dims.
    dims.push_back(reps);
    is.push_back(0);
    os.push_back(in[d] * ost[d]);
    dims.push_back(in[d]);
    is.push_back(ist[d]);
    os.push_back(ost[d]);
  }
  return copy_index(dims, is, os, 0, 0, what);
}

void add_shape_copy(KernelRegistry& r, const char* op, const char* description,
                    CopyIndex (*plan_fn)(const Shape&, const Shape&, const std::string&)) {
  add_kernel(
      r, op, {}, description, [](const OpContext& ctx) { return basic(ctx, 1); },
      [plan_fn](const PrepareContext& pc) {
        const std::string what = where(pc);
        ShapeCached<CopyIndex> plan(
            {pc.ctx->inputs[0].shape, pc.ctx->outputs[0].shape},
            [plan_fn, what](const std::vector<Shape>& s) { return plan_fn(s[0], s[1], what); });
        return make_prepared([plan](const KernelArgs& a) {
          if (a.outputs[0].numel() == 0) return;
          launch_copy(dtype_size(a.inputs[0].dtype),
                      plan.get({a.inputs[0].shape, a.outputs[0].shape}), a.inputs[0].data,
                      a.outputs[0].data, a.stream);
        });
      });
}

// ---- Concat, Split ----
void add_concat_split(KernelRegistry& r) {
  add_kernel(
      r, "concat", {},
      "Concat along one axis (one launch for up to 32 inputs; a strided copy per input "
      "beyond 32-bit sizes)",
      [](const OpContext& ctx) {
        Support s = basic(ctx, 1);
        for (std::size_t i = 1; s.ok && i < ctx.inputs.size(); ++i)
          if (ctx.inputs[i].dtype != ctx.inputs[0].dtype)
            s = Support::no(reason::kDtypeUnsupported, "Concat inputs differ in dtype");
        return s;
      },
      [](const PrepareContext& pc) {
        const int64_t axis_attr = pc.node->attr_int("axis", 0);
        const std::string what = where(pc);
        return make_prepared([axis_attr, what](const KernelArgs& a) {
          const Shape& out = a.outputs[0].shape;
          const int64_t axis = norm(axis_attr, static_cast<int64_t>(out.size()), what);
          const auto ax = static_cast<std::size_t>(axis);
          const std::vector<int64_t> ost = dense_strides(out);
          // The output as [rows, row_bytes]; input k as [rows, its width] at a column.
          const int64_t elem = static_cast<int64_t>(dtype_size(a.outputs[0].dtype));
          int64_t rows = 1;
          for (std::size_t d = 0; d < ax; ++d) rows *= out[d];
          const int64_t unit_bytes = ost[ax] * elem;  // one step along the axis
          int64_t offset = 0;
          for (std::size_t first = 0; first < a.inputs.size(); first += kConcatMaxInputs) {
            const std::size_t last = std::min(a.inputs.size(), first + kConcatMaxInputs);
            const void* ptrs[kConcatMaxInputs];
            int64_t widths[kConcatMaxInputs], cols[kConcatMaxInputs];
            int count = 0;
            int64_t at = offset;
            for (std::size_t k = first; k < last; ++k) {
              const int64_t len = a.inputs[k].shape[ax];
              if (a.inputs[k].numel() > 0) {
                ptrs[count] = a.inputs[k].data;
                widths[count] = len * unit_bytes;
                cols[count++] = at * unit_bytes;
              }
              at += len;
            }
            if (count > 0 && !launch_concat(count, ptrs, widths, cols, rows, out[ax] * unit_bytes,
                                            a.outputs[0].data, a.stream)) {
              int64_t o = offset;
              for (std::size_t k = first; k < last; ++k) {
                const TensorArg& in = a.inputs[k];
                if (in.numel() > 0)
                  launch_copy(dtype_size(in.dtype),
                              copy_index(in.shape, dense_strides(in.shape), ost, 0, o * ost[ax],
                                         what),
                              in.data, a.outputs[0].data, a.stream);
                o += in.shape[ax];
              }
            }
            offset = at;
          }
        });
      });
  add_kernel(
      r, "split", {},
      "Split along one axis (one strided copy per output; sizes from the output shapes)",
      [](const OpContext& ctx) { return basic(ctx, 1); },
      [](const PrepareContext& pc) {
        const int64_t axis_attr = pc.node->attr_int("axis", 0);
        const std::string what = where(pc);
        return make_prepared([axis_attr, what](const KernelArgs& a) {
          const Shape& in = a.inputs[0].shape;
          const int64_t axis = norm(axis_attr, static_cast<int64_t>(in.size()), what);
          const std::vector<int64_t> ist = dense_strides(in);
          int64_t offset = 0;
          for (const TensorArg& out : a.outputs) {
            if (!out.present()) continue;
            if (out.numel() > 0) {
              launch_copy(dtype_size(out.dtype),
                          copy_index(out.shape, ist, dense_strides(out.shape),
                                     offset * ist[static_cast<std::size_t>(axis)], 0, what),
                          a.inputs[0].data, out.data, a.stream);
            }
            offset += out.shape[static_cast<std::size_t>(axis)];
          }
        });
      });
}

// ---- Gather, GatherElements ----
void add_gathers(KernelRegistry& r) {
  add_kernel(
      r, "gather", {},
      "Gather along one axis (int32/int64 indices, negatives; out-of-range indices give zeros)",
      [](const OpContext& ctx) {
        return first_refusal({basic(ctx, 2), require_dtype(ctx, 1, kIndexTypes, "indices")});
      },
      [](const PrepareContext& pc) {
        const int64_t axis_attr = pc.node->attr_int("axis", 0);
        const std::string what = where(pc);
        return make_prepared([axis_attr, what](const KernelArgs& a) {
          const Shape& s = a.inputs[0].shape;
          const int64_t axis = norm(axis_attr, static_cast<int64_t>(s.size()), what);
          int64_t outer = 1, inner = 1;
          for (int64_t d = 0; d < axis; ++d) outer *= s[static_cast<std::size_t>(d)];
          for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < s.size(); ++d) inner *= s[d];
          launch_gather(dtype_size(a.inputs[0].dtype), outer, s[static_cast<std::size_t>(axis)],
                        a.inputs[1].numel(), inner, a.inputs[0].data, a.inputs[1].dtype,
                        a.inputs[1].data, a.outputs[0].data, a.stream);
        });
      });
  add_kernel(
      r, "gatherelements", {},
      "GatherElements along one axis (rank <= 8; out-of-range indices give zeros)",
      [](const OpContext& ctx) {
        return first_refusal({basic(ctx, 2), require_dtype(ctx, 1, kIndexTypes, "indices"),
                              rank_at_most(ctx, 0, kMaxRank)});
      },
      [](const PrepareContext& pc) {
        const int64_t axis_attr = pc.node->attr_int("axis", 0);
        const std::string what = where(pc);
        auto make = [axis_attr, what](const std::vector<Shape>& s) {
          const Shape& data = s[0];
          const Shape& idx = s[1];
          XRT_CHECK(data.size() == idx.size() && data.size() <= static_cast<std::size_t>(kMaxRank),
                    InvalidModelError, what, ": data and indices must have the same rank (<= 8)");
          ElementsIndex ix;
          ix.rank = static_cast<int>(data.size());
          ix.axis = static_cast<int>(norm(axis_attr, ix.rank, what));
          ix.axis_len = data[static_cast<std::size_t>(ix.axis)];
          ix.numel = graph::shape_numel(idx);
          const std::vector<int64_t> ds = dense_strides(data);
          for (int d = 0; d < ix.rank; ++d) {
            ix.dims[d] = idx[static_cast<std::size_t>(d)];
            ix.data_strides[d] = ds[static_cast<std::size_t>(d)];
          }
          return ix;
        };
        ShapeCached<ElementsIndex> plan({pc.ctx->inputs[0].shape, pc.ctx->inputs[1].shape}, make);
        return make_prepared([plan](const KernelArgs& a) {
          launch_gather_elements(dtype_size(a.inputs[0].dtype),
                                 plan.get({a.inputs[0].shape, a.inputs[1].shape}), a.inputs[0].data,
                                 a.inputs[1].dtype, a.inputs[1].data, a.outputs[0].data, a.stream);
        });
      });
}

// ---- Pad, Trilu, Range ----
PadIndex pad_plan(const Shape& in, const Shape& out, const std::vector<int64_t>& pads,
                  std::vector<int64_t> axes, const std::string& what) {
  const int64_t rank = static_cast<int64_t>(in.size());
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  XRT_CHECK(pads.size() == 2 * axes.size(), InvalidModelError, what, ": pads has ", pads.size(),
            " values for ", axes.size(), " axes (want twice as many)");
  XRT_CHECK(rank <= kMaxRank && out.size() == in.size(), UnsupportedOperationError, what,
            ": Pad takes rank <= ", kMaxRank, " with an output of the input's rank");
  PadIndex ix;
  ix.rank = static_cast<int>(rank);
  ix.numel = graph::shape_numel(out);
  for (int64_t d = 0; d < rank; ++d) {
    ix.in_dims[d] = in[static_cast<std::size_t>(d)];
    ix.out_dims[d] = out[static_cast<std::size_t>(d)];
  }
  for (std::size_t i = 0; i < axes.size(); ++i) ix.begin[norm(axes[i], rank, what)] = pads[i];
  return ix;
}

void add_pad_trilu_range(KernelRegistry& r) {
  add_kernel(
      r, "pad", {}, "Pad (constant, reflect, edge, wrap; negative pads crop; rank <= 8)",
      [](const OpContext& ctx) {
        Support s = first_refusal({basic(ctx, 1), rank_at_most(ctx, 0, kMaxRank)});
        if (!s.ok) return s;
        const std::string mode = ctx.attr_str("mode", "constant");
        if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
          return Support::no(reason::kAttributeUnsupported,
                             "mode '" + mode + "' is not constant/reflect/edge/wrap");
        return Support::yes();
      },
      [](const PrepareContext& pc) {
        const bool pads_attr = pc.node->has("pads") && !has_input(pc, 1);  // opset 2
        const std::vector<int64_t> attr_pads =
            pads_attr ? pc.node->attr_ints("pads") : std::vector<int64_t>{};
        const IntsInput pads_in = pads_attr ? IntsInput() : IntsInput(pc, 1, "pads");
        const IntsInput axes_in(pc, 3, "axes");
        const std::string m = pc.node->attr_str("mode", "constant");
        const PadMode mode = m == "reflect" ? PadMode::kReflect
                             : m == "edge"  ? PadMode::kEdge
                             : m == "wrap"  ? PadMode::kWrap
                                            : PadMode::kConstant;
        const uint64_t value_bits =
            encode_scalar(pc.ctx->inputs[0].dtype, pc.node->attr_float("value", 0.0));
        const std::string what = where(pc);
        const bool fixed =
            (pads_attr || pads_in.constant()) && (!axes_in.present() || axes_in.constant());
        std::optional<ShapeCached<PadIndex>> plan;
        if (fixed) {
          const KernelArgs none;
          const std::vector<int64_t> pads = pads_attr ? attr_pads : pads_in.get(none);
          const std::vector<int64_t> axes = axes_in.get(none);
          plan.emplace(std::vector<Shape>{pc.ctx->inputs[0].shape, pc.ctx->outputs[0].shape},
                       [pads, axes, what](const std::vector<Shape>& s) {
                         return pad_plan(s[0], s[1], pads, axes, what);
                       });
        }
        return make_prepared([plan, pads_in, axes_in, mode, value_bits, what](const KernelArgs& a) {
          const PadIndex ix = plan ? plan->get({a.inputs[0].shape, a.outputs[0].shape})
                                   : pad_plan(a.inputs[0].shape, a.outputs[0].shape, pads_in.get(a),
                                              axes_in.get(a), what);
          if (mode != PadMode::kConstant) {
            for (int d = 0; d < ix.rank; ++d)
              XRT_CHECK(ix.in_dims[d] > 0 || ix.out_dims[d] == 0, InvalidModelError, what,
                        ": a non-constant mode cannot pad an empty axis");
          }
          const void* value =
              a.inputs.size() > 2 && a.inputs[2].present() && a.inputs[2].numel() > 0
                  ? a.inputs[2].data
                  : nullptr;
          launch_pad(dtype_size(a.inputs[0].dtype), ix, mode, a.inputs[0].data, value, value_bits,
                     a.outputs[0].data, a.stream);
        });
      });
  add_kernel(
      r, "trilu", {}, "Trilu (upper or lower triangle of the last two dims)",
      [](const OpContext& ctx) {
        Support s = basic(ctx, 1);
        if (s.ok && ctx.inputs[0].shape.size() < 2)
          return Support::no(reason::kShapeUnsupported, "Trilu needs rank >= 2");
        return s;
      },
      [](const PrepareContext& pc) {
        const IntsInput k_in(pc, 1, "k");
        const bool upper = pc.node->attr_int("upper", 1) != 0;
        const std::string what = where(pc);
        return make_prepared([k_in, upper, what](const KernelArgs& a) {
          const std::vector<int64_t> kv = k_in.get(a);
          XRT_CHECK(kv.size() <= 1, InvalidModelError, what, ": k must be a scalar");
          const int64_t k = kv.empty() ? 0 : kv[0];
          const Shape& s = a.inputs[0].shape;
          const int64_t rows = s[s.size() - 2], cols = s[s.size() - 1];
          const int64_t batch = rows * cols > 0 ? a.inputs[0].numel() / (rows * cols) : 0;
          launch_trilu(dtype_size(a.inputs[0].dtype), batch, rows, cols, k, upper, a.inputs[0].data,
                       a.outputs[0].data, a.stream);
        });
      });
  add_kernel(
      r, "range", kSignedTypes, "Range(start, limit, delta): start and delta read on the device",
      [](const OpContext& ctx) {
        return first_refusal({require_arity(ctx, 3), require_dense(ctx)});
      },
      [](const PrepareContext&) {
        return make_prepared([](const KernelArgs& a) {
          launch_range(a.outputs[0].dtype, a.inputs[0].data, a.inputs[2].data, a.outputs[0].data,
                       a.outputs[0].numel(), a.stream);
        });
      });
}

// ---- Identity and the view ops (a device copy where the executor does not alias), Shape, Size
// ----
void add_flat_copies(KernelRegistry& r) {
  for (const char* op : {"identity", "reshape", "flatten", "squeeze", "unsqueeze"}) {
    add_kernel(
        r, op, {},
        std::string(op) + ": a flat device copy of input 0 (where the executor does not alias it)",
        [](const OpContext& ctx) { return basic(ctx, 1); },
        [](const PrepareContext&) {
          return make_prepared([](const KernelArgs& a) {
            XRT_CHECK(a.outputs[0].numel() == a.inputs[0].numel(), InvalidArgumentError,
                      "view copy: output has ", a.outputs[0].numel(), " elements, input ",
                      a.inputs[0].numel());
            if (a.inputs[0].data == a.outputs[0].data || a.inputs[0].numel() == 0) return;
            CopyIndex ix;
            make_copy_index({a.inputs[0].numel()}, {1}, {1}, 0, 0, ix);
            launch_copy(dtype_size(a.inputs[0].dtype), ix, a.inputs[0].data, a.outputs[0].data,
                        a.stream);
          });
        });
  }
  add_kernel(
      r, "shape", {}, "Shape (start/end) of its input, written from kernel parameters (capturable)",
      [](const OpContext& ctx) {
        Support s = require_arity(ctx, 1);
        if (s.ok && ctx.inputs[0].shape.size() > static_cast<std::size_t>(kMaxCopyRank))
          return Support::no(reason::kShapeUnsupported, "rank above 16");
        return s;
      },
      [](const PrepareContext& pc) {
        const int64_t start_attr = pc.node->attr_int("start", 0);
        return make_prepared([start_attr](const KernelArgs& a) {
          const Shape& s = a.inputs[0].shape;
          const int64_t r = static_cast<int64_t>(s.size());
          const int64_t start =
              std::clamp<int64_t>(start_attr < 0 ? start_attr + r : start_attr, 0, r);
          const int64_t n = std::min<int64_t>(a.outputs[0].numel(), r - start);
          launch_write_ints(s.data() + start, static_cast<int>(n), a.outputs[0].data, a.stream);
        });
      });
  add_kernel(
      r, "size", {}, "Size (number of elements), written from a kernel parameter (capturable)",
      [](const OpContext& ctx) { return require_arity(ctx, 1); },
      [](const PrepareContext&) {
        return make_prepared([](const KernelArgs& a) {
          const int64_t n = a.inputs[0].numel();
          launch_write_ints(&n, 1, a.outputs[0].data, a.stream);
        });
      });
}

// ---- ConstantOfShape, Dropout (inference) ----
void add_fill_dropout(KernelRegistry& r) {
  add_kernel(
      r, "constantofshape", {}, "ConstantOfShape (the value attribute's element; zeros without it)",
      [](const OpContext& ctx) {
        if (ctx.outputs.empty())
          return Support::no(reason::kShapeUnsupported, "ConstantOfShape needs its output");
        const std::size_t e = dtype_size(ctx.outputs[0].dtype);
        if (e != 1 && e != 2 && e != 4 && e != 8)
          return Support::no(reason::kDtypeUnsupported, "output element size is not 1, 2, 4 or 8");
        return require_dense(ctx);
      },
      [](const PrepareContext& pc) {
        uint64_t bits = 0;
        const graph::Attr* v = pc.node->attr("value");
        if (v != nullptr && v->kind == graph::Attr::Kind::kTensor && v->t.numel() > 0)
          std::memcpy(&bits, v->t.data, dtype_size(v->t.dtype));
        return make_prepared([bits](const KernelArgs& a) {
          launch_fill(dtype_size(a.outputs[0].dtype), a.outputs[0].numel(), bits, a.outputs[0].data,
                      a.stream);
        });
      });
  add_kernel(
      r, "dropout", {}, "Dropout, inference (a copy; the mask output all true)",
      [](const OpContext& ctx) { return basic(ctx, 1); },
      [](const PrepareContext& pc) {
        const IntsInput training(pc, 2, "training_mode");
        const std::string what = where(pc);
        auto check = [what](const std::vector<int64_t>& t) {
          XRT_CHECK(t.empty() || t[0] == 0, UnsupportedOperationError, what,
                    ": training_mode=true Dropout is random and not supported for inference; "
                    "export the model in eval mode");
        };
        if (training.constant()) check(training.get(KernelArgs{}));
        return make_prepared([training, check](const KernelArgs& a) {
          if (training.present() && !training.constant()) check(training.get(a));
          CopyIndex ix;
          make_copy_index({a.inputs[0].numel()}, {1}, {1}, 0, 0, ix);
          if (a.inputs[0].data != a.outputs[0].data)
            launch_copy(dtype_size(a.inputs[0].dtype), ix, a.inputs[0].data, a.outputs[0].data,
                        a.stream);
          if (a.outputs.size() > 1 && a.outputs[1].present())
            launch_fill(1, a.outputs[1].numel(), 1, a.outputs[1].data, a.stream);
        });
      });
}

}  // namespace

void register_data_kernels(KernelRegistry& registry) {
  add_transpose(registry);
  add_slice(registry);
  add_shape_copy(registry, "expand", "Expand with numpy broadcasting (one strided copy)",
                 expand_plan);
  add_shape_copy(registry, "tile",
                 "Tile (one strided copy over [repeats, dim] pairs; repeats from the shapes)",
                 tile_plan);
  add_flat_copies(registry);
  add_concat_split(registry);
  add_gathers(registry);
  add_pad_trilu_range(registry);
  add_fill_dropout(registry);
}

}  // namespace xpuruntime::cuda_ops
