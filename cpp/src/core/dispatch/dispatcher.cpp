// The Dispatcher: policy + registry -> one kernel per call, a Decision for each
// (DESIGN.md §4). See dispatcher.h for the rules and their order.
#include "xpuruntime/dispatcher.h"

#include <algorithm>
#include <utility>

#include "core/dispatch/tuning.h"
#include "xpuruntime/error.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime {
namespace {

// Per-thread policy overrides (ScopedPolicy), innermost last.
thread_local std::vector<std::pair<const Dispatcher*, std::shared_ptr<const KernelPolicy>>>
    t_scoped;

std::string join_names(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

std::string where(const OpContext& ctx) {
  std::string s = "op '" + ctx.op + "'";
  if (!ctx.node.empty()) s += " (node '" + ctx.node + "')";
  s += " on " + ctx.device.str();
  return s;
}

std::string why(const Candidate& c) {
  return c.reason_code + (c.detail.empty() ? "" : " (" + c.detail + ")");
}

}  // namespace

struct Dispatcher::Selection {
  std::string key;
  std::vector<Candidate> candidates;
  std::vector<KernelPtr> kernels;  // parallel to candidates; null when not registered
  std::vector<std::string> named;  // kernels the policy names, in order ("auto" excluded)
  bool auto_allowed = false;       // no entry, or the list ends with "auto"
  std::vector<int> pool;           // supported candidates the auto strategy may choose from
  int chosen = -1;
  std::string rule;
  std::string algorithm;
  std::optional<KernelPin> pin;
  std::string detail;
  bool needs_tuning = false;
  std::string error;  // non-empty: nothing may run; the call raises
};

Dispatcher& Dispatcher::instance() {
  // Leaked on purpose like the registry: kernels held in its caches may live in plugins.
  static Dispatcher* d = new Dispatcher(KernelRegistry::instance());  // NOLINT
  return *d;
}

Dispatcher::Dispatcher(KernelRegistry& registry, std::size_t log_capacity)
    : registry_(registry), log_(log_capacity), policy_(std::make_shared<const KernelPolicy>()) {}

void Dispatcher::set_policy(const KernelPolicy& policy) {
  policy.validate(registry_);
  auto p = std::make_shared<const KernelPolicy>(policy);
  std::unique_lock lock(policy_mu_);
  policy_ = std::move(p);
}

KernelPolicy Dispatcher::get_policy() const {
  std::shared_lock lock(policy_mu_);
  return *policy_;
}

std::shared_ptr<const KernelPolicy> Dispatcher::current_policy() const {
  for (auto it = t_scoped.rbegin(); it != t_scoped.rend(); ++it) {
    if (it->first == this) return it->second;
  }
  std::shared_lock lock(policy_mu_);
  return policy_;
}

KernelPolicy Dispatcher::effective_policy() const { return *current_policy(); }

Dispatcher::ScopedPolicy::ScopedPolicy(Dispatcher& d, KernelPolicy policy) : dispatcher_(d) {
  policy.validate(d.registry_);
  t_scoped.emplace_back(&d, std::make_shared<const KernelPolicy>(std::move(policy)));
}

Dispatcher::ScopedPolicy::~ScopedPolicy() {
  for (auto it = t_scoped.rbegin(); it != t_scoped.rend(); ++it) {
    if (it->first == &dispatcher_) {
      t_scoped.erase(std::next(it).base());
      return;
    }
  }
}

Dispatcher::Selection Dispatcher::evaluate(const OpContext& ctx, const KernelPolicy& policy,
                                           const SelectOptions* options) const {
  Selection sel;
  sel.key = ctx.case_key();
  const bool require = policy.mode == KernelPolicy::Mode::Require;
  std::vector<std::string> names = policy.get(ctx.op);
  sel.auto_allowed = names.empty() || names.back() == kAutoKernel;
  for (const auto& n : names) {
    if (n != kAutoKernel) sel.named.push_back(n);
  }

  // Candidate order: the policy's names in its order, then the registry's (priority, name).
  for (const auto& n : sel.named) {
    sel.candidates.push_back({n, "", "", "", std::nullopt, ""});
    sel.kernels.push_back(registry_.find(ctx.op, n));
  }
  const std::vector<std::string>* runnable =
      options && !options->runnable.empty() ? &options->runnable : nullptr;
  auto listed = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  for (const auto& k : registry_.kernels(ctx.op)) {
    if (listed(sel.named, k->def().name)) continue;
    if (runnable ? !listed(*runnable, k->def().name) : k->def().requested_only) continue;
    sel.candidates.push_back({k->def().name, "", "", "", std::nullopt, ""});
    sel.kernels.push_back(k);
  }
  // A runnable kernel that is not registered still shows, rejected, so the decision
  // says which of the caller's kernels this process lacks.
  if (runnable) {
    for (const auto& n : *runnable) {
      bool present = false;
      for (const auto& c : sel.candidates) present = present || c.kernel == n;
      if (present) continue;
      sel.candidates.push_back({n, "", "", "", std::nullopt, ""});
      sel.kernels.push_back(nullptr);
    }
  }
  const std::size_t n_named = sel.named.size();
  for (std::size_t i = 0; i < sel.candidates.size(); ++i) {
    Candidate& c = sel.candidates[i];
    if (i < n_named && runnable && !listed(*runnable, c.kernel)) {
      c.verdict = verdict::kRejected;
      c.reason_code = reason::kBackendUnavailable;
      c.detail = "the caller cannot run kernel '" + c.kernel + "' (it runs " +
                 join_names(*runnable) + ")";
      continue;
    }
    if (!sel.kernels[i]) {
      c.verdict = verdict::kRejected;
      c.reason_code = reason::kBackendUnavailable;
      c.detail = "no kernel '" + c.kernel + "' for op '" + ctx.op +
                 "' is registered in this process (its provider is not loaded here, or it is "
                 "another subsystem's routing target)";
      continue;
    }
    if (i >= n_named && !sel.auto_allowed && require) {
      c.verdict = verdict::kRejected;
      c.reason_code = reason::kNotInPolicy;
      c.detail = "policy requires " + join_names(sel.named);
      continue;
    }
    Support s = KernelRegistry::check(*sel.kernels[i], ctx);
    c.verdict = s.ok ? verdict::kSupported : verdict::kRejected;
    c.reason_code = s.ok ? "" : s.reason_code;
    c.detail = s.detail;
  }
  auto index_of = [&](const std::string& name) -> int {
    for (std::size_t i = 0; i < sel.candidates.size(); ++i) {
      if (sel.candidates[i].kernel == name) return static_cast<int>(i);
    }
    return -1;
  };

  // 1. A pin for this exact case.
  if (auto it = policy.pins.find(sel.key); it != policy.pins.end()) {
    const KernelPin& pin = it->second;
    int idx = index_of(pin.kernel);
    if (idx >= 0 && sel.candidates[idx].verdict == verdict::kSupported) {
      sel.chosen = idx;
      sel.rule = rule::kPinned;
      sel.algorithm = pin.algorithm;
      sel.pin = pin;
      return sel;
    }
    std::string problem =
        idx < 0 ? "kernel '" + pin.kernel + "' is not registered in this process"
                : "kernel '" + pin.kernel + "' is rejected: " + why(sel.candidates[idx]);
    if (require) {
      sel.error = where(ctx) + ": the policy pins this case to kernel '" + pin.kernel +
                  "', which cannot run it: " + problem +
                  ". Re-tune on this machine (auto_strategy='best_performance', export_pins()) "
                  "or use mode='prefer' to fall back";
      return sel;
    }
    sel.detail = "pin to '" + pin.kernel + "' refused: " + problem;
  }
  if (ctx.strict_pinned_only) {
    sel.error = where(ctx) + ": strict 'pinned_only' but the policy has no usable pin for case '" +
                sel.key + "'. Tune with auto_strategy='best_performance' on this device, then "
                "save Dispatcher.export_pins() and load that policy";
    return sel;
  }

  // 2. The policy's named kernels, in order.
  for (std::size_t i = 0; i < n_named; ++i) {
    if (sel.candidates[i].verdict == verdict::kSupported) {
      sel.chosen = static_cast<int>(i);
      sel.rule = require ? rule::kPolicyRequire : rule::kPolicyPrefer;
      return sel;
    }
  }
  bool fallback = false;
  if (n_named > 0) {
    std::string reasons;
    for (std::size_t i = 0; i < n_named; ++i) {
      reasons += (i ? "; " : "") + std::string("'") + sel.candidates[i].kernel + "': " +
                 why(sel.candidates[i]);
    }
    if (require && !sel.auto_allowed) {
      sel.error = where(ctx) + ": policy requires kernel " +
                  (n_named == 1 ? "'" + sel.named[0] + "'" : "one of [" + join_names(sel.named) + "]") +
                  ", which cannot run this case: " + reasons +
                  ". Use mode='prefer' to allow a fallback, or add \"auto\" to the list";
      return sel;
    }
    fallback = !sel.auto_allowed;
    std::string note = "named kernel(s) cannot run: " + reasons;
    sel.detail = sel.detail.empty() ? note : sel.detail + "; " + note;
  }

  // 3. Auto (or fallback) among the remaining supported kernels.
  for (std::size_t i = n_named; i < sel.candidates.size(); ++i) {
    if (sel.candidates[i].verdict == verdict::kSupported) sel.pool.push_back(static_cast<int>(i));
  }
  if (sel.pool.empty()) {
    std::string all;
    for (std::size_t i = 0; i < sel.candidates.size(); ++i) {
      all += (i ? "; " : "") + std::string("'") + sel.candidates[i].kernel + "': " +
             why(sel.candidates[i]);
    }
    sel.error = where(ctx) + ": no kernel can run this case" +
                (all.empty() ? std::string(" (no kernels are registered for this op)")
                             : ": " + all);
    return sel;
  }
  if (fallback && ctx.strict_no_fallback) {
    sel.error = where(ctx) + ": strict 'no_fallback' forbids falling back from " +
                join_names(sel.named) + " to '" + sel.candidates[sel.pool[0]].kernel +
                "'; " + sel.detail;
    return sel;
  }
  const bool best = policy.auto_strategy == KernelPolicy::AutoSelectStrategy::BestPerformance;
  sel.rule = fallback ? rule::kFallback : (best ? rule::kAutoBestPerformance : rule::kAutoFirstSupported);
  sel.chosen = sel.pool[0];
  if (fallback && options && !options->fallback_kernel.empty()) {
    for (int idx : sel.pool) {
      if (sel.candidates[idx].kernel == options->fallback_kernel) sel.chosen = idx;
    }
  }
  // A caller-named fallback kernel is the fallback's whole answer: nothing to time.
  sel.needs_tuning = best && !(fallback && options && !options->fallback_kernel.empty());
  return sel;
}

std::optional<Dispatcher::Tuned> Dispatcher::cached(const std::string& tuning_key) const {
  std::lock_guard lock(tune_mu_);
  auto it = tuned_.find(tuning_key);
  if (it == tuned_.end() || it->second.generation != registry_.generation()) return std::nullopt;
  return it->second;
}

Dispatcher::Tuned Dispatcher::tune(const OpContext& ctx, const Selection& sel,
                                   const MakeCandidate& make, const std::string& regime,
                                   bool time_single) const {
  TuningOptions opt = tuning_options();
  Tuned t;
  t.generation = registry_.generation();
  // (candidate, algorithm): pool order, each kernel's algorithms in its order.
  std::vector<std::pair<int, std::string>> options;
  for (int idx : sel.pool) {
    std::vector<std::string> algos = sel.kernels[idx]->algorithms(ctx);
    if (algos.empty()) algos.push_back("");
    for (auto& algo : algos) options.emplace_back(idx, std::move(algo));
  }
  if (options.size() == 1 && !time_single) {
    // One kernel with one algorithm: nothing to choose, so nothing is run.
    t.pin = {sel.candidates[options[0].first].kernel, options[0].second};
    t.verdict = "best_performance: '" + t.pin.kernel + "' is the only candidate (not timed)";
    return t;
  }
  std::vector<tuning::Measured> timed;  // parallel to the options that ran
  std::vector<KernelPin> pins;          // parallel to timed
  for (const auto& [idx, algo] : options) {
    const Kernel& k = *sel.kernels[idx];
    tuning::Timing tm;
    try {
      CandidateRun c = make(k, algo);  // released (the losers' buffers too) after timing
      tm = tuning::time_runs(ctx.device, c.stream, opt.warmup, opt.iterations, c.run);
    } catch (const std::exception& e) {
      // A kernel that claims support but fails is excluded, and the decision says so.
      t.failures[k.def().name] = (algo.empty() ? "" : "algorithm " + algo + ": ") + e.what();
      continue;
    }
    const double ms = tm.median_ms;
    std::string label = algo.empty() ? k.def().name : k.def().name + "/" + algo;
    t.timings[label] = ms;
    auto [per, inserted] = t.best_per_kernel.try_emplace(k.def().name, ms, algo);
    if (!inserted && ms < per->second.first) per->second = {ms, algo};
    timed.push_back({label, ms, tm.noise_ms});
    pins.push_back({k.def().name, algo});
  }
  if (!timed.empty()) {  // ties within noise keep the earlier (priority) candidate
    // dispatch()'s eager launches keep their regime names; a caller's regime gets its clock.
    const std::string clock = ctx.device.is_cpu() ? "host clock" : "device events";
    const std::string named = regime.empty() ? (ctx.device.is_cpu() ? clock : "eager")
                                             : regime + ", " + clock;
    tuning::Ranking r = tuning::rank(timed, named);
    t.pin = pins[r.winner];
    t.verdict = std::move(r.verdict);
  }
  return t;
}

Dispatcher::Tuned Dispatcher::measured(const Selection& sel, const SelectOptions& options) const {
  Tuned t;
  t.generation = registry_.generation();
  std::vector<tuning::Measured> timed;  // pool order
  for (int idx : sel.pool) {
    const std::string& name = sel.candidates[idx].kernel;
    if (auto f = options.failures.find(name); f != options.failures.end()) {
      t.failures[name] = f->second;
      continue;
    }
    auto it = options.timings_ms.find(name);
    if (it == options.timings_ms.end()) continue;
    t.timings[name] = it->second;
    t.best_per_kernel[name] = {it->second, ""};
    auto n = options.noise_ms.find(name);
    timed.push_back({name, it->second, n == options.noise_ms.end() ? 0.0 : n->second});
  }
  if (timed.empty()) return t;
  tuning::Ranking r = tuning::rank(timed, options.regime);
  t.pin = {timed[r.winner].name, ""};
  t.verdict = std::move(r.verdict);
  return t;
}

Decision Dispatcher::decide(const OpContext& ctx, const KernelPolicy& policy, KernelLaunch* launch,
                            KernelPtr* chosen_kernel, const SelectOptions* options) {
  Selection sel = evaluate(ctx, policy, options);
  std::map<std::string, double> timings;
  const bool caller_timed = options && options->timed;

  if (sel.error.empty() && sel.needs_tuning) {
    std::string tkey = sel.key + "#";
    for (std::size_t i = 0; i < sel.pool.size(); ++i) {
      tkey += (i ? "," : "") + sel.candidates[sel.pool[i]].kernel;
    }
    // Times taken in another regime (eager launches vs graph replays) answer another question.
    if (options && !options->regime.empty()) tkey += "@" + options->regime;
    std::optional<Tuned> t = caller_timed ? std::nullopt : cached(tkey);
    if (caller_timed) {
      t = measured(sel, *options);
      if (options->record) {
        std::lock_guard lock(tune_mu_);
        tuned_[tkey] = *t;
        if (!t->pin.kernel.empty()) tuned_case_[sel.key] = tkey;
      }
    } else if (!t && (launch || (options && options->prepare_candidate))) {
      // One tuning run at a time, so concurrent first calls of one case agree on a winner.
      // (Recursive: a plan step's candidate may tune its own sub-kernels while prepared.)
      std::lock_guard run_lock(tuning_run_mu_);
      t = cached(tkey);
      const bool fresh = !t;
      if (!t && launch) {
        // dispatch(): each candidate runs the caller's launch (its tensors; the outputs are
        // rewritten by the final run), with a workspace of its own when it needs more.
        MakeCandidate make = [&ctx, launch](const Kernel& k, const std::string& algo) {
          if (launch->outputs.empty() && !k.def().allocates_outputs)
            XRT_THROW(InvalidArgumentError, "needs preallocated outputs and the launch has none");
          auto l = std::make_shared<KernelLaunch>(*launch);
          l->ctx = &ctx;
          l->algorithm = algo;
          auto workspace = std::make_shared<Tensor>();
          std::size_t need = k.workspace_bytes(ctx);
          if (need > 0 && (l->workspace == nullptr || l->workspace_bytes < need)) {
            *workspace =
                Tensor::empty({static_cast<int64_t>(need)}, DType::kUInt8, ctx.device, l->stream);
            l->workspace = workspace->data_ptr();
            l->workspace_bytes = need;
          }
          return CandidateRun{[&k, l, workspace] { k.run(*l); }, l->stream};
        };
        t = tune(ctx, sel, make, "", /*time_single=*/true);
      } else if (!t) {
        t = tune(ctx, sel, options->prepare_candidate, options->regime, /*time_single=*/false);
      }
      if (fresh) {
        std::lock_guard lock(tune_mu_);
        tuned_[tkey] = *t;
        if (!t->pin.kernel.empty()) tuned_case_[sel.key] = tkey;
      }
    }
    if (t) {
      for (const auto& [name, msg] : t->failures) {
        for (auto& c : sel.candidates) {
          if (c.kernel == name && t->best_per_kernel.count(name) == 0) {
            c.verdict = verdict::kRejected;
            c.reason_code = reason::kRunFailed;
            c.detail = "failed while tuned: " + msg;
          }
        }
      }
      for (auto& c : sel.candidates) {
        if (auto it = t->best_per_kernel.find(c.kernel); it != t->best_per_kernel.end()) {
          c.time_ms = it->second.first;
          c.algorithm = it->second.second;
        }
      }
      if (t->pin.kernel.empty()) {
        sel.error = where(ctx) + ": every candidate failed while being tuned";
        for (const auto& [name, msg] : t->failures) sel.error += "; '" + name + "': " + msg;
      } else {
        for (std::size_t i = 0; i < sel.candidates.size(); ++i) {
          if (sel.candidates[i].kernel == t->pin.kernel) sel.chosen = static_cast<int>(i);
        }
        sel.algorithm = t->pin.algorithm;
        sel.pin = t->pin;
        timings = t->timings;
        if (!t->verdict.empty()) {
          sel.detail = sel.detail.empty() ? t->verdict : sel.detail + "; " + t->verdict;
        }
      }
    } else if (sel.rule == rule::kAutoBestPerformance) {
      // select() alone never runs kernels: report the honest rule until dispatch() tunes.
      sel.rule = rule::kAutoFirstSupported;
      std::string note =
          options && !options->untimed_reason.empty()
              ? "best_performance: timing skipped (" + options->untimed_reason + ")"
              : "best_performance: this case is not tuned yet (dispatch() tunes it)";
      sel.detail = sel.detail.empty() ? note : sel.detail + "; " + note;
    }
  }

  Decision d;
  d.op = ctx.op;
  d.node = ctx.node;
  d.device = ctx.device.str();
  for (const auto& in : ctx.inputs) {
    d.dtypes.emplace_back(dtype_name(in.dtype));
    d.shapes.push_back(in.shape);
  }
  d.candidates = std::move(sel.candidates);
  d.key = sel.key;
  d.timings = std::move(timings);
  const bool record = !options || options->record;
  if (!sel.error.empty()) {
    d.rule = rule::kNone;
    d.detail = sel.error;
    if (record) log_.append(std::move(d));
    XRT_THROW(UnsupportedOperationError, sel.error);
  }
  d.chosen = d.candidates[sel.chosen].kernel;
  d.algorithm = sel.algorithm;
  d.rule = sel.rule;
  d.pin = sel.pin;
  d.detail = sel.detail;
  if (options && !options->note.empty()) {
    d.detail = d.detail.empty() ? options->note : options->note + ", " + d.detail;
  }
  if (chosen_kernel) *chosen_kernel = sel.kernels[sel.chosen];
  if (!record) return d;
  if (Profiler::instance().enabled()) {
    Profiler::instance().instant(d.summary(), "decision",
                                 {{"op", d.op}, {"node", d.node}, {"chosen", d.chosen},
                                  {"rule", d.rule}, {"key", d.key}});
  }
  d.seq = log_.append(d);
  return d;
}

Decision Dispatcher::select(const OpContext& ctx) {
  auto policy = current_policy();
  return decide(ctx, *policy, nullptr, nullptr);
}

Decision Dispatcher::select(const OpContext& ctx, const KernelPolicy& policy) {
  return decide(ctx, policy, nullptr, nullptr);
}

Decision Dispatcher::select(const OpContext& ctx, const KernelPolicy& policy,
                            const SelectOptions& options) {
  return decide(ctx, policy, nullptr, nullptr, &options);
}

Decision Dispatcher::dispatch(const OpContext& ctx, KernelLaunch& launch) {
  auto policy = current_policy();
  return dispatch(ctx, launch, *policy);
}

Decision Dispatcher::dispatch(const OpContext& ctx, KernelLaunch& launch,
                              const KernelPolicy& policy) {
  KernelPtr kernel;
  Decision d = decide(ctx, policy, &launch, &kernel);
  XRT_CHECK(!launch.outputs.empty() || kernel->def().allocates_outputs, InvalidArgumentError,
            where(ctx), ": kernel '", d.chosen,
            "' writes into preallocated outputs, and the call passed none; allocate the outputs "
            "and pass them");
  launch.ctx = &ctx;
  launch.algorithm = d.algorithm;
  Tensor workspace;  // lives until the kernel has been issued; the allocator is stream-aware
  std::size_t need = kernel->workspace_bytes(ctx);
  if (need > 0 && (launch.workspace == nullptr || launch.workspace_bytes < need)) {
    workspace = Tensor::empty({static_cast<int64_t>(need)}, DType::kUInt8, ctx.device, launch.stream);
    launch.workspace = workspace.data_ptr();
    launch.workspace_bytes = need;
  }
  kernel->run(launch);
  if (workspace.defined()) {
    launch.workspace = nullptr;
    launch.workspace_bytes = 0;
  }
  return d;
}

KernelPolicy Dispatcher::export_pins() const { return export_pins(get_policy()); }

KernelPolicy Dispatcher::export_pins(const KernelPolicy& base) const {
  KernelPolicy out = base;
  uint64_t gen = registry_.generation();
  std::lock_guard lock(tune_mu_);
  for (const auto& [case_key, tkey] : tuned_case_) {
    auto it = tuned_.find(tkey);
    if (it == tuned_.end() || it->second.generation != gen || it->second.pin.kernel.empty()) continue;
    out.pins[case_key] = it->second.pin;
  }
  return out;
}

void Dispatcher::clear_tuning_cache() {
  std::lock_guard lock(tune_mu_);
  tuned_.clear();
  tuned_case_.clear();
}

std::size_t Dispatcher::tuning_cache_size() const {
  std::lock_guard lock(tune_mu_);
  return tuned_.size();
}

void Dispatcher::set_tuning_options(const TuningOptions& options) {
  XRT_CHECK(options.warmup >= 0 && options.iterations >= 1, InvalidArgumentError,
            "tuning options need warmup >= 0 and iterations >= 1 (got ", options.warmup, ", ",
            options.iterations, ")");
  std::lock_guard lock(tune_mu_);
  tuning_ = options;
}

TuningOptions Dispatcher::tuning_options() const {
  std::lock_guard lock(tune_mu_);
  return tuning_;
}

}  // namespace xpuruntime
