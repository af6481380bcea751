// The device-neutral executor (executor.h).
#include "xpuruntime/graph/executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <sstream>

#include "graph/passes.h"
#include "xpuruntime/error.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/ops/op_schema.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime::graph {
namespace {

// Present tensors always have a non-null pointer, even when empty.
alignas(64) char g_empty[64];

// A host output the kernel writes in full: not zero-filled, and taken from the CPU
// caching allocator, where the caller's array returns it when freed. A fresh
// allocation per run would be mapped anew each time (glibc maps blocks this large on
// their own), paying a page fault and the kernel's page clearing per 4 KB: a Relu over
// 54 MB spent most of its run there.
HostTensor host_output(DType dtype, Shape shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  const std::size_t bytes = t.nbytes();
  if (bytes == 0) return HostTensor::alloc(dtype, t.shape);
  CachingAllocator& a = MemoryManager::instance().allocator(Device::cpu());
  void* p = a.allocate(bytes);
  t.holder = std::shared_ptr<void>(p, [&a](void* q) noexcept {
    try {
      a.free(q);
    } catch (...) {  // a deleter must not throw; the block is then merely not reused
    }
  });
  t.data = p;
  return t;
}

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

struct Executor::Binding {
  std::vector<void*> data;
  std::vector<Shape> shapes;
  // Host-readable bytes of each value, for shape inference that reads values (a
  // Reshape's shape): host inputs and constants (device values are not read).
  std::vector<const void*> host_data;
  std::vector<char> on_device;        // per value: a bound input that is device memory
  std::vector<void*> out_target;      // per value: the buffer a plan output is written into
  std::vector<const Shape*> out_shape;  // per value: that buffer's shape
  std::vector<int> want;              // requested outputs
  std::vector<const EdgeTensor*> out_buf;  // per requested output: the caller's buffer or null
  std::vector<HostTensor> produced;   // host providers: outputs written in place
  bool host_io = false;               // some input or output is host memory
};

// The captured plan: the run resources (arena, workspace, a stream) live as long as
// the executor. The graph reads its inputs and writes its outputs either where the
// caller's device buffers were when it was captured (runs that pass those buffers
// again replay it with no copies) or in buffers of the plan's own, which runs copy
// into and out of. One replay at a time (mu).
struct Executor::GraphState {
  std::mutex mu;
  DeviceBackend::GraphOps* ops = nullptr;
  int device_index = 0;
  std::unique_ptr<RunResources> res;
  std::vector<void*> in_buf, out_buf;  // per value id: the plan's own edge buffers, or null
  std::vector<void*> data;             // every value's address in the captured graph
  // graph_signature of the buffers the graph was captured on, and of the last run.
  std::vector<void*> bound, last;
  NativeGraph graph = nullptr;
  std::string failed;  // why capture failed (then runs go step by step)
  double first_run_ms = -1, capture_ms = -1;  // the capturing run's two parts
  ~GraphState() {
    if (graph != nullptr && ops != nullptr) ops->destroy(device_index, graph);
  }
};

namespace {
// Which plan constants some step (or the caller, as an output) reads on the device:
// not those whose every reader packed its own copy (PreparedKernel::packs_constant).
std::vector<bool> constants_read_on_device(const ExecutionPlan& p) {
  std::vector<bool> read(p.constants.size(), false);
  auto mark = [&](int v) {
    if (v >= 0 && p.values[v].kind == PlanValue::Kind::kConstant) read[p.values[v].constant] = true;
  };
  for (int v : p.outputs) mark(v);
  for (const PlanStep& s : p.steps)
    for (std::size_t i = 0; i < s.node.inputs.size(); ++i)
      if (s.alias || !s.prepared || !s.prepared->packs_constant(i)) mark(s.node.inputs[i]);
  return read;
}

// Whether step `s` runs on its workspace inside the arena (PlanStep::workspace_offset).
bool arena_workspace(const PlanStep& s) {
  return s.workspace_offset >= 0 && s.prepared &&
         s.prepared->workspace_bytes() <= static_cast<std::size_t>(s.workspace_bytes);
}
}  // namespace

Executor::Executor(std::shared_ptr<const ExecutionPlan> plan) : plan_(std::move(plan)) {
  XRT_CHECK(plan_ != nullptr, InvalidArgumentError, "Executor needs a plan");
  XRT_CHECK(!plan_->header.preview, InvalidArgumentError, "the plan is an offline preview (",
            "compiled with dry_run for ", plan_->header.device,
            "): it shows what would run but has no prepared kernels; compile it without "
            "dry_run on a machine with the device to run it");
  provider_ = ProviderRegistry::instance().get(plan_->header.device);
  bool all_static = true;
  for (const PlanStep& s : plan_->steps) {
    XRT_CHECK(s.alias || s.prepared != nullptr, InvalidArgumentError, s.node.where(),
              ": the plan step has no prepared kernel '", s.kernel,
              "'; plans from compile() or ExecutionPlan::load() have one");
    // The shared workspace serves the steps without one planned in the arena (and a
    // loaded kernel that asks for more than its plan planned).
    if (s.prepared && !arena_workspace(s))
      workspace_bytes_ = std::max(workspace_bytes_, s.prepared->workspace_bytes());
    const ops::OpSchema* schema = ops::find_schema(s.node.op_type);
    bool dynamic = false;
    for (int o : s.node.outputs)
      if (o >= 0 && !plan_->values[o].shape) dynamic = true;
    XRT_CHECK(schema != nullptr || !dynamic, UnsupportedOperationError, s.node.where(),
              ": op '", s.node.op_type, "' has no schema in this build, so its run-time output "
              "shape cannot be inferred; recompile the plan with this build");
    all_static = all_static && !dynamic;
    schemas_.push_back(schema);
  }
  for (int v : plan_->inputs) all_static = all_static && plan_->values[v].shape.has_value();
  const auto t0 = std::chrono::steady_clock::now();
  constants_ = provider_->upload_constants(plan_->constants, constants_read_on_device(*plan_));
  upload_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  DeviceBackend::GraphOps* ops = provider_->graph_ops();
  if (ops == nullptr) {
    graph_unavailable_ = "the '" + provider_->name() + "' execution provider cannot capture graphs";
  } else if (!all_static) {
    graph_unavailable_ =
        "the plan has shapes known only at run time (compile it for fixed input shapes to capture it)";
  } else {
    graph_ = std::make_unique<GraphState>();
    graph_->ops = ops;
    graph_->device_index = provider_->device().index;
  }
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

std::string Executor::graph_unavailable_reason() const {
  if (!graph_unavailable_.empty()) return graph_unavailable_;
  std::lock_guard lock(graph_->mu);
  return graph_->failed;
}

std::map<std::string, double> Executor::timings_ms() const {
  std::map<std::string, double> t{{"upload", upload_ms_}};
  if (!graph_) return t;
  std::lock_guard lock(graph_->mu);
  if (graph_->first_run_ms >= 0) t["graph_first_run"] = graph_->first_run_ms;
  if (graph_->capture_ms >= 0) t["graph_capture"] = graph_->capture_ms;
  return t;
}

std::string Executor::graph_status() const {
  if (!graph_unavailable_.empty()) return graph_unavailable_;
  std::lock_guard lock(graph_->mu);
  if (!graph_->failed.empty()) return graph_->failed;
  return graph_->graph != nullptr ? "captured" : "not captured yet";
}

std::vector<HostTensor> Executor::run(const std::vector<std::string>& input_names,
                                      const std::vector<HostTensor>& inputs,
                                      const std::vector<std::string>& output_names,
                                      RunStats* stats) const {
  XRT_CHECK(input_names.size() == inputs.size(), InvalidArgumentError,
            "got ", input_names.size(), " input names but ", inputs.size(), " tensors");
  RunRequest req;
  req.input_names = input_names;
  req.output_names = output_names;
  req.inputs.reserve(inputs.size());
  for (const HostTensor& t : inputs) req.inputs.push_back(EdgeTensor{t.dtype, t.shape, t.data, false});
  return run(req, stats);
}

Executor::Binding Executor::bind(const RunRequest& req) const {
  const ExecutionPlan& plan = *plan_;
  XRT_CHECK(req.input_names.size() == req.inputs.size(), InvalidArgumentError,
            "got ", req.input_names.size(), " input names but ", req.inputs.size(), " tensors");
  const bool host = provider_->host_memory();
  const int nv = static_cast<int>(plan.values.size());
  Binding b;
  b.data.assign(nv, nullptr);
  b.shapes.resize(nv);
  b.host_data.assign(nv, nullptr);
  b.on_device.assign(nv, 0);
  b.out_target.assign(nv, nullptr);
  b.out_shape.assign(nv, nullptr);
  b.produced.resize(nv);
  std::vector<char> bound(nv, 0);
  std::map<std::string, int64_t> symbols;
  for (std::size_t i = 0; i < req.inputs.size(); ++i) {
    const std::string& name = req.input_names[i];
    int id = -1;
    for (int v : plan.inputs)
      if (plan.values[v].name == name) id = v;
    XRT_CHECK(id >= 0, InvalidArgumentError, "unknown input name '", name,
              "'; the model's inputs are: ", describe_inputs());
    XRT_CHECK(!bound[id], InvalidArgumentError, "input '", name, "' given twice");
    const PlanValue& pv = plan.values[id];
    const EdgeTensor& t = req.inputs[i];
    XRT_CHECK(!t.on_device || !host, InvalidArgumentError, "input '", name,
              "' is in device memory but the plan runs on '", provider_->name(),
              "'; pass a host array, or compile the model for that device");
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
    b.data[id] = t.data ? t.data : g_empty;
    b.host_data[id] = t.on_device ? nullptr : b.data[id];
    b.on_device[id] = t.on_device ? 1 : 0;
    b.shapes[id] = t.shape;
    b.host_io = b.host_io || !t.on_device;
  }
  for (int v : plan.inputs) {
    XRT_CHECK(bound[v], InvalidArgumentError, "missing input '", plan.values[v].name,
              "'; the model's inputs are: ", describe_inputs());
  }
  if (req.output_names.empty()) {
    b.want = plan.outputs;
  } else {
    for (const std::string& n : req.output_names) {
      int id = -1;
      for (int v : plan.outputs)
        if (plan.values[v].name == n) id = v;
      if (id < 0) {
        std::string all;
        for (int v : plan.outputs) all += (all.empty() ? "" : ", ") + plan.values[v].name;
        XRT_THROW(InvalidArgumentError, "unknown output name '", n, "'; the model's outputs are: ", all);
      }
      b.want.push_back(id);
    }
  }
  b.out_buf.assign(b.want.size(), nullptr);
  if (req.outputs.empty()) {
    b.host_io = true;
  } else {
    XRT_CHECK(req.outputs.size() == b.want.size(), InvalidArgumentError, "got ", req.outputs.size(),
              " output buffers for ", b.want.size(), " requested outputs; pass one per output or none");
  }
  for (std::size_t i = 0; i < req.outputs.size(); ++i) {
    const EdgeTensor& t = req.outputs[i];
    const PlanValue& pv = plan.values[b.want[i]];
    XRT_CHECK(!t.on_device || !host, InvalidArgumentError, "output buffer for '", pv.name,
              "' is in device memory but the plan runs on '", provider_->name(), "'; pass a host array");
    XRT_CHECK(t.dtype == pv.dtype, InvalidArgumentError, "output buffer for '", pv.name, "' has dtype ",
              dtype_name(t.dtype), " but the output is ", dtype_name(pv.dtype));
    XRT_CHECK(!pv.shape || *pv.shape == t.shape, InvalidArgumentError, "output buffer for '", pv.name,
              "' has shape ", shape_str(t.shape), " but the output is ", shape_str(*pv.shape));
    XRT_CHECK(t.data != nullptr || shape_numel(t.shape) == 0, InvalidArgumentError,
              "output buffer for '", pv.name, "' has no data");
    b.out_buf[i] = &t;
    b.host_io = b.host_io || !t.on_device;
    // Written by its producing kernel where the buffer lives where the kernels write
    // (a second request of the same output gets a copy).
    const int v = b.want[i];
    if (t.on_device != host && b.out_target[v] == nullptr && pv.kind == PlanValue::Kind::kOutput &&
        t.data != nullptr) {
      b.out_target[v] = t.data;
      b.out_shape[v] = &t.shape;
    }
  }
  for (int v = 0; v < nv; ++v) {
    const PlanValue& pv = plan.values[v];
    if (pv.constant >= 0) {
      const HostTensor& c = plan.constants[pv.constant];
      b.data[v] = constants_->data(pv.constant);
      b.host_data[v] = c.data ? c.data : g_empty;
      b.shapes[v] = c.shape;
    }
  }
  return b;
}

void Executor::run_steps(Binding& b, RunResources& res, RunStats& stats) const {
  const ExecutionPlan& plan = *plan_;
  const bool host = provider_->host_memory();
  char* const arena = static_cast<char*>(res.arena());
  DynamicBuffers dyn;
  dyn.res = &res;
  const bool profiling = Profiler::instance().enabled();
  KernelArgs args;
  args.stream = res.stream();
  args.workspace = res.workspace();
  args.workspace_bytes = workspace_bytes_;
  auto& data = b.data;
  auto& shapes = b.shapes;
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
      // A constant off the device (null) is read by packed copies only.
      XRT_CHECK(data[i] != nullptr || pv.kind == PlanValue::Kind::kConstant, InvalidModelError,
                n.where(), ": input '", pv.name, "' has no data (plan is inconsistent)");
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
        metas[k].data = host ? data[i] : b.host_data[i];
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
        b.host_data[o] = b.host_data[n.inputs[0]];
      } else if (pv.output_home >= 0) {
        // Written straight into the graph output it becomes through a view step.
        const int y = pv.output_home;
        const PlanValue& yv = plan.values[y];
        if (b.out_target[y] != nullptr) {
          XRT_CHECK(*b.out_shape[y] == *yv.shape, InvalidArgumentError, "output buffer for '",
                    yv.name, "' has shape ", shape_str(*b.out_shape[y]),
                    " but this run's output is ", shape_str(*yv.shape));
          data[o] = b.out_target[y];
        } else if (host) {
          b.produced[y] = host_output(yv.dtype, *yv.shape);
          data[o] = b.produced[y].data ? b.produced[y].data : g_empty;
        } else {
          data[o] = res.allocate(nbytes_of(yv.dtype, *yv.shape));
        }
      } else if (b.out_target[o] != nullptr) {
        XRT_CHECK(*b.out_shape[o] == shapes[o], InvalidArgumentError, "output buffer for '", pv.name,
                  "' has shape ", shape_str(*b.out_shape[o]), " but this run's output is ",
                  shape_str(shapes[o]));
        data[o] = b.out_target[o];
      } else if (pv.kind == PlanValue::Kind::kOutput && host) {
        b.produced[o] = host_output(pv.dtype, shapes[o]);
        data[o] = b.produced[o].data ? b.produced[o].data : g_empty;
      } else if (pv.arena_offset >= 0) {
        data[o] = arena + pv.arena_offset;
      } else {
        // Run-time shaped intermediates, and outputs on a device (copied out at the end).
        data[o] = pv.kind == PlanValue::Kind::kOutput ? res.allocate(nbytes_of(pv.dtype, shapes[o]))
                                                      : dyn.get(nbytes_of(pv.dtype, shapes[o]));
      }
      args.outputs.push_back(TensorArg{pv.dtype, shapes[o], data[o]});
    }
    if (arena_workspace(st)) {
      args.workspace = arena + st.workspace_offset;
      args.workspace_bytes = static_cast<std::size_t>(st.workspace_bytes);
    } else {
      args.workspace = res.workspace();
      args.workspace_bytes = workspace_bytes_;
    }
    if (!st.alias) {
      if (profiling) {
        ProfileRange r(n.op_type + ":" + n.name);
        st.prepared->run(args);
      } else {
        st.prepared->run(args);
      }
      ++stats.steps_run;
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
  stats.dynamic_bytes_peak = std::max(stats.dynamic_bytes_peak, dyn.peak);
}

std::vector<HostTensor> Executor::finish(Binding& b, RunResources& res, RunStats& stats) const {
  const ExecutionPlan& plan = *plan_;
  const bool host = provider_->host_memory();
  std::vector<HostTensor> result;
  result.reserve(b.want.size());
  for (std::size_t i = 0; i < b.want.size(); ++i) {
    const int v = b.want[i];
    const PlanValue& pv = plan.values[v];
    const EdgeTensor* buf = b.out_buf[i];
    if (buf != nullptr) {
      const std::size_t n = nbytes_of(pv.dtype, b.shapes[v]);
      XRT_CHECK(buf->shape == b.shapes[v], InvalidArgumentError, "output buffer for '", pv.name,
                "' has shape ", shape_str(buf->shape), " but this run's output is ", shape_str(b.shapes[v]));
      if (buf->data != b.data[v] && n > 0) {
        if (host) {
          std::memcpy(buf->data, b.data[v], n);
        } else if (buf->on_device) {
          res.copy_on_device(buf->data, b.data[v], n);
          ++stats.copies_on_device;
          stats.device_copy_bytes += static_cast<int64_t>(n);
        } else {
          res.copy_to_host(buf->data, b.data[v], n);
          ++stats.copies_to_host;
          stats.copy_bytes += static_cast<int64_t>(n);
        }
      }
      result.emplace_back();
      continue;
    }
    if (b.produced[v].defined()) {
      result.push_back(b.produced[v]);
      continue;
    }
    HostTensor t = HostTensor::alloc(pv.dtype, b.shapes[v]);
    if (t.nbytes()) {
      if (host) {
        // An output that is a graph input or a constant: hand out a copy.
        std::memcpy(t.data, b.data[v], t.nbytes());
      } else {
        res.copy_to_host(t.data, b.data[v], t.nbytes());
        ++stats.copies_to_host;
        stats.copy_bytes += static_cast<int64_t>(t.nbytes());
      }
    }
    result.push_back(std::move(t));
  }
  return result;
}

std::vector<void*> Executor::graph_signature(const Binding& b) const {
  const ExecutionPlan& plan = *plan_;
  std::vector<void*> sig;
  sig.reserve(plan.inputs.size() + plan.outputs.size());
  std::vector<std::pair<const char*, const char*>> inputs;  // caller input ranges
  for (int v : plan.inputs) {
    const std::size_t n = nbytes_of(plan.values[v].dtype, b.shapes[v]);
    const bool bind = b.on_device[v] && n > 0;
    sig.push_back(bind ? b.data[v] : nullptr);
    if (b.on_device[v] && n > 0)
      inputs.emplace_back(static_cast<const char*>(b.data[v]),
                          static_cast<const char*>(b.data[v]) + n);
  }
  for (int v : plan.outputs) {
    const PlanValue& pv = plan.values[v];
    void* t = pv.kind == PlanValue::Kind::kOutput ? b.out_target[v] : nullptr;
    const std::size_t n = nbytes_of(pv.dtype, *pv.shape);
    // An output buffer over an input's bytes would be written while the input is
    // still read: that one goes through the plan's buffer.
    for (const auto& [lo, hi] : inputs)
      if (t != nullptr && static_cast<const char*>(t) < hi && lo < static_cast<const char*>(t) + n)
        t = nullptr;
    sig.push_back(n > 0 ? t : nullptr);
  }
  return sig;
}

bool Executor::run_graph(Binding& b, NativeStream caller, RunStats& stats,
                         std::vector<HostTensor>& out) const {
  if (!graph_) return false;
  GraphState& gs = *graph_;
  std::unique_lock lock(gs.mu, std::try_to_lock);
  if (!lock.owns_lock() || !gs.failed.empty()) return false;  // busy (another thread) or failed
  const ExecutionPlan& plan = *plan_;
  const int nv = static_cast<int>(plan.values.size());
  const std::size_t n_in = plan.inputs.size();
  if (!gs.res) {
    gs.res = provider_->begin_run(static_cast<std::size_t>(std::max<int64_t>(plan.memory.arena_bytes, 64)),
                                  workspace_bytes_);
    gs.in_buf.assign(nv, nullptr);
    gs.out_buf.assign(nv, nullptr);
  }
  RunResources& res = *gs.res;
  // Which graph runs: the captured one where this run's buffers are the ones it was
  // captured on; a new capture on them when they repeat the previous run's (a caller
  // that keeps its buffers: no edge copies, no plan buffers for them); else the graph
  // on the plan's own input and output buffers (the "staged" one, all null), with
  // copies at the edges (new buffers every run).
  const std::vector<void*> sig = graph_signature(b);
  const std::vector<void*> staged(sig.size(), nullptr);
  std::vector<void*> use = sig;
  bool capture = false;
  if (gs.graph == nullptr || (sig != gs.bound && sig == gs.last)) {
    capture = true;
  } else if (sig != gs.bound) {
    use = staged;
    capture = gs.bound != staged;
  }
  gs.last = sig;
  if (capture && gs.graph != nullptr) {
    res.synchronize();  // the old graph's replays are done with the buffers it read
    gs.ops->destroy(gs.device_index, gs.graph);
    gs.graph = nullptr;
  }
  if (capture) {
    // The plan's own buffers for what the new graph does not bind; none for the rest.
    auto keep = [&](void*& buf, bool need, std::size_t bytes) {
      if (need && buf == nullptr) buf = res.allocate(bytes);
      if (!need && buf != nullptr) {
        res.release(buf);
        buf = nullptr;
      }
    };
    for (std::size_t i = 0; i < n_in; ++i) {
      const PlanValue& pv = plan.values[plan.inputs[i]];
      keep(gs.in_buf[plan.inputs[i]], use[i] == nullptr, nbytes_of(pv.dtype, *pv.shape));
    }
    for (std::size_t j = 0; j < plan.outputs.size(); ++j) {
      const int v = plan.outputs[j];
      const PlanValue& pv = plan.values[v];
      if (pv.kind != PlanValue::Kind::kOutput) continue;
      keep(gs.out_buf[v], use[n_in + j] == nullptr, nbytes_of(pv.dtype, *pv.shape));
    }
    gs.bound = use;
  }
  if (caller != nullptr) res.wait_for(caller);
  for (std::size_t i = 0; i < n_in; ++i) {
    const int v = plan.inputs[i];
    if (use[i] != nullptr) continue;  // read where the caller holds it
    const std::size_t n = nbytes_of(plan.values[v].dtype, b.shapes[v]);
    if (n > 0 && b.on_device[v]) {
      res.copy_on_device(gs.in_buf[v], b.data[v], n);
      ++stats.copies_on_device;
      stats.device_copy_bytes += static_cast<int64_t>(n);
    } else if (n > 0) {
      res.copy_to_device(gs.in_buf[v], b.data[v], n);
      ++stats.copies_to_device;
      stats.copy_bytes += static_cast<int64_t>(n);
    }
    b.data[v] = gs.in_buf[v];
  }
  if (capture) {
    // The capturing run goes step by step (its outputs are this run's: lazy set-up
    // such as library handles and compiled kernels happens outside the capture),
    // then the same steps are captured.
    for (int v = 0; v < nv; ++v) {
      b.out_target[v] = nullptr;
      b.out_shape[v] = nullptr;
    }
    for (std::size_t j = 0; j < plan.outputs.size(); ++j) {
      const int v = plan.outputs[j];
      if (plan.values[v].kind != PlanValue::Kind::kOutput) continue;
      b.out_target[v] = use[n_in + j] != nullptr ? use[n_in + j] : gs.out_buf[v];
      b.out_shape[v] = &*plan.values[v].shape;
    }
    const std::vector<void*> bound = b.data;
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t0 = Clock::now();
    run_steps(b, res, stats);
    const Clock::time_point t1 = Clock::now();
    gs.first_run_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    gs.data = b.data;
    Binding cap = b;
    cap.data = bound;
    RunStats ignored;
    gs.ops->begin_capture(gs.device_index, res.stream());
    try {
      run_steps(cap, res, ignored);
    } catch (const std::exception& e) {
      try {
        gs.ops->end_capture(gs.device_index, res.stream());
      } catch (...) {
      }
      gs.failed = std::string("capture failed: ") + e.what();
    }
    if (gs.failed.empty()) {
      try {
        gs.graph = gs.ops->end_capture(gs.device_index, res.stream());
        stats.graph_captured = true;
        gs.capture_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
      } catch (const std::exception& e) {
        gs.failed = std::string("capture failed: ") + e.what();
      }
    }
  } else {
    gs.ops->launch(gs.device_index, gs.graph, res.stream());
    stats.graph_replayed = true;
    b.data = gs.data;
    for (int v = 0; v < nv; ++v) b.shapes[v] = plan.values[v].shape ? *plan.values[v].shape : b.shapes[v];
  }
  out = finish(b, res, stats);
  // Device inputs and outputs on the caller's stream: that stream waits for the
  // replay (an event), the host does not, so back-to-back runs keep the GPU busy.
  // The next replay is ordered after this one on the graph's own stream.
  if (caller != nullptr && !b.host_io)
    res.signal(caller);
  else
    res.synchronize();
  return true;
}

std::vector<HostTensor> Executor::run(const RunRequest& req, RunStats* stats) const {
  const ExecutionPlan& plan = *plan_;
  Binding b = bind(req);
  RunStats st_out;
  std::vector<HostTensor> result;
  if (req.use_graph && run_graph(b, req.stream, st_out, result)) {
    if (stats) *stats = st_out;
    return result;
  }
  const bool host = provider_->host_memory();
  std::unique_ptr<RunResources> res = provider_->begin_run_on(
      req.stream, static_cast<std::size_t>(std::max<int64_t>(plan.memory.arena_bytes, 64)),
      workspace_bytes_);
  res->set_threads(plan.header.threads);
  for (int v : plan.inputs) {
    if (host || b.on_device[v]) continue;  // read in place
    const std::size_t n = nbytes_of(plan.values[v].dtype, b.shapes[v]);
    void* d = res->allocate(n);
    res->copy_to_device(d, b.data[v], n);
    ++st_out.copies_to_device;
    st_out.copy_bytes += static_cast<int64_t>(n);
    b.data[v] = d;
  }
  run_steps(b, *res, st_out);
  result = finish(b, *res, st_out);
  // Device work on the caller's stream with device outputs: the caller orders on
  // its stream; everything else returns when the outputs are ready.
  if (req.stream == nullptr || b.host_io) res->synchronize();
  if (stats) *stats = st_out;
  return result;
}

}  // namespace xpuruntime::graph
