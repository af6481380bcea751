// One matmul call: NumPy normalization, the selection cache, dispatch (see
// matmul_call.h).
#include "ops/matmul/matmul_call.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "ops/matmul/matmul_op.h"
#include "xpuruntime/device.h"
#include "xpuruntime/dispatcher.h"
#include "xpuruntime/error.h"
#include "xpuruntime/plugin.h"
#include "xpuruntime/profiler.h"
#include "xpuruntime/stream.h"

namespace xpuruntime::matmul {
namespace {

Tensor view(const Tensor& t, Shape shape, Shape strides) {
  return Tensor(t.storage(), std::move(shape), std::move(strides), t.offset(), t.dtype());
}

// Address range [lo, hi) a tensor may touch. Addresses, not storages: two imports
// of one numpy buffer are different Storage objects over the same memory.
std::pair<uintptr_t, uintptr_t> address_range(const Tensor& t) {
  int64_t lo = 0, hi = 0;  // in elements, relative to data_ptr()
  for (std::size_t i = 0; i < t.shape().size(); ++i) {
    const int64_t span = (t.shape()[i] - 1) * t.strides()[i];
    (span < 0 ? lo : hi) += span;
  }
  const auto base = reinterpret_cast<intptr_t>(t.data_ptr());
  const auto es = static_cast<intptr_t>(t.element_size());
  return {static_cast<uintptr_t>(base + lo * es), static_cast<uintptr_t>(base + (hi + 1) * es)};
}

bool overlaps(const Tensor& x, const Tensor& y) {
  if (x.device() != y.device() || x.numel() == 0 || y.numel() == 0) return false;
  auto [xl, xh] = address_range(x);
  auto [yl, yh] = address_range(y);
  return xl < yh && yl < xh;
}

// The operands and output after NumPy's rules, ready to dispatch.
struct Prepared {
  std::vector<Tensor> inputs;  // a, b[, bias]
  Tensor out;                  // what the kernel writes (unit dims of 1-D operands kept)
  Tensor result;               // what the caller gets
  std::optional<Tensor> row_sums;  // a second output: Σ_k a[i, k]
  NativeStream stream = nullptr;
};

// An operand whose batch dims one stride cannot walk is materialized at the full
// batch shape (a contiguous copy of its broadcast view).
Tensor materialize(const Tensor& t, const Shape& out_batch, NativeStream stream) {
  const std::size_t nb = t.shape().size() - 2, off = out_batch.size() - nb;
  Shape shape = out_batch, strides(out_batch.size(), 0);
  for (std::size_t i = 0; i < nb; ++i) {
    if (t.shape()[i] != 1) strides[off + i] = t.strides()[i];
  }
  for (std::size_t i = nb; i < t.shape().size(); ++i) {
    shape.push_back(t.shape()[i]);
    strides.push_back(t.strides()[i]);
  }
  return view(t, shape, strides).contiguous(stream);
}

Prepared prepare(const MatmulArgs& args) {
  const Tensor& a0 = args.a;
  const Tensor& b0 = args.b;
  XRT_CHECK(a0.defined() && b0.defined(), InvalidArgumentError, "matmul: an operand is undefined");
  XRT_CHECK(a0.dim() >= 1 && b0.dim() >= 1, InvalidArgumentError, "matmul: operands need at least 1 "
            "dim (got a ", shape_str(a0.shape()), ", b ", shape_str(b0.shape()),
            "); multiply by a scalar elementwise instead");
  XRT_CHECK(a0.device() == b0.device(), InvalidArgumentError, "matmul: a is on ",
            a0.device().str(), " and b on ", b0.device().str(), "; move both to one device");
  XRT_CHECK(a0.dtype() == b0.dtype(), InvalidArgumentError, "matmul: a is ",
            dtype_name(a0.dtype()), " and b is ", dtype_name(b0.dtype()),
            "; matmul does not promote, cast one operand");
  const Device dev = a0.device();
  Prepared p;
  if (!dev.is_cpu()) p.stream = StreamManager::instance().current_stream(dev)->native();

  // 1-D operands: a (K) -> (1, K), b (K) -> (K, 1); the result drops those dims.
  // Tensors are copied into p.inputs once (the launch takes them by value).
  const bool a_vec = a0.dim() == 1, b_vec = b0.dim() == 1;
  p.inputs.reserve(3);
  p.inputs.push_back(a_vec ? view(a0, {1, a0.shape()[0]}, {a0.shape()[0] * a0.strides()[0], a0.strides()[0]})
                           : a0);
  p.inputs.push_back(b_vec ? view(b0, {b0.shape()[0], 1}, {b0.strides()[0], 1}) : b0);
  Tensor& a = p.inputs[0];
  Tensor& b = p.inputs[1];
  const int64_t m = a.shape()[a.dim() - 2], k = a.shape().back();
  const int64_t kb = b.shape()[b.dim() - 2], n = b.shape().back();
  XRT_CHECK(k == kb, InvalidArgumentError, "matmul: a ", shape_str(a0.shape()), " @ b ",
            shape_str(b0.shape()), ": the inner dimensions differ (", k, " vs ", kb, ")");
  auto batch = broadcast_batch({a.shape().data(), a.shape().size() - 2},
                               {b.shape().data(), b.shape().size() - 2});
  XRT_CHECK(batch.has_value(), InvalidArgumentError, "matmul: the batch dims of a ",
            shape_str(a0.shape()), " and b ", shape_str(b0.shape()), " do not broadcast");
  if (!flat_batch_stride(*batch, a.shape(), a.strides())) a = materialize(a, *batch, p.stream);
  if (!flat_batch_stride(*batch, b.shape(), b.strides())) b = materialize(b, *batch, p.stream);
  // BLAS-style device libraries need one unit stride per matrix; the CPU kernels take
  // any strides, so copies are made only where they are needed.
  if (!dev.is_cpu()) {
    auto addressable = [](const Tensor& t) {
      const int64_t r = t.dim();
      return blas_layout(t.shape()[r - 2], t.shape()[r - 1], t.strides()[r - 2], t.strides()[r - 1])
          .has_value();
    };
    if (!addressable(a)) a = a.contiguous(p.stream);
    if (!addressable(b)) b = b.contiguous(p.stream);
  }

  if (args.bias) {
    const Tensor& bias = *args.bias;
    XRT_CHECK(bias.defined() && bias.dim() == 1 && bias.shape()[0] == n, InvalidArgumentError,
              "matmul: bias must have shape [", n, "] (one value per output column), got ",
              bias.defined() ? shape_str(bias.shape()) : std::string("undefined"));
    XRT_CHECK(bias.dtype() == a.dtype(), InvalidArgumentError, "matmul: bias is ",
              dtype_name(bias.dtype()), " but the operands are ", dtype_name(a.dtype()),
              "; cast the bias");
    XRT_CHECK(bias.device() == dev, InvalidArgumentError, "matmul: bias is on ",
              bias.device().str(), " but the operands are on ", dev.str());
    p.inputs.push_back(n > 1 && bias.strides()[0] != 1 ? bias.contiguous(p.stream) : bias);
  }

  if (args.a_row_sums) {
    const Tensor& sums = *args.a_row_sums;
    XRT_CHECK(a0.dim() == 2 && b0.dim() == 2 && !args.bias && args.activation == Activation::kNone,
              InvalidArgumentError, "matmul: a_row_sums needs 2-D a and b and no bias or "
              "activation (got a ", shape_str(a0.shape()), ", b ", shape_str(b0.shape()),
              args.bias ? ", a bias" : "", ")");
    XRT_CHECK(sums.defined() && sums.dim() == 1 && sums.shape()[0] == m, InvalidArgumentError,
              "matmul: a_row_sums must have shape [", m, "] (one value per row of a), got ",
              sums.defined() ? shape_str(sums.shape()) : std::string("undefined"));
    XRT_CHECK(sums.dtype() == a.dtype() && sums.device() == dev, InvalidArgumentError,
              "matmul: a_row_sums is ", dtype_name(sums.dtype()), " on ", sums.device().str(),
              " but the operands are ", dtype_name(a.dtype()), " on ", dev.str());
    XRT_CHECK(m <= 1 || sums.strides()[0] == 1, InvalidArgumentError,
              "matmul: a_row_sums must be contiguous (stride 1), got stride ", sums.strides()[0]);
    for (const Tensor& in : p.inputs) {
      XRT_CHECK(!overlaps(sums, in), InvalidArgumentError,
                "matmul: a_row_sums overlaps an input in memory; write into a separate tensor");
    }
    p.row_sums = sums;
  }

  Shape compute_shape = *batch, result_shape = *batch;
  compute_shape.push_back(m);
  compute_shape.push_back(n);
  if (!a_vec) result_shape.push_back(m);
  if (!b_vec) result_shape.push_back(n);
  if (args.out) {
    const Tensor& out = *args.out;
    XRT_CHECK(out.defined() && out.shape() == result_shape, InvalidArgumentError,
              "matmul: out has shape ", out.defined() ? shape_str(out.shape()) : "undefined",
              " but a ", shape_str(a0.shape()), " @ b ", shape_str(b0.shape()), " gives ",
              shape_str(result_shape));
    XRT_CHECK(out.dtype() == a.dtype() && out.device() == dev, InvalidArgumentError,
              "matmul: out is ", dtype_name(out.dtype()), " on ", out.device().str(),
              " but the result is ", dtype_name(a.dtype()), " on ", dev.str());
    for (const Tensor& in : p.inputs) {
      XRT_CHECK(!overlaps(out, in), InvalidArgumentError,
                "matmul: out overlaps an input in memory; write into a separate tensor");
    }
    XRT_CHECK(!p.row_sums || !overlaps(out, *p.row_sums), InvalidArgumentError,
              "matmul: out overlaps a_row_sums in memory; write them into separate tensors");
    // Re-insert the unit dims of 1-D operands (their strides never matter).
    Shape strides = out.strides();
    const std::size_t rank = strides.size();
    if (a_vec) strides.insert(strides.begin() + (rank - (b_vec ? 0 : 1)), int64_t{1});
    if (b_vec) strides.push_back(1);
    p.out = (a_vec || b_vec) ? view(out, compute_shape, strides) : out;
    p.result = out;
  } else {
    p.out = Tensor::empty(compute_shape, a.dtype(), dev, p.stream);
    p.result = (a_vec || b_vec) ? p.out.reshape(result_shape) : p.out;
  }
  return p;
}

// ---- the selection cache ------------------------------------------------------

struct Entry {
  std::vector<int64_t> key;
  std::string node;
  KernelPolicy policy;
  uint64_t generation = 0;
  OpContext ctx;
  KernelPtr kernel;
  std::string algorithm;
  std::size_t workspace = 0;
  Decision decision;  // recorded again on every hit
};

// Everything that can change the context or the choice, as integers. Built into a
// per-thread buffer (no allocation on the hot path); copied only into new entries.
const std::vector<int64_t>& call_key(const Prepared& p, const MatmulArgs& args) {
  thread_local std::vector<int64_t> key;
  key.clear();
  const Device d = p.out.device();
  key.push_back(static_cast<int64_t>(d.kind.id()) << 32 | static_cast<uint32_t>(d.index));
  key.push_back(static_cast<int64_t>(p.out.dtype()) << 8 | static_cast<int64_t>(args.activation));
  key.push_back(static_cast<int64_t>(p.inputs.size()));
  auto add = [&](const Tensor& t) {
    key.push_back(t.dim());
    key.insert(key.end(), t.shape().begin(), t.shape().end());
    key.insert(key.end(), t.strides().begin(), t.strides().end());
  };
  for (const Tensor& t : p.inputs) add(t);
  add(p.out);
  if (p.row_sums) add(*p.row_sums);
  if (const ExecutionPolicy* e = args.execution) {
    key.push_back(static_cast<int64_t>(e->workspace_limit_bytes));
    key.push_back((e->allow_tf32 ? 1 : 0) | (e->deterministic ? 2 : 0) |
                  (e->has_strict("no_fallback") ? 4 : 0) | (e->has_strict("pinned_only") ? 8 : 0));
  } else {
    key.push_back(-1);
  }
  return key;
}

std::size_t hash_key(const std::vector<int64_t>& key, const std::string& node) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (int64_t v : key) {
    h ^= static_cast<uint64_t>(v);
    h *= 1099511628211ull;
  }
  return static_cast<std::size_t>(h ^ std::hash<std::string>{}(node));
}

class CallCache {
 public:
  std::shared_ptr<const Entry> find(std::size_t h, const std::vector<int64_t>& key,
                                    const std::string& node, const KernelPolicy& policy,
                                    uint64_t generation) const {
    std::shared_lock lock(mu_);
    auto it = map_.find(h);
    if (it == map_.end()) return nullptr;
    for (const auto& e : it->second) {
      if (e->key == key && e->node == node && e->generation == generation && e->policy == policy) {
        return e;
      }
    }
    return nullptr;
  }
  void insert(std::size_t h, std::shared_ptr<const Entry> e) {
    std::unique_lock lock(mu_);
    if (size_ >= kCapacity) {  // dynamic shapes: start over rather than grow without bound
      map_.clear();
      size_ = 0;
    }
    auto& bucket = map_[h];
    size_ -= std::erase_if(bucket, [&](const auto& old) {
      return old->key == e->key && old->node == e->node && old->policy == e->policy;
    });
    bucket.push_back(std::move(e));
    ++size_;
  }
  void clear() {
    std::unique_lock lock(mu_);
    map_.clear();
    size_ = 0;
  }
  std::size_t size() const {
    std::shared_lock lock(mu_);
    return size_;
  }

 private:
  static constexpr std::size_t kCapacity = 4096;
  mutable std::shared_mutex mu_;
  std::unordered_map<std::size_t, std::vector<std::shared_ptr<const Entry>>> map_;
  std::size_t size_ = 0;
};

CallCache& cache() {
  static auto* c = new CallCache();  // never destroyed: kernels may live in plugins
  return *c;
}

struct LastDecision {
  std::shared_ptr<const Entry> entry;
  uint64_t seq = 0;
};
thread_local LastDecision t_last;

// Consumes p's inputs (moved into the launch); p.result stays.
void run_kernel(const Kernel& kernel, const OpContext& ctx, Prepared& p,
                const std::string& algorithm, std::size_t workspace,
                const std::optional<Tensor>& given = std::nullopt) {
  KernelLaunch launch;
  launch.ctx = &ctx;
  launch.inputs = std::move(p.inputs);
  launch.outputs.push_back(std::move(p.out));
  if (p.row_sums) launch.outputs.push_back(*p.row_sums);
  launch.stream = p.stream;
  launch.algorithm = algorithm;
  Tensor ws;  // stream-ordered: the allocator reuses it only after this stream's work
  if (workspace > 0 && given.has_value()) {
    const auto bytes = static_cast<std::size_t>(given->nbytes());
    XRT_CHECK(given->device() == ctx.device && given->is_contiguous() && bytes >= workspace,
              InvalidArgumentError, "matmul: kernel '", kernel.def().name, "' needs a contiguous ",
              workspace, "-byte workspace on ", ctx.device.str(), "; got ", bytes, " bytes on ",
              given->device().str(), given->is_contiguous() ? "" : " (not contiguous)");
    launch.workspace = given->data_ptr();
    launch.workspace_bytes = workspace;
  } else if (workspace > 0) {
    ws = Tensor::empty({static_cast<int64_t>(workspace)}, DType::kUInt8, ctx.device, p.stream);
    launch.workspace = ws.data_ptr();
    launch.workspace_bytes = workspace;
  }
  kernel.run(launch);
}

// A device plugin registers its kernels (cublas, cublasLt, ...) when it loads; a
// matmul on its device loads it (once), so ops.matmul does not depend on which
// subsystem touched the device first.
void ensure_device_matmul_kernels_registered(const Device& d) {
  if (!d.is_cpu()) load_plugin(plugin_for_device(d.kind));
}

// The CPU kernels register when the core starts (the built-in CPU plugin).
void ensure_cpu_matmul_kernels_registered() { DeviceManager::instance(); }

OpContext make_context(const Prepared& p, const MatmulArgs& args) {
  std::vector<Tensor> outputs{p.out};
  if (p.row_sums) outputs.push_back(*p.row_sums);
  OpContext ctx = OpContext::from_tensors(kOpKey, p.inputs, outputs, args.node);
  if (args.activation != Activation::kNone) {
    ctx.attrs[kActivationAttr] = std::string(activation_name(args.activation));
  }
  if (args.execution) ctx.apply(*args.execution);
  return ctx;
}

}  // namespace

Tensor matmul(const MatmulArgs& args) {
  ensure_cpu_matmul_kernels_registered();
  Prepared p = prepare(args);
  ensure_device_matmul_kernels_registered(p.out.device());
  Dispatcher& dispatcher = Dispatcher::instance();
  const KernelPolicy policy = args.policy ? *args.policy : dispatcher.effective_policy();
  const uint64_t generation = dispatcher.registry().generation();
  const std::vector<int64_t>& key = call_key(p, args);
  const std::size_t h = hash_key(key, args.node);

  if (auto e = cache().find(h, key, args.node, policy, generation)) {
    const uint64_t seq = dispatcher.log().append(e->decision);
    t_last.entry = e;
    t_last.seq = seq;
    if (Profiler::instance().enabled()) {
      Profiler::instance().instant(e->decision.summary(), "decision",
                                   {{"op", e->decision.op}, {"chosen", e->decision.chosen},
                                    {"rule", e->decision.rule}, {"key", e->decision.key}});
    }
    run_kernel(*e->kernel, e->ctx, p, e->algorithm, e->workspace);
    return p.result;
  }

  auto entry = std::make_shared<Entry>();
  entry->key = key;  // before dispatch: a kernel may itself call matmul on this thread
  entry->ctx = make_context(p, args);
  if (args.policy) args.policy->validate(dispatcher.registry());
  KernelLaunch launch;
  launch.inputs = p.inputs;
  launch.outputs = {p.out};
  if (p.row_sums) launch.outputs.push_back(*p.row_sums);
  launch.stream = p.stream;
  t_last = {};  // a failed call leaves none (the dispatcher's log has its decision)
  Decision d = dispatcher.dispatch(entry->ctx, launch, policy);
  entry->node = args.node;
  entry->policy = policy;
  entry->generation = generation;
  entry->kernel = dispatcher.registry().find(kOpKey, d.chosen);
  entry->algorithm = d.algorithm;
  entry->workspace = entry->kernel ? entry->kernel->workspace_bytes(entry->ctx) : 0;
  entry->decision = d;
  t_last.entry = entry;
  t_last.seq = d.seq;
  if (entry->kernel) cache().insert(h, entry);
  return p.result;
}

Tensor matmul_with_kernel(const std::string& kernel, const MatmulArgs& args,
                          const std::string& algorithm) {
  ensure_cpu_matmul_kernels_registered();
  if (args.a.defined()) ensure_device_matmul_kernels_registered(args.a.device());
  KernelPtr k = KernelRegistry::instance().find(kOpKey, kernel);
  if (!k) {
    std::string names;
    for (const auto& kk : KernelRegistry::instance().kernels(kOpKey)) {
      names += (names.empty() ? "" : ", ") + kk->def().name;
    }
    XRT_THROW(UnsupportedOperationError, "matmul: no kernel '", kernel,
              "' is registered in this process (registered: ", names, ")");
  }
  Prepared p = prepare(args);
  OpContext ctx = make_context(p, args);
  Support s = KernelRegistry::check(*k, ctx);
  XRT_CHECK(s.ok, UnsupportedOperationError, "matmul: kernel '", kernel, "' cannot run ",
            ctx.case_key(), ": ", s.reason_code, " (", s.detail, ")");
  run_kernel(*k, ctx, p, algorithm, k->workspace_bytes(ctx), args.workspace);
  return p.result;
}

double time_kernel_runs(const std::string& kernel, const MatmulArgs& args, int iterations) {
  ensure_cpu_matmul_kernels_registered();
  if (args.a.defined()) ensure_device_matmul_kernels_registered(args.a.device());
  KernelPtr k = KernelRegistry::instance().find(kOpKey, kernel);
  XRT_CHECK(k != nullptr, UnsupportedOperationError, "matmul: no kernel '", kernel, "' is registered");
  Prepared p = prepare(args);
  OpContext ctx = make_context(p, args);
  Support s = KernelRegistry::check(*k, ctx);
  XRT_CHECK(s.ok, UnsupportedOperationError, "matmul: kernel '", kernel, "' cannot run ",
            ctx.case_key(), ": ", s.reason_code, " (", s.detail, ")");
  KernelLaunch launch;
  launch.ctx = &ctx;
  launch.inputs = p.inputs;
  launch.outputs = {p.out};
  if (p.row_sums) launch.outputs.push_back(*p.row_sums);
  launch.stream = p.stream;
  Tensor ws;
  if (std::size_t need = k->workspace_bytes(ctx)) {
    ws = Tensor::empty({static_cast<int64_t>(need)}, DType::kUInt8, ctx.device, p.stream);
    launch.workspace = ws.data_ptr();
    launch.workspace_bytes = need;
  }
  k->run(launch);  // warm-up
  auto stream = !ctx.device.is_cpu() ? Stream::wrap(ctx.device, p.stream) : nullptr;
  if (stream) stream->synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) k->run(launch);
  if (stream) stream->synchronize();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / std::max(1, iterations);
}

Decision last_matmul_decision() {
  if (!t_last.entry) return {};
  Decision d = t_last.entry->decision;
  d.seq = t_last.seq;
  return d;
}

void clear_matmul_call_cache() { cache().clear(); }
std::size_t matmul_call_cache_size() { return cache().size(); }

}  // namespace xpuruntime::matmul
