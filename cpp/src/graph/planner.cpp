#include "graph/planner.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "xpuruntime/error.h"
#include "xpuruntime/ops/op_schema.h"
#include "xpuruntime/provider.h"

namespace xpuruntime::graph {

int64_t arena_bytes_of(const PlanValue& v) {
  if (!v.shape) return 0;
  const int64_t b = shape_numel(*v.shape) * static_cast<int64_t>(dtype_size(v.dtype));
  return std::max<int64_t>(64, (b + 63) / 64 * 64);
}

void build_plan_values(const Graph& g, ExecutionPlan& plan) {
  std::map<int, int> remap;
  auto add = [&](int gid) {
    auto it = remap.find(gid);
    if (it != remap.end()) return it->second;
    const Value& v = g.values[gid];
    PlanValue pv;
    pv.name = v.name;
    pv.dtype = v.dtype;
    pv.shape = v.shape;
    pv.declared = v.declared;
    if (v.constant.defined()) {
      pv.kind = PlanValue::Kind::kConstant;
      pv.shape = v.constant.shape;
      pv.constant = static_cast<int>(plan.constants.size());
      plan.constants.push_back(v.constant);
    }
    int id = static_cast<int>(plan.values.size());
    plan.values.push_back(std::move(pv));
    remap[gid] = id;
    return id;
  };
  for (int i : g.inputs) {
    int id = add(i);
    plan.values[id].kind = PlanValue::Kind::kInput;
    plan.inputs.push_back(id);
  }
  for (PlanStep& st : plan.steps) {
    for (int& i : st.node.inputs)
      if (i >= 0) i = add(i);
    for (int& o : st.node.outputs)
      if (o >= 0) o = add(o);
  }
  for (int o : g.outputs) {
    int id = add(o);
    PlanValue& pv = plan.values[id];
    if (pv.kind == PlanValue::Kind::kIntermediate) pv.kind = PlanValue::Kind::kOutput;
    if (!pv.declared) pv.declared = g.values[o].declared;
    plan.outputs.push_back(id);
  }
  // Views: Reshape & co. whose single output is an intermediate share input 0's bytes.
  std::vector<int> readers(plan.values.size(), 0);  // steps reading each value
  for (const PlanStep& st : plan.steps) {
    std::set<int> seen;
    for (int i : st.node.inputs)
      if (i >= 0 && seen.insert(i).second) ++readers[static_cast<std::size_t>(i)];
  }
  for (PlanStep& st : plan.steps) {
    const ops::OpSchema* schema = ops::find_schema(st.node.op_type);
    if (schema == nullptr || !schema->alias) continue;
    int live_outputs = 0;
    for (int o : st.node.outputs) live_outputs += o >= 0;
    const int out = st.node.outputs[0];
    if (live_outputs != 1 || out < 0 || st.node.inputs.empty() || st.node.inputs[0] < 0) continue;
    if (plan.values[out].kind == PlanValue::Kind::kOutput) {
      // A graph output that is a view of a value nothing else reads (GPT-2's logits,
      // Reshaped from the LM head's Gemm): the producer writes into the output's
      // buffer instead of an arena buffer the view step would copy out of.
      const int src = st.node.inputs[0];
      PlanValue& sv = plan.values[src];
      const PlanValue& ov = plan.values[out];
      const bool listed_once = std::count(plan.outputs.begin(), plan.outputs.end(), out) == 1;
      if (sv.kind == PlanValue::Kind::kIntermediate && sv.alias_of < 0 && sv.output_home < 0 &&
          sv.shape && ov.shape && sv.dtype == ov.dtype &&
          shape_numel(*sv.shape) == shape_numel(*ov.shape) && readers[src] == 1 && listed_once) {
        st.alias = true;
        sv.output_home = out;
      }
      continue;
    }
    if (plan.values[out].kind != PlanValue::Kind::kIntermediate) continue;
    int src = st.node.inputs[0];
    while (plan.values[src].alias_of >= 0) src = plan.values[src].alias_of;
    // A view of an output would alias memory handed to the caller mid-run: copy instead.
    if (plan.values[src].kind == PlanValue::Kind::kOutput) continue;
    st.alias = true;
    plan.values[out].alias_of = src;
  }
}

int inplace_input(const ExecutionPlan& plan, std::size_t s) {
  // Where the device's elementwise kernels read each element before writing the same
  // index (its provider's FusionSupport says so: the CPU's, CUDA's).
  if (!ProviderRegistry::instance().get(plan.header.device)->fusions().elementwise_in_place)
    return -1;
  const bool cpu = plan.header.device == "cpu";
  static const std::set<std::string> kElementwise = {
      "FusedElementwise", "Relu", "Sigmoid", "Tanh", "Clip",  "LeakyRelu", "HardSigmoid",
      "HardSwish",        "Gelu", "Erf",     "Exp",  "Neg",   "Abs",       "Sqrt",
      "Add",              "Sub",  "Mul",     "Div"};
  const Node& n = plan.steps[s].node;
  if (n.outputs.empty() || n.outputs[0] < 0) return -1;
  const PlanValue& out = plan.values[static_cast<std::size_t>(n.outputs[0])];
  if (!out.shape) return -1;
  auto fits = [&](int v) {
    if (v < 0) return false;
    const PlanValue& in = plan.values[static_cast<std::size_t>(v)];
    return in.kind == PlanValue::Kind::kIntermediate && in.shape && *in.shape == *out.shape &&
           in.dtype == out.dtype;
  };
  if (n.op_type == "NhwcConv" && cpu) {
    // Not when the residual is also the convolution's input (x + conv(x)): the
    // primitive would read x while writing over it.
    const bool sum = n.attr_int("_sum", 0) != 0;
    if (!sum || n.inputs.size() < 4 || !fits(n.inputs[3])) return -1;
    for (std::size_t i = 0; i < 3; ++i)
      if (n.inputs[i] == n.inputs[3]) return -1;
    return n.inputs[3];
  }
  if (!kElementwise.count(n.op_type) || (n.domain == "xrt") != (n.op_type == "FusedElementwise"))
    return -1;
  const std::size_t data_inputs = n.op_type == "Clip" ? 1 : n.inputs.size();
  for (std::size_t i = 0; i < data_inputs; ++i)
    if (fits(n.inputs[i])) return n.inputs[i];
  return -1;
}

void plan_memory(ExecutionPlan& plan, bool step_workspaces) {
  const int nv = static_cast<int>(plan.values.size());
  std::vector<int> def_step(nv, -1);
  for (int s = 0; s < static_cast<int>(plan.steps.size()); ++s) {
    const Node& n = plan.steps[s].node;
    for (int o : n.outputs)
      if (o >= 0 && def_step[o] < 0) def_step[o] = s;
    for (int i : n.inputs) {
      if (i < 0) continue;
      plan.values[i].last_use = s;
    }
  }
  // A buffer lives until the last use of any view of it.
  std::vector<int> end(nv, -1);
  for (int v = 0; v < nv; ++v) {
    int root = v;
    while (plan.values[root].alias_of >= 0) root = plan.values[root].alias_of;
    end[root] = std::max({end[root], plan.values[v].last_use, def_step[v]});
  }
  for (int v = 0; v < nv; ++v) {
    int root = v;
    while (plan.values[root].alias_of >= 0) root = plan.values[root].alias_of;
    plan.values[v].last_use = std::max(plan.values[v].last_use, end[root]);
  }
  struct Buf {
    int v;  // the value, or -1 - s for step s's workspace
    int64_t bytes;
    int start, stop;
  };
  std::vector<Buf> bufs;
  MemoryReport& mem = plan.memory;
  mem = MemoryReport{};
  for (const HostTensor& c : plan.constants) mem.constant_bytes += static_cast<int64_t>(c.nbytes());
  // In place: a step's output takes the buffer of an input whose lifetime ends there
  // (inplace_input); chains of such steps share one buffer (share[v]: the value
  // whose buffer v takes).
  std::vector<int> share(nv, -1);
  auto owner = [&](int v) {
    while (share[v] >= 0) v = share[v];
    return v;
  };
  auto static_buffer = [&](int v) {
    const PlanValue& pv = plan.values[v];
    return pv.kind == PlanValue::Kind::kIntermediate && pv.alias_of < 0 && pv.output_home < 0 &&
           pv.shape.has_value();
  };
  for (int s = 0; s < static_cast<int>(plan.steps.size()); ++s) {
    const int in = inplace_input(plan, static_cast<std::size_t>(s));
    const int out = in >= 0 ? plan.steps[s].node.outputs[0] : -1;
    if (out < 0 || in == out || !static_buffer(in) || !static_buffer(out) || end[in] != s ||
        def_step[out] != s || arena_bytes_of(plan.values[in]) != arena_bytes_of(plan.values[out]))
      continue;
    share[out] = in;
  }
  std::vector<int> group_stop(nv, -1);
  for (int v = 0; v < nv; ++v)
    if (static_buffer(v)) {
      const int o = owner(v);
      group_stop[o] = std::max({group_stop[o], end[v], def_step[v]});
    }
  for (int v = 0; v < nv; ++v) {
    PlanValue& pv = plan.values[v];
    if (pv.kind != PlanValue::Kind::kIntermediate || pv.alias_of >= 0) continue;
    if (!pv.shape) {
      ++mem.dynamic_values;
      continue;
    }
    ++mem.static_values;
    const int64_t b = arena_bytes_of(pv);
    mem.intermediate_bytes += shape_numel(*pv.shape) * static_cast<int64_t>(dtype_size(pv.dtype));
    if (share[v] >= 0) continue;        // placed with the value whose buffer it takes
    if (pv.output_home >= 0) continue;  // lives in its output's buffer
    bufs.push_back({v, b, def_step[v], group_stop[v]});
  }
  for (int s = 0; s < static_cast<int>(plan.steps.size()); ++s) {
    PlanStep& st = plan.steps[s];
    st.workspace_offset = -1;
    st.workspace_bytes = 0;
    const std::size_t ws = step_workspaces && st.prepared ? st.prepared->workspace_bytes() : 0;
    if (ws == 0) continue;
    st.workspace_bytes = static_cast<int64_t>((ws + 63) / 64 * 64);
    bufs.push_back({-1 - s, st.workspace_bytes, s, s});
  }
  std::stable_sort(bufs.begin(), bufs.end(), [](const Buf& a, const Buf& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.start < b.start;
  });
  struct Placed {
    int64_t off, bytes;
    int start, stop;
  };
  std::vector<Placed> placed;
  int64_t arena = 0;
  for (const Buf& b : bufs) {
    // Overlapping-in-time buffers, by offset; take the first gap that fits.
    std::vector<const Placed*> live;
    for (const Placed& p : placed)
      if (!(p.stop < b.start || b.stop < p.start)) live.push_back(&p);
    std::sort(live.begin(), live.end(), [](const Placed* x, const Placed* y) { return x->off < y->off; });
    int64_t off = 0;
    for (const Placed* p : live) {
      if (off + b.bytes <= p->off) break;
      off = std::max(off, p->off + p->bytes);
    }
    placed.push_back({off, b.bytes, b.start, b.stop});
    if (b.v >= 0)
      plan.values[b.v].arena_offset = off;
    else
      plan.steps[-1 - b.v].workspace_offset = off;
    arena = std::max(arena, off + b.bytes);
  }
  for (int v = 0; v < nv; ++v)
    if (share[v] >= 0) plan.values[v].arena_offset = plan.values[owner(v)].arena_offset;
  mem.arena_bytes = arena;
}

}  // namespace xpuruntime::graph
