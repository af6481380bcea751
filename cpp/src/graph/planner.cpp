#include "graph/planner.h"

#include <algorithm>
#include <map>

#include "xpuruntime/error.h"
#include "xpuruntime/ops/op_schema.h"

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
  for (PlanStep& st : plan.steps) {
    const ops::OpSchema* schema = ops::find_schema(st.node.op_type);
    if (schema == nullptr || !schema->alias) continue;
    int live_outputs = 0;
    for (int o : st.node.outputs) live_outputs += o >= 0;
    const int out = st.node.outputs[0];
    if (live_outputs != 1 || out < 0 || st.node.inputs.empty() || st.node.inputs[0] < 0) continue;
    if (plan.values[out].kind != PlanValue::Kind::kIntermediate) continue;
    int src = st.node.inputs[0];
    while (plan.values[src].alias_of >= 0) src = plan.values[src].alias_of;
    // A view of an output would alias memory handed to the caller mid-run: copy instead.
    if (plan.values[src].kind == PlanValue::Kind::kOutput) continue;
    st.alias = true;
    plan.values[out].alias_of = src;
  }
}

void plan_memory(ExecutionPlan& plan) {
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
    int v;
    int64_t bytes;
    int start, stop;
  };
  std::vector<Buf> bufs;
  MemoryReport& mem = plan.memory;
  mem = MemoryReport{};
  for (const HostTensor& c : plan.constants) mem.constant_bytes += static_cast<int64_t>(c.nbytes());
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
    bufs.push_back({v, b, def_step[v], std::max(end[v], def_step[v])});
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
    plan.values[b.v].arena_offset = off;
    arena = std::max(arena, off + b.bytes);
  }
  mem.arena_bytes = arena;
}

}  // namespace xpuruntime::graph
