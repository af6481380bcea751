// Compiling a plan for "cuda" on a machine or build where CUDA cannot be used
// fails with a typed error that says why: in a build without the CUDA plugin
// the registry names the registered providers and that this build has no CUDA
// provider; with the plugin but no usable device (no driver, no GPU) the CUDA
// provider raises BackendUnavailableError carrying the backend's reason. Skips
// where a CUDA device exists (the GPU suite covers that case).
#include <gtest/gtest.h>

#include <string>

#include "xpuruntime/device.h"
#include "xpuruntime/error.h"
#include "xpuruntime/graph/compiler.h"
#include "xpuruntime/provider.h"

namespace xpuruntime::graph {
namespace {

Graph relu_graph() {
  Graph g;
  const int x = g.value_id("x");
  g.values[x].dtype = DType::kFloat32;
  g.values[x].dtype_known = true;
  g.values[x].declared = std::vector<Dim>{Dim{2, ""}, Dim{3, ""}};
  g.inputs.push_back(x);
  Node n;
  n.name = "relu";
  n.op_type = "Relu";
  n.inputs = {x};
  n.outputs = {g.value_id("y")};
  g.add_node(std::move(n));
  g.outputs = {g.find("y")};
  return g;
}

TEST(CudaUnavailable, CompilingForCudaWithoutAUsableDeviceSaysWhy) {
  DeviceManager &dm = DeviceManager::instance();
  if (dm.get_device_count() > 0) GTEST_SKIP() << "a CUDA device exists here";
  CompileOptions opt;
  opt.device = "cuda";
  if (ProviderRegistry::instance().find("cuda") == nullptr) {
    // No CUDA plugin in this build (or it failed to load).
    try {
      compile(relu_graph(), opt);
      FAIL() << "compiled for cuda without a CUDA provider";
    } catch (const UnsupportedOperationError &e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("'cuda'"), std::string::npos) << m;
      EXPECT_NE(m.find("CUDA execution provider is not available"), std::string::npos) << m;
    }
    return;
  }
  // The plugin is here, the device is not: the provider says what CUDA
  // reported.
  try {
    compile(relu_graph(), opt);
    FAIL() << "compiled for cuda without a CUDA device";
  } catch (const BackendUnavailableError &e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device 'cuda'"), std::string::npos) << m;
    const std::string reason = dm.accelerator_unavailable_reason();
    if (!reason.empty()) EXPECT_NE(m.find(reason), std::string::npos) << m;
    EXPECT_NE(m.find("device='cpu'"), std::string::npos) << "says how to go on: " << m;
  }
}

}  // namespace
}  // namespace xpuruntime::graph
