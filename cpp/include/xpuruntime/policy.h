// Policies as code (DESIGN.md §3): KernelPolicy (which kernel for each op, how to
// choose, and the pins written by tuning) and ExecutionPolicy (target, precision,
// shapes, fallback and the knobs engines need). These structs are the source of
// truth; Python wraps them. Plain value types: copy freely, no synchronization
// (share a policy between threads by copying it or by treating it as read-only).
//
// Canonical form: JSON with sorted keys and no whitespace. The fingerprint is the
// SHA-256 of that text, so equal policies have equal fingerprints in every process
// and on every machine. ExecutionPolicy's orchestrator fields (engines, pins, budgets,
// forbid) are written only when set, so policies that leave them unset keep the
// fingerprint they had before those fields existed (saved plans stay valid).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xpuruntime {

class KernelRegistry;

// Version of the policy file format. A reader refuses files written by a newer
// version (PolicyError) instead of silently dropping fields it does not know.
inline constexpr int kPolicySchemaVersion = 1;

// The policy value that means "let the dispatcher choose".
inline constexpr std::string_view kAutoKernel = "auto";

// An exact choice written by tuning: the lock that lets production repeat research.
struct KernelPin {
  std::string kernel;
  std::string algorithm;  // opaque algorithm id (e.g. a serialized cuBLASLt algo); "" = default
  friend bool operator==(const KernelPin&, const KernelPin&) = default;
};

struct KernelPolicy {
  enum class AutoSelectStrategy : uint8_t { FirstSupported = 0, BestPerformance = 1 };
  enum class Mode : uint8_t { Prefer = 0, Require = 1 };

  int schema_version = kPolicySchemaVersion;
  Mode mode = Mode::Prefer;
  AutoSelectStrategy auto_strategy = AutoSelectStrategy::FirstSupported;
  // op key -> kernel names in order of preference; {"auto"} (or no entry) lets the
  // dispatcher choose. A list may end with "auto" to allow any kernel after the named ones.
  std::map<std::string, std::vector<std::string>> preferences;
  // case key (OpContext::case_key()) -> exact choice.
  std::map<std::string, KernelPin> pins;

  // Sets one op to one kernel (or an ordered list). Names are not validated here:
  // call validate() (the Python wrapper does so on every change).
  KernelPolicy& set(const std::string& op, const std::string& kernel);
  KernelPolicy& set(const std::string& op, std::vector<std::string> kernels);
  // Kernel names for op; empty when the op has no entry.
  std::vector<std::string> get(const std::string& op) const;
  KernelPolicy& remove(const std::string& op);
  bool empty() const { return preferences.empty() && pins.empty(); }

  // Throws PolicyError (listing the valid choices and the closest one) when an op
  // key, kernel name or pin names something the registry does not know.
  void validate(const KernelRegistry& registry) const;

  // Pretty JSON (indent >= 0) or canonical JSON (indent < 0: sorted keys, no spaces).
  std::string to_json(int indent = 2) const;
  std::string canonical_json() const { return to_json(-1); }
  // Parses and checks structure and values (not kernel names: see validate()).
  // Throws PolicyError on unknown fields/values or a newer schema_version.
  static KernelPolicy from_json(std::string_view json);
  // SHA-256 hex of canonical_json().
  std::string fingerprint() const;
  std::string repr() const;  // "KernelPolicy(matmul='cublasLt', mode='require')"

  friend bool operator==(const KernelPolicy&, const KernelPolicy&) = default;
};

std::string_view to_string(KernelPolicy::Mode m);                // "prefer" | "require"
std::string_view to_string(KernelPolicy::AutoSelectStrategy s);  // "first_supported" | "best_performance"
// Parse the names above; throw PolicyError with the valid choices otherwise.
KernelPolicy::Mode policy_mode_from_string(std::string_view s);
KernelPolicy::AutoSelectStrategy auto_strategy_from_string(std::string_view s);

struct ExecutionPolicy {
  enum class Target : uint8_t { CPU = 0, CUDA = 1, NPU = 2, Auto = 3 };
  enum class Precision : uint8_t { FP32 = 0, FP16 = 1, BF16 = 2, INT8 = 3 };

  int schema_version = kPolicySchemaVersion;
  Target target = Target::Auto;
  Precision precision = Precision::FP32;
  bool static_shape = false;
  std::optional<Target> allow_fallback;  // where to go when the target cannot run the model
  bool deterministic = false;            // kernels that are not bitwise reproducible are rejected
  bool cuda_graph = false;               // capture and replay the plan when shapes are static
  std::size_t workspace_limit_bytes = 0;  // 0 = no limit
  std::optional<std::string> engine;      // preferred engine ("native", "onnxruntime", ...)
  bool allow_tf32 = false;
  // With a narrower precision: true keeps the model's float32 inputs and outputs (Casts at
  // the plan's edges); false gives the plan the precision's types there too, as a model
  // converted with ONNX's float16 tools and keep_io_types=False (no edge casts, half the
  // output memory). Written to JSON only when false, so existing fingerprints stay.
  bool keep_io_types = true;
  int threads = 0;  // CPU threads; 0 = library default
  // Assertions that turn a silent degradation into an error; see strict_assertions().
  std::vector<std::string> strict;

  // ---- the orchestrator (DESIGN.md §6): one model across engines and devices ----
  // Engines in order of preference: each node goes to the first that can take it
  // (empty = one engine, as chosen by `engine` or the registry).
  std::vector<std::string> engines;
  // Node name or op type -> "engine" or "engine@device" (a node name wins over its op type).
  std::map<std::string, std::string> pins;
  // Budgets, asserted at build time (nullopt = no limit): islands; nodes placed on an
  // engine other than the first of `engines`; bytes crossing island boundaries per run.
  std::optional<int> max_islands;
  std::optional<long long> max_fallback_nodes;
  std::optional<long long> max_copy_bytes;
  // Device kinds ("cpu"), engines ("onnxruntime") or "engine@device" no island may use.
  std::vector<std::string> forbid;

  bool has_strict(std::string_view assertion) const;
  // Throws PolicyError on an unknown strict assertion or an inconsistent combination
  // (e.g. allow_fallback equal to target, negative threads).
  void validate() const;

  std::string to_json(int indent = 2) const;
  std::string canonical_json() const { return to_json(-1); }
  static ExecutionPolicy from_json(std::string_view json);
  std::string fingerprint() const;
  std::string repr() const;

  friend bool operator==(const ExecutionPolicy&, const ExecutionPolicy&) = default;
};

std::string_view to_string(ExecutionPolicy::Target t);     // "cpu" | "cuda" | "npu" | "auto"
std::string_view to_string(ExecutionPolicy::Precision p);  // "fp32" | "fp16" | "bf16" | "int8"
ExecutionPolicy::Target target_from_string(std::string_view s);
ExecutionPolicy::Precision precision_from_string(std::string_view s);  // also "float16", ...

// Known strict assertions:
//   no_fallback      no op and no engine may fall back (dispatcher rule "fallback" raises)
//   no_cpu_fallback  nothing may run on the CPU when the target is not the CPU
//   pinned_only      every kernel choice must come from a pin (reproduce a tuned run exactly)
const std::vector<std::string>& strict_assertions();

// ---- helpers shared by policy parsing and validation --------------------------

// SHA-256 of bytes as 64 lower-case hex digits (no OpenSSL dependency).
std::string sha256_hex(std::string_view data);

// Levenshtein distance, and the closest of `choices` to `word` (empty when none
// is reasonably close: distance more than half of the word's length).
std::size_t edit_distance(std::string_view a, std::string_view b);
std::string closest_match(std::string_view word, const std::vector<std::string>& choices);
// "unknown <what> 'word' (in <where>); valid choices: a, b, c; did you mean 'b'?"
std::string unknown_choice_message(std::string_view what, std::string_view word,
                                   std::string_view where, const std::vector<std::string>& choices);

}  // namespace xpuruntime
