// ExecutionPlan (DESIGN.md §5, seed 003's CompiledProgram): kernel calls, tensor
// specs, buffer offsets in one arena, constants, and a header (format version,
// device, policy fingerprint, model hash). Immutable once built, printable, and
// serializable: a saved plan runs without the ONNX model or the onnx package.
//
// File format (container "XRTPLAN3", plan format 3), little-endian:
//   [0, 8)     magic "XRTPLAN3"
//   [8, 16)    uint64 header length H
//   [16, 80)   SHA-256 (hex) of the header: bytes [0, 16) followed by [144, blob)
//   [80, 144)  SHA-256 (hex) of the constants blob's chunk digests: the hex SHA-256 of
//              each 4 MiB chunk of [blob, end), concatenated (hashed in parallel;
//              container "XRTPLAN2", still read, has one SHA-256 of [blob, end))
//   [144, 144 + H)  the JSON header (nlohmann), then zero padding to 64 bytes
//   [blob, end)     the constants blob (each constant 64-byte aligned at the offset
//                   the header lists)
// A loader trusts nothing in the file: both digests are checked before the header
// is parsed, then every id, shape, size, offset, lifetime and alias is re-derived
// and checked against the plan itself (graph/plan_verify.h), the recorded
// environment against the loading provider's, and every kernel against the
// KernelRegistry. Container "XRTPLAN1" (formats 1-2, no checksum) is refused with
// a message that says to re-save the plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "xpuruntime/ir.h"
#include "xpuruntime/kernel_registry.h"

namespace xpuruntime::graph {

// Bumped whenever the plan format or the meaning of a step changes.
// 2: steps hold prepared kernels (a conv's GEMM is a recorded sub-decision, not a
//    "_gemm" attribute); steps record their algorithm; the header records the
//    execution-policy fields kernels are prepared under.
// 3: container "XRTPLAN2" with SHA-256 digests of header and blob; the header
//    records the provider's environment (ExecutionProvider::environment()).
inline constexpr int kPlanFormatVersion = 3;

struct PlanValue {
  enum class Kind : uint8_t { kInput = 0, kConstant = 1, kIntermediate = 2, kOutput = 3 };
  std::string name;
  DType dtype = DType::kFloat32;
  std::optional<Shape> shape;                // static shape; nullopt: known at run time
  std::optional<std::vector<Dim>> declared;  // graph inputs/outputs as the model declares them
  Kind kind = Kind::kIntermediate;
  int64_t arena_offset = -1;  // static intermediates: byte offset in the arena
  int alias_of = -1;          // a view of this value's bytes (Reshape & co.), or -1
  int constant = -1;          // index into ExecutionPlan::constants
  int last_use = -1;          // index of the last step reading it (aliases included)
  // A static intermediate whose only reader is a view step (Reshape & co.) making graph
  // output `output_home`: its producer writes straight into that output's buffer, the
  // view step copies nothing, and it takes no arena space. -1 otherwise.
  int output_home = -1;
};

struct PlanStep {
  Node node;              // op type, attributes; inputs/outputs are plan value ids
  std::string op_key;     // dispatcher op key
  std::string kernel;     // the chosen kernel (MatMul/Gemm: the GEMM kernel)
  std::string algorithm;  // the chosen algorithm ("" = the kernel's default)
  std::string rule;       // the rule that chose it (Decision::rule)
  bool alias = false;     // output 0 is a view of input 0: nothing to run
  // The step's workspace inside the arena, planned like a value that lives during this
  // step only (device plans: it shares memory with dead intermediates instead of one
  // workspace of the largest step's size kept beside the arena); -1: the run's shared
  // workspace. workspace_bytes is what was planned (a loaded kernel asking for more
  // runs on the shared workspace).
  int64_t workspace_offset = -1;
  int64_t workspace_bytes = 0;
  // Not serialized: filled by compile() and again when a plan is loaded.
  KernelPtr kernel_ptr;       // the registered kernel `kernel`
  PreparedKernelPtr prepared;  // bound to this step once: what the executor runs
};

struct PlanHeader {
  int format_version = kPlanFormatVersion;
  std::string device;              // execution provider name ("cpu")
  std::string policy_fingerprint;  // SHA-256 over the kernel and execution policies
  std::string model_hash;          // SHA-256 of the model bytes
  std::string producer;            // "xpuruntime 0.1.0"
  // What the plan's kernels were chosen and prepared for beyond the device kind
  // (ExecutionProvider::environment(): CUDA's GPU architecture and library
  // versions). A loader refuses a plan whose environment differs from the loading
  // provider's, naming the field.
  std::map<std::string, std::string> environment;
  // The ExecutionPolicy fields a kernel may read when it is prepared (OpContext),
  // kept so that a loaded plan prepares its kernels as the compiler did.
  std::size_t workspace_limit_bytes = 0;
  bool allow_tf32 = false;
  bool deterministic = false;
  // ExecutionPolicy.threads: the host threads each run uses (0 = the provider's
  // default; the CPU's is XRT_NUM_THREADS, else OMP_NUM_THREADS, else the hardware's).
  int threads = 0;
  // An offline preview (CompileOptions.dry_run): the passes, fusions and dispatch
  // ran for `environment`'s target, but no kernel was prepared and no device was
  // touched. Such a plan is for reading only: it is never run or saved.
  bool preview = false;
};

struct MemoryReport {
  int64_t arena_bytes = 0;         // peak: the one arena holding static intermediates
  int64_t intermediate_bytes = 0;  // sum of all static intermediates (no reuse)
  int64_t constant_bytes = 0;
  int64_t dynamic_values = 0;      // intermediates whose shape is known only at run time
  int64_t static_values = 0;
};

// What a loader insists on; empty fields are not checked.
struct PlanExpectation {
  std::string device;
  std::string policy_fingerprint;
};

struct ExecutionPlan {
  PlanHeader header;
  std::vector<PlanValue> values;
  std::vector<PlanStep> steps;
  std::vector<HostTensor> constants;
  std::vector<int> inputs;   // value ids in model order
  std::vector<int> outputs;  // value ids in model order
  MemoryReport memory;
  std::vector<std::string> decisions;  // Decision::to_json() of every dispatched node
  std::vector<std::string> pass_log;   // one line per compiler pass ("constant folding: ...")
  // Where the build or load of this plan spent its time (not saved): "read", "verify",
  // "parse", "passes", "prepare" and "prepare:<kernel>" (summed over the steps and
  // sub-kernels of that kernel), milliseconds of wall time.
  std::map<std::string, double> timings_ms;

  // Serialization. save/serialize never fail for a valid plan; load/deserialize
  // throw InvalidModelError for truncated, damaged (checksum mismatch, naming
  // header or blob) or inconsistent files (naming the field), for an older format
  // (re-save it), another environment than the loading provider's (naming the
  // field), and for another device or policy than `expect` asks for. Loading
  // prepares every step again, pinned to the recorded kernels (and to the recorded
  // sub-decisions): UnsupportedOperationError names the node and kernel a build
  // lacks or that no longer supports the step, or the device without an execution
  // provider. No file content crashes the loader.
  void save(const std::string& path) const;
  std::string serialize() const;
  static ExecutionPlan load(const std::string& path, const PlanExpectation& expect = {});
  static ExecutionPlan deserialize(std::string bytes, const PlanExpectation& expect = {});

  // A readable listing: header, memory, one line per step (op, kernel, shapes).
  std::string summary() const;
  int value_id(const std::string& name) const;  // -1 when absent
};

}  // namespace xpuruntime::graph
