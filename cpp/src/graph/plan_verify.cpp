// Integrity of saved plans (plan_verify.h).
#include "graph/plan_verify.h"

#include <algorithm>
#include <cstdint>
#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "graph/passes.h"
#include "graph/planner.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/op_schema.h"
#include "xpuruntime/policy.h"

namespace xpuruntime::graph {
namespace {

constexpr const char* kFix =
    "; the plan file is damaged or was edited: compile the model again and re-save the plan";

// A name from the file, for a message: at most 64 bytes, anything outside
// printable ASCII as '?', so that the message stays valid UTF-8 and short.
std::string printable(const std::string& s) {
  std::string o = s.substr(0, 64);
  for (char& c : o)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return s.size() > 64 ? o + "..." : o;
}

std::string quoted(const std::string& s) { return "'" + printable(s) + "'"; }

// Where an empty constant's value "is" for shape inference (Meta::has_value).
alignas(64) const char kEmptyValue[64] = {};

std::string value_str(const ExecutionPlan& p, int id) {
  return "value " + std::to_string(id) + " (" +
         quoted(p.values[static_cast<std::size_t>(id)].name) + ")";
}

std::string step_str(const ExecutionPlan& p, std::size_t s) {
  const Node& n = p.steps[s].node;
  return "step " + std::to_string(s) + " (node " + quoted(n.name) + ", op " + quoted(n.op_type) +
         ")";
}

int64_t bytes_of(DType dtype, const Shape& shape) {
  return shape_numel(shape) * static_cast<int64_t>(dtype_size(dtype));
}

// Dims >= 0 and a size under XRT_MAX_TENSOR_BYTES (the compiler's own limit), so
// that every size computed from the shape afterwards is exact.
void check_shape(const std::string& what, DType dtype, const Shape& shape) {
  for (int64_t d : shape)
    XRT_CHECK(d >= 0, InvalidModelError, "plan file is corrupt: ", what,
              " has a negative dimension (shape ", shape_str(shape), ")", kFix);
  Node n;
  n.name = what;
  n.op_type = "plan";
  passes::check_tensor_size(n, what, dtype, shape);
}

int root_of(const ExecutionPlan& p, int v) {
  const int a = p.values[static_cast<std::size_t>(v)].alias_of;
  return a >= 0 ? a : v;
}

// Per value: kind, dtype/shape, constant reference, view, arena placement.
void check_values(const ExecutionPlan& p) {
  const int nv = static_cast<int>(p.values.size());
  const int nc = static_cast<int>(p.constants.size());
  const int ns = static_cast<int>(p.steps.size());
  for (int v = 0; v < nv; ++v) {
    const PlanValue& pv = p.values[static_cast<std::size_t>(v)];
    const std::string what = value_str(p, v);
    const int kind = static_cast<int>(pv.kind);
    XRT_CHECK(kind >= 0 && kind <= 3, InvalidModelError, "plan file is corrupt: ", what,
              " has kind ", kind, " (expected 0-3)", kFix);
    if (pv.shape) check_shape(what, pv.dtype, *pv.shape);
    if (pv.declared) {
      for (const Dim& d : *pv.declared)
        XRT_CHECK(d.value >= -1, InvalidModelError, "plan file is corrupt: ", what,
                  " declares dimension ", d.value, kFix);
      if (pv.shape) {
        XRT_CHECK(pv.declared->size() == pv.shape->size(), InvalidModelError,
                  "plan file is corrupt: ", what, " declares rank ", pv.declared->size(),
                  " but its shape ", shape_str(*pv.shape), " has rank ", pv.shape->size(), kFix);
        for (std::size_t d = 0; d < pv.shape->size(); ++d) {
          const int64_t fixed = (*pv.declared)[d].value;
          XRT_CHECK(fixed < 0 || fixed == (*pv.shape)[d], InvalidModelError,
                    "plan file is corrupt: ", what, " declares dimension ", d, " = ", fixed,
                    " but its shape is ", shape_str(*pv.shape), kFix);
        }
      }
    }
    XRT_CHECK(pv.last_use >= -1 && pv.last_use < ns, InvalidModelError,
              "plan file is corrupt: ", what, " has last use ", pv.last_use, " but the plan has ",
              ns, " steps", kFix);
    XRT_CHECK(pv.alias_of >= -1 && pv.alias_of < nv && pv.alias_of != v, InvalidModelError,
              "plan file is corrupt: ", what, " is a view of value ", pv.alias_of,
              " (the plan has ", nv, " values)", kFix);
    if (pv.kind == PlanValue::Kind::kConstant) {
      XRT_CHECK(pv.constant >= 0 && pv.constant < nc, InvalidModelError,
                "plan file is corrupt: ", what, " refers to constant ", pv.constant,
                " (the plan has ", nc, ")", kFix);
      const HostTensor& c = p.constants[static_cast<std::size_t>(pv.constant)];
      XRT_CHECK(pv.shape && *pv.shape == c.shape && pv.dtype == c.dtype, InvalidModelError,
                "plan file is corrupt: ", what, " is ", dtype_name(pv.dtype),
                pv.shape ? shape_str(*pv.shape) : std::string("[?]"), " but its constant ",
                pv.constant, " is ", dtype_name(c.dtype), shape_str(c.shape), kFix);
    } else {
      XRT_CHECK(pv.constant == -1, InvalidModelError, "plan file is corrupt: ", what,
                " is no constant but refers to constant ", pv.constant, kFix);
    }
    const bool intermediate = pv.kind == PlanValue::Kind::kIntermediate;
    if (pv.output_home != -1) {
      const bool home_ok =
          pv.output_home >= 0 && pv.output_home < nv &&
          p.values[static_cast<std::size_t>(pv.output_home)].kind == PlanValue::Kind::kOutput;
      const PlanValue* home =
          home_ok ? &p.values[static_cast<std::size_t>(pv.output_home)] : nullptr;
      XRT_CHECK(home_ok && intermediate && pv.alias_of == -1 && pv.shape && home->shape &&
                    home->dtype == pv.dtype &&
                    bytes_of(pv.dtype, *pv.shape) == bytes_of(home->dtype, *home->shape),
                InvalidModelError, "plan file is corrupt: ", what, " is written into output value ",
                pv.output_home,
                " but is no static intermediate buffer, or that value is no static plan output "
                "of its size",
                kFix);
    }
    if (!intermediate || pv.alias_of >= 0 || !pv.shape || pv.output_home >= 0) {
      // Only static intermediates that are not views live in the arena.
      XRT_CHECK(pv.arena_offset == -1, InvalidModelError, "plan file is corrupt: ", what,
                " has arena offset ", pv.arena_offset, " but is no static intermediate buffer",
                kFix);
    }
    if (pv.alias_of >= 0) {
      XRT_CHECK(intermediate, InvalidModelError, "plan file is corrupt: ", what,
                " is a view but is no intermediate", kFix);
      const PlanValue& root = p.values[static_cast<std::size_t>(pv.alias_of)];
      XRT_CHECK(root.alias_of == -1 && root.kind != PlanValue::Kind::kOutput, InvalidModelError,
                "plan file is corrupt: ", what, " is a view of ", value_str(p, pv.alias_of),
                ", which is itself a view or a plan output", kFix);
    } else if (intermediate && pv.shape && pv.output_home < 0) {
      const int64_t need = arena_bytes_of(pv);
      const int64_t arena = p.memory.arena_bytes;
      XRT_CHECK(pv.arena_offset >= 0 && pv.arena_offset % 64 == 0 && pv.arena_offset <= arena &&
                    need <= arena - pv.arena_offset,
                InvalidModelError, "plan file is corrupt: ", what, " (", need,
                " bytes) at arena offset ", pv.arena_offset,
                " does not lie 64-byte aligned inside the arena of ", arena, " bytes", kFix);
    }
  }
}

// The memory report, re-derived (the arena is checked against the buffers).
void check_memory(const ExecutionPlan& p) {
  MemoryReport m;
  int64_t arena_bound = 0;
  for (const HostTensor& c : p.constants) m.constant_bytes += static_cast<int64_t>(c.nbytes());
  for (const PlanValue& pv : p.values) {
    if (pv.kind != PlanValue::Kind::kIntermediate || pv.alias_of >= 0) continue;
    if (!pv.shape) {
      ++m.dynamic_values;
      continue;
    }
    ++m.static_values;
    m.intermediate_bytes += bytes_of(pv.dtype, *pv.shape);
    arena_bound += arena_bytes_of(pv);
  }
  for (const PlanStep& st : p.steps)  // saturating: a crafted file may ask for anything
    if (st.workspace_offset >= 0 && st.workspace_bytes > 0)
      arena_bound = st.workspace_bytes > INT64_MAX - arena_bound ? INT64_MAX
                                                                 : arena_bound + st.workspace_bytes;
  const MemoryReport& r = p.memory;
  XRT_CHECK(r.arena_bytes >= 0 && r.arena_bytes <= arena_bound, InvalidModelError,
            "plan file is corrupt: the arena of ", r.arena_bytes,
            " bytes is not between 0 and the sum of its buffers (", arena_bound, " bytes)", kFix);
  XRT_CHECK(r.constant_bytes == m.constant_bytes && r.intermediate_bytes == m.intermediate_bytes &&
                r.static_values == m.static_values && r.dynamic_values == m.dynamic_values,
            InvalidModelError, "plan file is corrupt: the memory report (constants ",
            r.constant_bytes, " B, intermediates ", r.intermediate_bytes, " B, ", r.static_values,
            " static and ", r.dynamic_values, " dynamic values) does not match the plan's values (",
            m.constant_bytes, " B, ", m.intermediate_bytes, " B, ", m.static_values, ", ",
            m.dynamic_values, ")", kFix);
}

void check_io(const ExecutionPlan& p) {
  const int nv = static_cast<int>(p.values.size());
  std::vector<char> listed(p.values.size(), 0);
  std::set<std::string> names;
  for (int id : p.inputs) {
    XRT_CHECK(id >= 0 && id < nv, InvalidModelError, "plan file is corrupt: plan input id ", id,
              " is not a value id (the plan has ", nv, " values)", kFix);
    XRT_CHECK(p.values[static_cast<std::size_t>(id)].kind == PlanValue::Kind::kInput &&
                  !listed[static_cast<std::size_t>(id)] &&
                  names.insert(p.values[static_cast<std::size_t>(id)].name).second,
              InvalidModelError, "plan file is corrupt: plan input ", value_str(p, id),
              " is no input value, or is listed twice", kFix);
    listed[static_cast<std::size_t>(id)] = 1;
  }
  for (int v = 0; v < nv; ++v)
    XRT_CHECK(p.values[static_cast<std::size_t>(v)].kind != PlanValue::Kind::kInput ||
                  listed[static_cast<std::size_t>(v)],
              InvalidModelError, "plan file is corrupt: ", value_str(p, v),
              " is an input value but not among the plan's inputs", kFix);
  std::vector<char> out(p.values.size(), 0);
  for (int id : p.outputs) {
    XRT_CHECK(id >= 0 && id < nv, InvalidModelError, "plan file is corrupt: plan output id ", id,
              " is not a value id (the plan has ", nv, " values)", kFix);
    XRT_CHECK(p.values[static_cast<std::size_t>(id)].kind != PlanValue::Kind::kIntermediate,
              InvalidModelError, "plan file is corrupt: plan output ", value_str(p, id),
              " is an intermediate (its buffer is reused during the run)", kFix);
    out[static_cast<std::size_t>(id)] = 1;
  }
  for (int v = 0; v < nv; ++v)
    XRT_CHECK(p.values[static_cast<std::size_t>(v)].kind != PlanValue::Kind::kOutput ||
                  out[static_cast<std::size_t>(v)],
              InvalidModelError, "plan file is corrupt: ", value_str(p, v),
              " is an output value but not among the plan's outputs", kFix);
}

// Steps: ids, single definition before any read, views. Returns each value's
// defining step (-1: an input, a constant, or never written).
std::vector<int> check_steps(const ExecutionPlan& p) {
  const int nv = static_cast<int>(p.values.size());
  std::vector<int> def(p.values.size(), -1);
  std::vector<char> ready(p.values.size(), 0);
  for (int v = 0; v < nv; ++v) {
    const PlanValue::Kind k = p.values[static_cast<std::size_t>(v)].kind;
    ready[static_cast<std::size_t>(v)] =
        k == PlanValue::Kind::kInput || k == PlanValue::Kind::kConstant;
  }
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    const PlanStep& st = p.steps[s];
    const Node& n = st.node;
    XRT_CHECK(!n.outputs.empty() && n.outputs[0] >= 0, InvalidModelError,
              "plan file is corrupt: ", step_str(p, s), " has no output 0", kFix);
    for (int i : n.inputs) {
      XRT_CHECK(i >= -1 && i < nv, InvalidModelError, "plan file is corrupt: ", step_str(p, s),
                " reads value id ", i, " (the plan has ", nv, " values)", kFix);
      XRT_CHECK(i < 0 || ready[static_cast<std::size_t>(i)], InvalidModelError,
                "plan file is corrupt: ", step_str(p, s), " reads ", value_str(p, i),
                " before any step writes it", kFix);
    }
    for (int o : n.outputs) {
      XRT_CHECK(o >= -1 && o < nv, InvalidModelError, "plan file is corrupt: ", step_str(p, s),
                " writes value id ", o, " (the plan has ", nv, " values)", kFix);
      if (o < 0) continue;
      const PlanValue& pv = p.values[static_cast<std::size_t>(o)];
      XRT_CHECK(pv.kind == PlanValue::Kind::kIntermediate || pv.kind == PlanValue::Kind::kOutput,
                InvalidModelError, "plan file is corrupt: ", step_str(p, s), " writes ",
                value_str(p, o), ", an input or constant", kFix);
      XRT_CHECK(def[static_cast<std::size_t>(o)] < 0, InvalidModelError,
                "plan file is corrupt: ", value_str(p, o), " is written by step ",
                def[static_cast<std::size_t>(o)], " and by ", step_str(p, s), kFix);
      def[static_cast<std::size_t>(o)] = static_cast<int>(s);
      ready[static_cast<std::size_t>(o)] = 1;
    }
    const ops::OpSchema* schema = ops::find_schema(n.op_type);
    for (std::size_t k = 0; k < n.outputs.size(); ++k) {
      const int o = n.outputs[k];
      if (o < 0) continue;
      const bool view = p.values[static_cast<std::size_t>(o)].alias_of >= 0;
      XRT_CHECK(!view || (st.alias && k == 0), InvalidModelError,
                "plan file is corrupt: ", value_str(p, o), " is recorded as a view but ",
                step_str(p, s), " does not make it one", kFix);
    }
    if (!st.alias) continue;
    int live = 0;
    for (int o : n.outputs) live += o >= 0;
    const int out = n.outputs[0];
    // A view into a graph output: its input was written into that output's buffer.
    const bool into_output =
        out >= 0 && p.values[static_cast<std::size_t>(out)].kind == PlanValue::Kind::kOutput &&
        !n.inputs.empty() && n.inputs[0] >= 0 &&
        p.values[static_cast<std::size_t>(n.inputs[0])].output_home == out;
    const bool ok =
        schema != nullptr && schema->alias && live == 1 && !n.inputs.empty() && n.inputs[0] >= 0 &&
        (into_output ||
         (p.values[static_cast<std::size_t>(out)].kind == PlanValue::Kind::kIntermediate &&
          p.values[static_cast<std::size_t>(out)].alias_of == root_of(p, n.inputs[0])));
    XRT_CHECK(ok, InvalidModelError, "plan file is corrupt: ", step_str(p, s),
              " is recorded as a view, but its op has no view semantics or its output is not "
              "recorded as a view of its input 0",
              kFix);
    const PlanValue& in = p.values[static_cast<std::size_t>(n.inputs[0])];
    const PlanValue& ov = p.values[static_cast<std::size_t>(out)];
    XRT_CHECK(
        in.dtype == ov.dtype && (!in.shape || !ov.shape ||
                                 bytes_of(in.dtype, *in.shape) == bytes_of(ov.dtype, *ov.shape)),
        InvalidModelError, "plan file is corrupt: ", step_str(p, s), " views ",
        value_str(p, n.inputs[0]), " as ", value_str(p, out), " of another size or dtype", kFix);
  }
  for (int id : p.outputs)
    XRT_CHECK(ready[static_cast<std::size_t>(id)], InvalidModelError,
              "plan file is corrupt: plan output ", value_str(p, id), " is never written", kFix);
  return def;
}

// Lifetimes re-derived as the memory planner derives them: dynamic buffers are
// freed after the step the plan records as their last use, and arena buffers
// alive at the same time must not overlap.
void check_lifetimes(const ExecutionPlan& p, const std::vector<int>& def) {
  const std::size_t nv = p.values.size();
  std::vector<int> last(nv, -1), end(nv, -1);
  for (std::size_t s = 0; s < p.steps.size(); ++s)
    for (int i : p.steps[s].node.inputs)
      if (i >= 0) last[static_cast<std::size_t>(i)] = static_cast<int>(s);
  for (std::size_t v = 0; v < nv; ++v) {
    const auto r = static_cast<std::size_t>(root_of(p, static_cast<int>(v)));
    end[r] = std::max({end[r], last[v], def[v]});
  }
  for (std::size_t v = 0; v < nv; ++v) {
    const int want =
        std::max(last[v], end[static_cast<std::size_t>(root_of(p, static_cast<int>(v)))]);
    XRT_CHECK(p.values[v].last_use == want, InvalidModelError,
              "plan file is corrupt: ", value_str(p, static_cast<int>(v)),
              " records its last use at step ", p.values[v].last_use,
              " but the steps read it until step ", want, kFix);
  }
  struct Buf {
    int64_t off, bytes;
    int start, stop, v;
  };
  std::vector<Buf> bufs;
  for (std::size_t v = 0; v < nv; ++v) {
    const PlanValue& pv = p.values[v];
    if (pv.kind != PlanValue::Kind::kIntermediate || pv.alias_of >= 0 || !pv.shape ||
        pv.output_home >= 0)
      continue;
    bufs.push_back({pv.arena_offset, arena_bytes_of(pv), def[v], std::max(end[v], def[v]),
                    static_cast<int>(v)});
  }
  // A step's workspace planned in the arena: a buffer alive during that step only.
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    const PlanStep& st = p.steps[s];
    if (st.workspace_offset < 0) continue;
    XRT_CHECK(st.workspace_bytes > 0 && st.workspace_offset % 64 == 0 &&
                  st.workspace_bytes <= p.memory.arena_bytes &&
                  st.workspace_offset <= p.memory.arena_bytes - st.workspace_bytes,
              InvalidModelError, "plan file is corrupt: ", step_str(p, s), " has a workspace of ",
              st.workspace_bytes, " bytes at arena offset ", st.workspace_offset,
              ", not a 64-byte aligned buffer inside the arena of ", p.memory.arena_bytes,
              " bytes", kFix);
    bufs.push_back({st.workspace_offset, st.workspace_bytes, static_cast<int>(s),
                    static_cast<int>(s), -1 - static_cast<int>(s)});
  }
  auto buf_str = [&](const Buf& b) {
    return b.v >= 0 ? value_str(p, b.v)
                    : "the workspace of " + step_str(p, static_cast<std::size_t>(-1 - b.v));
  };
  std::sort(bufs.begin(), bufs.end(), [](const Buf& a, const Buf& b) { return a.off < b.off; });
  for (std::size_t a = 0; a < bufs.size(); ++a) {
    for (std::size_t b = a + 1; b < bufs.size() && bufs[b].off < bufs[a].off + bufs[a].bytes; ++b) {
      const bool together = !(bufs[a].stop < bufs[b].start || bufs[b].stop < bufs[a].start);
      // A step writing its output over an input whose lifetime ends there, where its
      // kernel allows it (the planner's in-place sharing: same offset and size).
      auto in_place = [&](const Buf& x, const Buf& y) {
        return x.v >= 0 && y.v >= 0 && x.off == y.off && x.bytes == y.bytes && x.stop == y.start &&
               inplace_input(p, static_cast<std::size_t>(y.start)) == x.v &&
               p.steps[static_cast<std::size_t>(y.start)].node.outputs[0] == y.v;
      };
      if (together && (in_place(bufs[a], bufs[b]) || in_place(bufs[b], bufs[a]))) continue;
      XRT_CHECK(!together, InvalidModelError, "plan file is corrupt: ", buf_str(bufs[a]),
                " and ", buf_str(bufs[b]),
                " are alive at the same time but overlap in the arena", kFix);
    }
  }
}

// Each step's outputs as its op's schema infers them from the recorded inputs
// (constants with their values): the dtypes must match, and every static shape
// must be re-derivable and equal, so that a kernel never receives an output
// buffer of another size than its inputs imply.
void check_inferred(const ExecutionPlan& p) {
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    const Node& n = p.steps[s].node;
    const ops::OpSchema* schema = ops::find_schema(n.op_type);
    XRT_CHECK(schema != nullptr, InvalidModelError, "plan file is corrupt: ", step_str(p, s),
              " has an op this build does not know", kFix);
    std::vector<ops::Meta> in(n.inputs.size());
    for (std::size_t k = 0; k < n.inputs.size(); ++k) {
      const int i = n.inputs[k];
      if (i < 0) continue;
      const PlanValue& pv = p.values[static_cast<std::size_t>(i)];
      in[k].present = true;
      in[k].dtype = pv.dtype;
      in[k].shape = pv.shape;
      if (pv.constant >= 0) {
        const HostTensor& c = p.constants[static_cast<std::size_t>(pv.constant)];
        in[k].data = c.data ? c.data : kEmptyValue;
      }
    }
    std::vector<ops::Meta> out(n.outputs.size());
    schema->infer(n, in, out);
    for (std::size_t k = 0; k < n.outputs.size(); ++k) {
      const int o = n.outputs[k];
      if (o < 0) continue;
      const PlanValue& pv = p.values[static_cast<std::size_t>(o)];
      XRT_CHECK(!out[k].present || out[k].dtype == pv.dtype, InvalidModelError,
                "plan file is corrupt: ", step_str(p, s), " output ", k, " is recorded as ",
                dtype_name(pv.dtype), " but the op gives ", dtype_name(out[k].dtype), kFix);
      if (!pv.shape) continue;
      XRT_CHECK(
          out[k].shape.has_value() && *out[k].shape == *pv.shape, InvalidModelError,
          "plan file is corrupt: ", step_str(p, s), " output ", k, " is recorded as ",
          shape_str(*pv.shape), " but the op gives ",
          out[k].shape ? shape_str(*out[k].shape) : std::string("a shape known only at run time"),
          kFix);
    }
  }
}

}  // namespace

std::size_t plan_blob_offset(uint64_t header_bytes) {
  return (kPlanPrefixBytes + static_cast<std::size_t>(header_bytes) + 63) / 64 * 64;
}

void parallel_chunks(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& fn) {
  if (threads == 0) threads = std::clamp(std::thread::hardware_concurrency(), 1u, 32u);
  const std::size_t workers = std::min<std::size_t>(threads, n);
  if (workers <= 1) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::exception_ptr failed;
  std::mutex mu;
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!failed) failed = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failed) std::rethrow_exception(failed);
}

PlanDigests plan_digests(std::string_view file, uint64_t header_bytes, unsigned threads) {
  const std::size_t blob = std::min(plan_blob_offset(header_bytes), file.size());
  std::string head(file.substr(0, 16));
  head.append(file.substr(kPlanPrefixBytes, blob - std::min(blob, kPlanPrefixBytes)));
  const std::string_view data = file.substr(blob);
  if (file.size() > 7 && file[7] == kPlanContainerV2) return {sha256_hex(head), sha256_hex(data)};
  // A language model's constants are hundreds of MB: one SHA-256 stream over them took
  // longer than the rest of a load. Chunks hash in parallel; the digest of their digests
  // detects the same damage.
  const std::size_t chunks = (data.size() + kPlanBlobChunkBytes - 1) / kPlanBlobChunkBytes;
  std::vector<std::string> digests(chunks);
  parallel_chunks(chunks, threads, [&](std::size_t i) {
    digests[i] = sha256_hex(data.substr(i * kPlanBlobChunkBytes, kPlanBlobChunkBytes));
  });
  std::string all;
  all.reserve(chunks * kPlanDigestBytes);
  for (const std::string& d : digests) all += d;
  return {sha256_hex(head), sha256_hex(all)};
}

void seal_plan_bytes(std::string& file) {
  if (file.size() < kPlanPrefixBytes) return;
  uint64_t hl = 0;
  std::memcpy(&hl, file.data() + 8, sizeof(hl));
  if (hl > file.size() - kPlanPrefixBytes || plan_blob_offset(hl) > file.size()) return;
  const PlanDigests d = plan_digests(file, hl);
  std::memcpy(file.data() + 16, d.header.data(), kPlanDigestBytes);
  std::memcpy(file.data() + 16 + kPlanDigestBytes, d.blob.data(), kPlanDigestBytes);
}

void verify_plan_structure(const ExecutionPlan& plan) {
  check_values(plan);
  check_memory(plan);
  check_io(plan);
  const std::vector<int> def = check_steps(plan);
  check_lifetimes(plan, def);
  check_inferred(plan);
}

void verify_plan_environment(const PlanHeader& header, const ExecutionProvider& provider) {
  const std::map<std::string, std::string> here = provider.environment();
  std::set<std::string> fields;
  for (const auto& [k, v] : header.environment) fields.insert(k);
  for (const auto& [k, v] : here) fields.insert(k);
  for (const std::string& f : fields) {
    auto a = header.environment.find(f);
    auto b = here.find(f);
    const std::string plan_v =
        a == header.environment.end() ? "(not recorded)" : printable(a->second);
    const std::string here_v = b == here.end() ? "(none)" : printable(b->second);
    XRT_CHECK(a != header.environment.end() && b != here.end() && a->second == b->second,
              InvalidModelError, "plan was compiled for another environment: ", printable(f),
              ": plan ", plan_v, ", this device ", here_v, " (device '", provider.name(),
              "'); compile the model again on this machine and save a new plan");
  }
}

}  // namespace xpuruntime::graph
