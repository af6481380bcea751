// Scratch buffers for timing a plan step's candidate kernels (step_tuning.h).
#include "graph/step_tuning.h"

#include <cstring>
#include <random>
#include <utility>

#include "core/half_float.h"
#include "graph/prepare.h"  // the ExecutionProvider interface
#include "xpuruntime/error.h"

namespace xpuruntime::graph {
namespace {

constexpr std::size_t kMinBytes = 64;  // an empty operand still gets a non-null pointer

// FNV-1a: the per-step seed (std::hash may differ between standard libraries).
uint64_t seed_of(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Random values in [-1, 1) for float dtypes; zeros for the rest (indices,
// shapes, masks stay valid whatever the op does with them).
std::vector<unsigned char> scratch_bytes(DType dtype, int64_t numel, std::mt19937_64& rng) {
  std::vector<unsigned char> b(
      std::max(kMinBytes, static_cast<std::size_t>(numel) * dtype_size(dtype)), 0);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < numel; ++i) {
    const float v = u(rng);
    switch (dtype) {
      case DType::kFloat32:
        std::memcpy(b.data() + 4 * i, &v, 4);
        break;
      case DType::kFloat64: {
        const double d = v;
        std::memcpy(b.data() + 8 * i, &d, 8);
        break;
      }
      case DType::kFloat16: {
        const uint16_t h = matmul::float_to_half(v);
        std::memcpy(b.data() + 2 * i, &h, 2);
        break;
      }
      case DType::kBFloat16: {
        const uint16_t h = matmul::float_to_bf16(v);
        std::memcpy(b.data() + 2 * i, &h, 2);
        break;
      }
      default:
        return b;
    }
  }
  return b;
}

}  // namespace

std::string StepScratch::untimable(const ExecutionPlan& plan, const PlanStep& st) {
  for (const auto* ids : {&st.node.inputs, &st.node.outputs}) {
    for (int v : *ids) {
      if (v >= 0 && !plan.values[v].shape)
        return "value '" + plan.values[v].name +
               "' is shaped only at run time: compile with input_shapes to "
               "time this step";
    }
  }
  return "";
}

StepScratch::StepScratch(const ExecutionPlan& plan, const PlanStep& st,
                         const ExecutionProvider& provider)
    : res_(provider.begin_run(0, 0)) {
  res_->set_threads(plan.header.threads);
  const bool host = provider.host_memory();
  std::vector<std::vector<unsigned char>> staged;  // host bytes, kept until the copies end
  std::mt19937_64 rng(seed_of(st.node.name + "|" + st.node.op_type));
  for (int v : st.node.inputs) {
    if (v < 0) {
      args_.inputs.emplace_back();
      continue;
    }
    const PlanValue& pv = plan.values[v];
    TensorArg a{pv.dtype, *pv.shape, nullptr};
    if (pv.constant >= 0) {
      const HostTensor& c = plan.constants[pv.constant];
      if (host && c.data != nullptr) {
        a.data = c.data;  // kernels only read their inputs
      } else {
        a.data = buffer(std::max(kMinBytes, c.nbytes()));
        if (c.nbytes() > 0) {
          if (host)
            std::memcpy(a.data, c.data, c.nbytes());
          else
            res_->copy_to_device(a.data, c.data, c.nbytes());
        }
      }
    } else {
      std::vector<unsigned char>& bytes =
          staged.emplace_back(scratch_bytes(pv.dtype, a.numel(), rng));
      a.data = buffer(bytes.size());
      if (host)
        std::memcpy(a.data, bytes.data(), bytes.size());
      else
        res_->copy_to_device(a.data, bytes.data(), bytes.size());
    }
    args_.inputs.push_back(a);
  }
  for (int v : st.node.outputs) {
    if (v < 0) {
      args_.outputs.emplace_back();
      continue;
    }
    const PlanValue& pv = plan.values[v];
    TensorArg a{pv.dtype, *pv.shape, nullptr};
    a.data = buffer(std::max(kMinBytes, a.nbytes()));
    args_.outputs.push_back(a);
  }
  args_.stream = res_->stream();
  if (!host) res_->synchronize();  // the staged host bytes may go now
}

StepScratch::~StepScratch() {
  try {
    res_->synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a failed device reports at
                   // its next use
  }
}

void* StepScratch::buffer(std::size_t bytes) {
  void* p = res_->allocate(bytes);
  XRT_CHECK(p != nullptr, OutOfMemoryError, "no memory for a ", bytes,
            "-byte scratch buffer to time kernels in");
  return p;
}

CandidateRun StepScratch::runner(PreparedKernelPtr prepared) {
  KernelArgs args = args_;
  std::shared_ptr<void> workspace;
  if (const std::size_t need = prepared->workspace_bytes(); need > 0) {
    void* p = buffer(need);
    std::shared_ptr<RunResources> res = res_;
    workspace = std::shared_ptr<void>(p, [res](void* q) {
      try {
        res->synchronize();  // the candidate's last run has finished with it
        res->release(q);
      } catch (...) {  // NOLINT(bugprone-empty-catch): the run's end frees it anyway
      }
    });
    args.workspace = p;
    args.workspace_bytes = need;
  }
  CandidateRun c;
  c.stream = args.stream;
  c.run = [prepared = std::move(prepared), args = std::move(args), workspace] {
    prepared->run(args);
  };
  return c;
}

}  // namespace xpuruntime::graph
