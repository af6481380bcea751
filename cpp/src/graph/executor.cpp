// The device-neutral executor (executor.h).
#include "xpuruntime/graph/executor.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "graph/passes.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/op_schema.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime::graph {
namespace {

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

std::size_t nbytes_of(DType dtype, const Shape& shape) {
  return static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
}

// Run-time shaped buffers and their high-water mark; the RunResources frees what is
// left on every path out of run().
struct DynamicBuffers {
  RunResources* res = nullptr;
  int64_t bytes = 0, peak = 0;
  void* get(std::size_t n) {
    void* p = res->allocate(n);
    bytes += static_cast<int64_t>(n);
    peak = std::max(peak, bytes);
    return p;
  }
  void put(void* p, std::size_t n) {
    res->release(p);
    bytes -= static_cast<int64_t>(n);
  }
};

}  // namespace

Executor::Executor(std::shared_ptr<const ExecutionPlan> plan) : plan_(std::move(plan)) {
  XRT_CHECK(plan_ != nullptr, InvalidArgumentError, "Executor needs a plan");
  provider_ = ProviderRegistry::instance().get(plan_->header.device);
  for (const PlanStep& s : plan_->steps) {
    XRT_CHECK(s.alias || s.prepared != nullptr, InvalidArgumentError, s.node.where(),
              ": the plan step has no prepared kernel '", s.kernel,
              "'; plans from compile() or ExecutionPlan::load() have one");
    if (s.prepared) workspace_bytes_ = std::max(workspace_bytes_, s.prepared->workspace_bytes());
    const ops::OpSchema* schema = ops::find_schema(s.node.op_type);
    bool dynamic = false;
    for (int o : s.node.outputs)
      if (o >= 0 && !plan_->values[o].shape) dynamic = true;
    XRT_CHECK(schema != nullptr || !dynamic, UnsupportedOperationError, s.node.where(),
              ": op '", s.node.op_type, "' has no schema in this build, so its run-time output "
              "shape cannot be inferred; recompile the plan with this build");
    schemas_.push_back(schema);
  }
  constants_ = provider_->upload_constants(plan_->constants);
}

Executor::~Executor() = default;

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
  // ---- resources, inputs and constants on the device ----
  const ExecutionProvider& prov = *provider_;
  const bool host = prov.host_memory();
  std::unique_ptr<RunResources> res = prov.begin_run(
      static_cast<std::size_t>(std::max<int64_t>(plan.memory.arena_bytes, 64)), workspace_bytes_);
  char* const arena = static_cast<char*>(res->arena());
  DynamicBuffers dyn;
  dyn.res = res.get();
  RunStats st_out;
  // Host-readable bytes of each value, for shape inference that reads values (a
  // Reshape's shape): the data itself on a host provider; inputs and constants
  // elsewhere (device intermediates are not read on the host).
  std::vector<const void*> host_data(nv, nullptr);
  for (int v : plan.inputs) {
    host_data[v] = data[v];
    if (host) continue;
    const std::size_t n = nbytes_of(plan.values[v].dtype, shapes[v]);
    void* d = res->allocate(n);
    res->copy_to_device(d, data[v], n);
    ++st_out.copies_to_device;
    st_out.copy_bytes += static_cast<int64_t>(n);
    data[v] = d;
  }
  for (int v = 0; v < nv; ++v) {
    const PlanValue& pv = plan.values[v];
    if (pv.constant >= 0) {
      const HostTensor& c = plan.constants[pv.constant];
      data[v] = constants_->data(pv.constant);
      host_data[v] = c.data ? c.data : g_empty;
      shapes[v] = c.shape;
    }
  }
  std::vector<HostTensor> produced(nv);  // plan outputs written in place (host providers)
  const bool profiling = Profiler::instance().enabled();
  KernelArgs args;
  args.stream = res->stream();
  args.workspace = res->workspace();
  args.workspace_bytes = workspace_bytes_;

  for (std::size_t si = 0; si < plan.steps.size(); ++si) {
    const PlanStep& st = plan.steps[si];
    const Node& n = st.node;
    args.inputs.clear();
    args.outputs.clear();
    bool dynamic = false;
    for (int i : n.inputs) {
      if (i < 0) {
        args.inputs.push_back(TensorArg{});
        continue;
      }
      const PlanValue& pv = plan.values[i];
      XRT_CHECK(data[i] != nullptr, InvalidModelError, n.where(), ": input '", pv.name,
                "' has no data (plan is inconsistent)");
      args.inputs.push_back(TensorArg{pv.dtype, shapes[i], data[i]});
    }
    for (int o : n.outputs)
      if (o >= 0 && !plan.values[o].shape) dynamic = true;
    if (dynamic) {
      std::vector<ops::Meta> metas(n.inputs.size());
      for (std::size_t k = 0; k < n.inputs.size(); ++k) {
        const int i = n.inputs[k];
        if (i < 0) continue;
        metas[k].present = true;
        metas[k].dtype = plan.values[i].dtype;
        metas[k].shape = shapes[i];
        metas[k].data = host ? data[i] : host_data[i];
      }
      std::vector<ops::Meta> om(n.outputs.size());
      schemas_[si]->infer(n, metas, om);
      for (std::size_t k = 0; k < om.size(); ++k) {
        const int o = n.outputs[k];
        if (o < 0) continue;
        XRT_CHECK(om[k].shape.has_value(), InvalidModelError, n.where(),
                  ": could not determine the output shape at run time",
                  host ? "" : " (it depends on a value computed on the device)");
        shapes[o] = *om[k].shape;
        passes::check_tensor_size(n, plan.values[o].name, om[k].dtype, shapes[o]);
      }
    } else {
      for (int o : n.outputs)
        if (o >= 0) shapes[o] = *plan.values[o].shape;
    }
    for (std::size_t k = 0; k < n.outputs.size(); ++k) {
      const int o = n.outputs[k];
      if (o < 0) {
        args.outputs.push_back(TensorArg{});
        continue;
      }
      const PlanValue& pv = plan.values[o];
      if (st.alias && k == 0) {
        data[o] = args.inputs[0].data;
        host_data[o] = host_data[n.inputs[0]];
      } else if (pv.kind == PlanValue::Kind::kOutput && host) {
        produced[o] = HostTensor::alloc(pv.dtype, shapes[o]);
        data[o] = produced[o].data ? produced[o].data : g_empty;
      } else if (pv.arena_offset >= 0) {
        data[o] = arena + pv.arena_offset;
      } else {
        // Run-time shaped intermediates, and outputs on a device (copied out at the end).
        data[o] = pv.kind == PlanValue::Kind::kOutput ? res->allocate(nbytes_of(pv.dtype, shapes[o]))
                                                      : dyn.get(nbytes_of(pv.dtype, shapes[o]));
      }
      args.outputs.push_back(TensorArg{pv.dtype, shapes[o], data[o]});
    }
    if (!st.alias) {
      if (profiling) {
        ProfileRange r(n.op_type + ":" + n.name);
        st.prepared->run(args);
      } else {
        st.prepared->run(args);
      }
      ++st_out.steps_run;
    }
    // Free run-time shaped buffers whose last reader was this step.
    for (int i : n.inputs) {
      if (i < 0) continue;
      const PlanValue& pv = plan.values[i];
      if (pv.last_use == static_cast<int>(si) && pv.kind == PlanValue::Kind::kIntermediate &&
          pv.arena_offset < 0 && pv.alias_of < 0 && !pv.shape) {
        dyn.put(data[i], nbytes_of(pv.dtype, shapes[i]));
      }
    }
  }
  // ---- outputs to the caller ----
  std::vector<HostTensor> result;
  result.reserve(want.size());
  for (int v : want) {
    const PlanValue& pv = plan.values[v];
    if (produced[v].defined()) {
      result.push_back(produced[v]);
      continue;
    }
    HostTensor t = HostTensor::alloc(pv.dtype, shapes[v]);
    if (t.nbytes()) {
      if (host) {
        // An output that is a graph input or a constant: hand out a copy.
        std::memcpy(t.data, data[v], t.nbytes());
      } else {
        res->copy_to_host(t.data, data[v], t.nbytes());
        ++st_out.copies_to_host;
        st_out.copy_bytes += static_cast<int64_t>(t.nbytes());
      }
    }
    result.push_back(std::move(t));
  }
  res->synchronize();
  st_out.dynamic_bytes_peak = dyn.peak;
  if (stats) *stats = st_out;
  return result;
}

}  // namespace xpuruntime::graph
