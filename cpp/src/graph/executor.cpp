#include "xpuruntime/graph/executor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "backends/cpu/ops/cpu_op.h"
#include "graph/passes.h"
#include "xpuruntime/error.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/profiler.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace xpuruntime::graph {
namespace {

using cpu::Meta;
using cpu::OpDef;
using cpu::TensorView;

// Present tensors always have a non-null pointer, even when empty.
alignas(64) char g_empty[64];

std::string decl_str(const PlanValue& v) {
  std::ostringstream os;
  os << dtype_name(v.dtype) << "[";
  if (v.declared) {
    for (std::size_t i = 0; i < v.declared->size(); ++i) {
      const Dim& d = (*v.declared)[i];
      os << (i ? ", " : "") << (d.value >= 0 ? std::to_string(d.value) : (d.symbol.empty() ? "?" : d.symbol));
    }
  } else if (v.shape) {
    for (std::size_t i = 0; i < v.shape->size(); ++i) os << (i ? ", " : "") << (*v.shape)[i];
  } else {
    os << "?";
  }
  os << "]";
  return os.str();
}

// Frees run-time shaped buffers on every path out of run().
struct DynamicPool {
  CachingAllocator* alloc = nullptr;
  std::vector<void*> live;
  int64_t bytes = 0, peak = 0;
  void* get(std::size_t n) {
    void* p = alloc->allocate(std::max<std::size_t>(n, 1));
    live.push_back(p);
    bytes += static_cast<int64_t>(n);
    peak = std::max(peak, bytes);
    return p;
  }
  void put(void* p, std::size_t n) {
    auto it = std::find(live.begin(), live.end(), p);
    if (it == live.end()) return;
    live.erase(it);
    alloc->free(p);
    bytes -= static_cast<int64_t>(n);
  }
  ~DynamicPool() {
    for (void* p : live) alloc->free(p);
  }
};

}  // namespace

Executor::Executor(std::shared_ptr<const ExecutionPlan> plan) : plan_(std::move(plan)) {
  XRT_CHECK(plan_ != nullptr, InvalidArgumentError, "Executor needs a plan");
  XRT_CHECK(plan_->header.device == "cpu", UnsupportedOperationError, "plan device '",
            plan_->header.device, "' cannot run on the CPU executor");
  for (const PlanStep& s : plan_->steps) {
    const std::string kernel = cpu::op_defs(s.node.op_type).empty() ? "" :
        (cpu::op_defs(s.node.op_type).front()->uses_gemm ? cpu::op_defs(s.node.op_type).front()->kernel
                                                          : s.kernel);
    const OpDef* d = cpu::find_op_def(s.node.op_type, kernel);
    XRT_CHECK(d != nullptr, UnsupportedOperationError, s.node.where(),
              ": no CPU kernel '", s.kernel, "' in this build (the plan needs it); recompile the plan");
    defs_.push_back(d);
  }
}

Executor::~Executor() {
  auto& a = MemoryManager::instance().allocator(Device::cpu());
  for (void* p : free_arenas_) a.free(p);
}

void* Executor::acquire_arena() const {
  {
    std::lock_guard<std::mutex> lk(arena_mu_);
    if (!free_arenas_.empty()) {
      void* p = free_arenas_.back();
      free_arenas_.pop_back();
      return p;
    }
  }
  return MemoryManager::instance().allocator(Device::cpu()).allocate(
      static_cast<std::size_t>(std::max<int64_t>(plan_->memory.arena_bytes, 64)));
}

void Executor::release_arena(void* p) const {
  std::lock_guard<std::mutex> lk(arena_mu_);
  free_arenas_.push_back(p);
}

std::string Executor::describe_inputs() const {
  std::ostringstream os;
  for (std::size_t i = 0; i < plan_->inputs.size(); ++i) {
    const PlanValue& v = plan_->values[plan_->inputs[i]];
    os << (i ? ", " : "") << v.name << ": " << decl_str(v);
  }
  return os.str();
}

std::vector<HostTensor> Executor::run(const std::vector<std::string>& input_names,
                                      const std::vector<HostTensor>& inputs,
                                      const std::vector<std::string>& output_names,
                                      RunStats* stats) const {
  const ExecutionPlan& plan = *plan_;
  XRT_CHECK(input_names.size() == inputs.size(), InvalidArgumentError,
            "got ", input_names.size(), " input names but ", inputs.size(), " tensors");
  const int nv = static_cast<int>(plan.values.size());
  std::vector<void*> data(nv, nullptr);
  std::vector<Shape> shapes(nv);
  std::vector<char> bound(nv, 0);

  // ---- bind and validate inputs ----
  std::map<std::string, int64_t> symbols;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string& name = input_names[i];
    int id = -1;
    for (int v : plan.inputs)
      if (plan.values[v].name == name) id = v;
    XRT_CHECK(id >= 0, InvalidArgumentError, "unknown input name '", name,
              "'; the model's inputs are: ", describe_inputs());
    XRT_CHECK(!bound[id], InvalidArgumentError, "input '", name, "' given twice");
    const PlanValue& pv = plan.values[id];
    const HostTensor& t = inputs[i];
    XRT_CHECK(t.dtype == pv.dtype, InvalidArgumentError, "input '", name, "' has dtype ",
              dtype_name(t.dtype), " but the model expects ", decl_str(pv));
    const std::size_t rank = pv.declared ? pv.declared->size() : (pv.shape ? pv.shape->size() : t.shape.size());
    XRT_CHECK(t.shape.size() == rank, InvalidArgumentError, "input '", name, "' has rank ",
              t.shape.size(), " (shape ", shape_str(t.shape), ") but the model expects ", decl_str(pv));
    for (std::size_t d = 0; d < rank; ++d) {
      int64_t want = -1;
      if (pv.shape) want = (*pv.shape)[d];
      if (want < 0 && pv.declared && (*pv.declared)[d].value >= 0) want = (*pv.declared)[d].value;
      XRT_CHECK(want < 0 || t.shape[d] == want, InvalidArgumentError, "input '", name, "' has shape ",
                shape_str(t.shape), " but the model expects ", decl_str(pv),
                pv.shape ? " (this plan was compiled for " + shape_str(*pv.shape) + ")" : "",
                ": dimension ", d, " must be ", want);
      if (want < 0 && pv.declared && !(*pv.declared)[d].symbol.empty()) {
        auto [it, fresh] = symbols.emplace((*pv.declared)[d].symbol, t.shape[d]);
        XRT_CHECK(fresh || it->second == t.shape[d], InvalidArgumentError, "input '", name,
                  "' dimension ", d, " ('", it->first, "') is ", t.shape[d],
                  " but another input set '", it->first, "' to ", it->second);
      }
    }
    bound[id] = 1;
    data[id] = t.data ? t.data : g_empty;
    shapes[id] = t.shape;
  }
  for (int v : plan.inputs) {
    XRT_CHECK(bound[v], InvalidArgumentError, "missing input '", plan.values[v].name,
              "'; the model's inputs are: ", describe_inputs());
  }
  // ---- outputs requested ----
  std::vector<int> want;
  if (output_names.empty()) {
    want = plan.outputs;
  } else {
    for (const std::string& n : output_names) {
      int id = -1;
      for (int v : plan.outputs)
        if (plan.values[v].name == n) id = v;
      if (id < 0) {
        std::string all;
        for (int v : plan.outputs) all += (all.empty() ? "" : ", ") + plan.values[v].name;
        XRT_THROW(InvalidArgumentError, "unknown output name '", n, "'; the model's outputs are: ", all);
      }
      want.push_back(id);
    }
  }
  // ---- constants, arena, outputs ----
  for (int v = 0; v < nv; ++v) {
    const PlanValue& pv = plan.values[v];
    if (pv.constant >= 0) {
      const HostTensor& c = plan.constants[pv.constant];
      data[v] = c.data ? c.data : g_empty;
      shapes[v] = c.shape;
    }
  }
  void* arena = acquire_arena();
  struct ArenaGuard {
    const Executor* ex;
    void* p;
    ~ArenaGuard() { ex->release_arena(p); }
  } arena_guard{this, arena};
  DynamicPool dyn;
  dyn.alloc = &MemoryManager::instance().allocator(Device::cpu());
  std::vector<HostTensor> produced(nv);  // plan outputs
#ifdef _OPENMP
  // Each run sets its own thread's team size (an ICV of the calling thread).
  const char* env = std::getenv("XRT_NUM_THREADS");
  if (env && std::atoi(env) > 0) omp_set_num_threads(std::atoi(env));
#endif
  const bool profiling = Profiler::instance().enabled();

  for (std::size_t si = 0; si < plan.steps.size(); ++si) {
    const PlanStep& st = plan.steps[si];
    const Node& n = st.node;
    const OpDef& def = *static_cast<const OpDef*>(defs_[si]);
    std::vector<TensorView> in;
    in.reserve(n.inputs.size());
    bool dynamic = false;
    for (int i : n.inputs) {
      if (i < 0) {
        in.push_back(TensorView{});
        continue;
      }
      const PlanValue& pv = plan.values[i];
      XRT_CHECK(data[i] != nullptr, InvalidModelError, n.where(), ": input '", pv.name,
                "' has no data (plan is inconsistent)");
      in.push_back(TensorView{pv.dtype, shapes[i], data[i]});
    }
    for (int o : n.outputs)
      if (o >= 0 && !plan.values[o].shape) dynamic = true;
    std::vector<Shape> out_shapes(n.outputs.size());
    if (dynamic) {
      std::vector<Meta> metas(in.size());
      for (std::size_t k = 0; k < in.size(); ++k) {
        metas[k].present = in[k].data != nullptr;
        metas[k].dtype = in[k].dtype;
        metas[k].shape = in[k].shape;
        metas[k].data = in[k].data;
      }
      std::vector<Meta> om(n.outputs.size());
      def.infer(n, metas, om);
      for (std::size_t k = 0; k < om.size(); ++k)
        if (n.outputs[k] >= 0) {
          XRT_CHECK(om[k].shape.has_value(), InvalidModelError, n.where(),
                    ": could not determine the output shape at run time");
          out_shapes[k] = *om[k].shape;
          passes::check_tensor_size(n, plan.values[n.outputs[k]].name, om[k].dtype, out_shapes[k]);
        }
    } else {
      for (std::size_t k = 0; k < n.outputs.size(); ++k)
        if (n.outputs[k] >= 0) out_shapes[k] = *plan.values[n.outputs[k]].shape;
    }
    std::vector<TensorView> out;
    out.reserve(n.outputs.size());
    for (std::size_t k = 0; k < n.outputs.size(); ++k) {
      const int o = n.outputs[k];
      if (o < 0) {
        out.push_back(TensorView{});
        continue;
      }
      const PlanValue& pv = plan.values[o];
      shapes[o] = out_shapes[k];
      const std::size_t nbytes = static_cast<std::size_t>(shape_numel(out_shapes[k])) * dtype_size(pv.dtype);
      if (st.alias && k == 0) {
        data[o] = in[0].data;
      } else if (pv.kind == PlanValue::Kind::kOutput) {
        produced[o] = HostTensor::alloc(pv.dtype, out_shapes[k]);
        data[o] = produced[o].data;
      } else if (pv.arena_offset >= 0) {
        data[o] = static_cast<char*>(arena) + pv.arena_offset;
      } else {
        data[o] = dyn.get(nbytes);
      }
      out.push_back(TensorView{pv.dtype, out_shapes[k], data[o]});
    }
    if (!st.alias) {
      if (profiling) {
        ProfileRange r(n.op_type + ":" + n.name);
        def.run(n, in, out);
      } else {
        def.run(n, in, out);
      }
    }
    // Free run-time shaped buffers whose last reader was this step.
    for (int i : n.inputs) {
      if (i < 0) continue;
      const PlanValue& pv = plan.values[i];
      if (pv.last_use == static_cast<int>(si) && pv.kind == PlanValue::Kind::kIntermediate &&
          pv.arena_offset < 0 && pv.alias_of < 0 && !pv.shape) {
        dyn.put(data[i], static_cast<std::size_t>(shape_numel(shapes[i])) * dtype_size(pv.dtype));
      }
    }
  }
  std::vector<HostTensor> result;
  for (int v : want) {
    const PlanValue& pv = plan.values[v];
    if (produced[v].defined()) {
      result.push_back(produced[v]);
      continue;
    }
    // An output that is a graph input or a constant: hand out a copy.
    HostTensor t = HostTensor::alloc(pv.dtype, shapes[v]);
    if (t.nbytes()) std::memcpy(t.data, data[v], t.nbytes());
    result.push_back(std::move(t));
  }
  if (stats) stats->dynamic_bytes_peak = dyn.peak;
  return result;
}

}  // namespace xpuruntime::graph
