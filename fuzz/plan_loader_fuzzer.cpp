// libFuzzer target: the plan loader (ExecutionPlan::deserialize) and, for a plan
// it accepts, one run of the plan (issue 19). The contract under test: any bytes
// give a loaded plan or a typed XpuRuntimeError, never a crash, a sanitizer
// report or another exception type, and a loaded plan runs without touching
// memory outside its buffers.
//
// Every input is sealed first (seal_plan_bytes writes the digests of its current
// contents): a mutation of a real plan then reaches the header parser and the
// structural checks instead of stopping at the checksum, which is tested
// separately (tests/cpp/test_plan_integrity.cpp). Seeds: fuzz/corpus/plan_loader/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "graph/plan_verify.h"
#include "xpuruntime/error.h"
#include "xpuruntime/graph/executor.h"
#include "xpuruntime/graph/plan.h"

using namespace xpuruntime;
using namespace xpuruntime::graph;

namespace {

// Runs a loaded plan once on zero inputs of its shapes (symbolic dims = 2); skips
// plans whose inputs would be large, so that one input stays fast.
void run_once(const std::shared_ptr<ExecutionPlan>& plan) {
  std::vector<std::string> names;
  std::vector<HostTensor> inputs;
  int64_t total = 0;
  for (int id : plan->inputs) {
    const PlanValue& v = plan->values[static_cast<std::size_t>(id)];
    Shape s;
    if (v.declared) {
      for (std::size_t d = 0; d < v.declared->size(); ++d) {
        const int64_t fixed = v.shape ? (*v.shape)[d] : (*v.declared)[d].value;
        s.push_back(fixed >= 0 ? fixed : 2);
      }
    } else if (v.shape) {
      s = *v.shape;
    }
    int64_t n = 1;
    for (int64_t d : s) {
      if (d > (int64_t{1} << 20)) return;
      n *= d;
      if (n > (int64_t{1} << 20)) return;
    }
    total += n;
    if (total > (int64_t{1} << 20)) return;
    HostTensor t = HostTensor::alloc(v.dtype, s);
    if (t.nbytes()) std::memset(t.data, 0, t.nbytes());
    names.push_back(v.name);
    inputs.push_back(std::move(t));
  }
  // Plans a fuzzer input describes may ask for large buffers; running them would
  // measure the machine, not the loader.
  if (plan->memory.arena_bytes > (int64_t{1} << 28)) return;
  Executor ex(plan);
  ex.run(names, inputs);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Every tensor of a loaded plan, and every buffer a run shapes, stays under 64 MiB
  // (the loader refuses bigger ones with a typed error): no input is reported as an
  // out-of-memory crash for asking for what the defaults would allow.
  setenv("XRT_MAX_TENSOR_BYTES", "67108864", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  seal_plan_bytes(bytes);
  try {
    auto plan = std::make_shared<ExecutionPlan>(ExecutionPlan::deserialize(std::move(bytes)));
    run_once(plan);
  } catch (const XpuRuntimeError&) {
    // A typed refusal: what a damaged plan must give.
  }
  return 0;
}
