// A saved plan is input from outside (issue 19, DESIGN.md §5): every class of
// crafted damage is refused with a typed error that names it, never a crash or a
// different result. Damage is written into the JSON header and the file sealed
// again (seal_plan_bytes), so that it reaches the loader's structural checks
// instead of stopping at the checksum; the checksum itself is tested unsealed.
// Plus: random single-bit flips, and the provider environment (issue 15 §7).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "graph/plan_verify.h"
#include "xpuruntime/error.h"
#include "xpuruntime/graph/compiler.h"
#include "xpuruntime/graph/executor.h"
#include "xpuruntime/provider.h"

namespace xpuruntime::graph {
namespace {

using json = nlohmann::json;

HostTensor random_tensor(Shape s, unsigned seed) {
  HostTensor t = HostTensor::alloc(DType::kFloat32, std::move(s));
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = d(rng);
  return t;
}

int add_input(Graph& g, const std::string& name, std::vector<Dim> dims) {
  const int id = g.value_id(name);
  g.values[id].dtype = DType::kFloat32;
  g.values[id].dtype_known = true;
  g.values[id].declared = std::move(dims);
  g.inputs.push_back(id);
  return id;
}

void add_node(Graph& g, const std::string& op, std::vector<std::string> in,
              std::vector<std::string> out, std::map<std::string, Attr> attrs = {}) {
  Node n;
  n.name = op + std::to_string(g.nodes.size());
  n.op_type = op;
  for (auto& s : in) n.inputs.push_back(s.empty() ? -1 : g.value_id(s));
  for (auto& s : out) n.outputs.push_back(g.value_id(s));
  n.attrs = std::move(attrs);
  g.add_node(std::move(n));
}

// x[2,3,8,8] -> Conv(3x3, pad 1) -> Relu -> Reshape [2,256] (a view) -> MatMul
// -> Add bias -> Softmax: arena buffers, a view, constants and fused epilogues.
Graph conv_net() {
  Graph g;
  add_input(g, "x", {{2, ""}, {3, ""}, {8, ""}, {8, ""}});
  g.values[g.value_id("w")].constant = random_tensor({4, 3, 3, 3}, 1);
  g.values[g.value_id("w2")].constant = random_tensor({256, 10}, 2);
  g.values[g.value_id("b2")].constant = random_tensor({10}, 3);
  HostTensor shape = HostTensor::alloc(DType::kInt64, {2});
  shape.ptr<int64_t>()[0] = 2;
  shape.ptr<int64_t>()[1] = 256;
  g.values[g.value_id("shape")].constant = shape;
  add_node(g, "Conv", {"x", "w"}, {"c"}, {{"pads", Attr::of_ints({1, 1, 1, 1})}});
  add_node(g, "Relu", {"c"}, {"r"});
  add_node(g, "Reshape", {"r", "shape"}, {"f"});
  add_node(g, "MatMul", {"f", "w2"}, {"m"});
  add_node(g, "Add", {"m", "b2"}, {"a"});
  add_node(g, "Softmax", {"a"}, {"y"}, {{"axis", Attr::of_int(-1)}});
  g.outputs.push_back(g.find("y"));
  return g;
}

// x[N,8] with a symbolic batch, compiled without fusion: every intermediate is
// shaped at run time (dynamic buffers freed after their recorded last use).
Graph dynamic_net() {
  Graph g;
  add_input(g, "x", {{-1, "N"}, {8, ""}});
  g.values[g.value_id("w")].constant = random_tensor({8}, 4);
  add_node(g, "Tanh", {"x"}, {"t"});
  add_node(g, "Mul", {"t", "w"}, {"m"});
  add_node(g, "Add", {"m", "t"}, {"a"});
  add_node(g, "Sigmoid", {"a"}, {"y"});
  g.outputs.push_back(g.find("y"));
  return g;
}

CompileOptions unfused() {
  CompileOptions o;
  o.fuse = false;
  return o;
}

struct File {
  std::string bytes;
  json header() const {
    uint64_t hl = 0;
    std::memcpy(&hl, bytes.data() + 8, sizeof(hl));
    return json::parse(bytes.substr(kPlanPrefixBytes, hl));
  }
  // The file with `edit` applied to its header (the blob unchanged), resealed, or
  // keeping the original digests.
  std::string edited(const std::function<void(json&)>& edit, bool seal = true) const {
    uint64_t hl = 0;
    std::memcpy(&hl, bytes.data() + 8, sizeof(hl));
    const std::string blob = bytes.substr(plan_blob_offset(hl));
    json h = header();
    edit(h);
    const std::string hs = h.dump();
    std::string out(bytes.substr(0, 8));
    const uint64_t nl = hs.size();
    out.append(reinterpret_cast<const char*>(&nl), sizeof(nl));
    out.append(2 * kPlanDigestBytes, '0');
    out += hs;
    out.resize(plan_blob_offset(nl), '\0');
    out += blob;
    if (seal) {
      seal_plan_bytes(out);
    } else {
      std::memcpy(out.data() + 16, bytes.data() + 16, 2 * kPlanDigestBytes);  // the old digests
    }
    return out;
  }
};

// Index of the first value / step matching a predicate (the test models have one).
int value_where(const json& h, const std::function<bool(const json&)>& pred) {
  for (std::size_t i = 0; i < h["values"].size(); ++i)
    if (pred(h["values"][i])) return static_cast<int>(i);
  ADD_FAILURE() << "no such value in the plan header";
  return 0;
}

int step_of(const json& h, const std::string& op_type) {
  for (std::size_t i = 0; i < h["steps"].size(); ++i)
    if (h["steps"][i]["op_type"] == op_type) return static_cast<int>(i);
  ADD_FAILURE() << "no " << op_type << " step in the plan header";
  return 0;
}

bool is_arena_value(const json& v) { return v["arena_offset"].get<int64_t>() >= 0; }

// Loading `bytes` throws a typed error whose message contains `needle`.
void expect_refused(const std::string& bytes, const std::string& needle, const char* what) {
  try {
    ExecutionPlan::deserialize(bytes);
    ADD_FAILURE() << what << ": the damaged plan loaded";
  } catch (const XpuRuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << what << ": message does not say '" << needle << "': " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": untyped error " << e.what();
  }
}

class PlanIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    conv_ = File{compile(conv_net(), CompileOptions{}).serialize()};
    dyn_ = File{compile(dynamic_net(), unfused()).serialize()};
  }
  File conv_, dyn_;
};

TEST_F(PlanIntegrity, SealedRoundTripRunsBitIdentical) {
  ExecutionPlan fresh = compile(conv_net(), CompileOptions{});
  ExecutionPlan back = ExecutionPlan::deserialize(conv_.bytes);
  EXPECT_EQ(back.header.format_version, kPlanFormatVersion);
  const HostTensor x = random_tensor({2, 3, 8, 8}, 9);
  auto a = Executor(std::make_shared<ExecutionPlan>(fresh)).run({"x"}, {x});
  auto b = Executor(std::make_shared<ExecutionPlan>(back)).run({"x"}, {x});
  ASSERT_EQ(a[0].nbytes(), b[0].nbytes());
  EXPECT_EQ(std::memcmp(a[0].data, b[0].data, a[0].nbytes()), 0);
  // Sealing an unedited file changes nothing, and the edit helper round-trips.
  std::string same = conv_.bytes;
  seal_plan_bytes(same);
  EXPECT_EQ(same, conv_.bytes);
  EXPECT_NO_THROW(ExecutionPlan::deserialize(conv_.edited([](json&) {})));
  EXPECT_NO_THROW(ExecutionPlan::deserialize(dyn_.edited([](json&) {})));
}

TEST_F(PlanIntegrity, ChecksumMismatchNamesHeaderOrBlob) {
  std::string blob = conv_.bytes;
  blob[blob.size() - 7] ^= 0x10;  // a weight's byte
  expect_refused(blob, "checksum mismatch in the constants blob", "blob bit");
  std::string head = conv_.bytes;
  head[kPlanPrefixBytes + 40] ^= 0x01;  // inside the JSON header
  expect_refused(head, "checksum mismatch in the header", "header bit");
  std::string digest = conv_.bytes;
  digest[20] = digest[20] == 'a' ? 'b' : 'a';  // the recorded digest itself
  expect_refused(digest, "checksum mismatch in the header", "digest");
}

TEST_F(PlanIntegrity, TruncatedAndForeignContainersAreRefused) {
  const std::string& b = conv_.bytes;
  for (std::size_t cut : {std::size_t{0}, std::size_t{7}, std::size_t{15}, std::size_t{100},
                          kPlanPrefixBytes + 10, b.size() / 2, b.size() - 1})
    expect_refused(b.substr(0, cut), "plan", "truncated");
  std::string old = b;
  old[7] = '1';
  expect_refused(old, "older xpuruntime", "container XRTPLAN1");
  std::string other = b;
  other[7] = '\xff';
  expect_refused(other, "container version 255", "container 255");
  expect_refused("definitely not a plan file", "bad magic", "magic");
  expect_refused(b + std::string(64, '\0'), "checksum mismatch", "trailing bytes");
}

TEST_F(PlanIntegrity, WrongFormatVersionIsRefused) {
  expect_refused(conv_.edited([](json& h) { h["format_version"] = 2; }), "plan format version 2",
                 "version 2");
  expect_refused(conv_.edited([](json& h) { h["format_version"] = 1.5e300; }), "format_version",
                 "float version");
}

TEST_F(PlanIntegrity, IdsOutsideTheValuesAreRefused) {
  expect_refused(conv_.edited([](json& h) { h["inputs"][0] = -1; }), "plan input id -1",
                 "input -1");
  expect_refused(conv_.edited([](json& h) { h["outputs"][0] = -1; }), "plan output id -1",
                 "output -1");
  expect_refused(conv_.edited([](json& h) { h["outputs"][0] = h["values"].size(); }),
                 "plan output id", "output past");
  expect_refused(conv_.edited([](json& h) { h["steps"][0]["inputs"][0] = h["values"].size(); }),
                 "reads value id", "step input past");
  expect_refused(conv_.edited([](json& h) { h["steps"][0]["inputs"][0] = -7; }),
                 "reads value id -7", "step input -7");
  expect_refused(conv_.edited([](json& h) { h["steps"][0]["outputs"] = json::array({1 << 30}); }),
                 "writes value id", "step output past");
  expect_refused(conv_.edited([](json& h) { h["steps"][1]["outputs"] = json::array(); }),
                 "has no output 0", "no outputs");
  expect_refused(conv_.edited([](json& h) { h["inputs"][0] = 4294967296.0 + 1; }), "plan input id",
                 "float id");
  expect_refused(conv_.edited([](json& h) { h["inputs"][0] = 4294967297ULL; }), "out of range",
                 "wrapping id");
}

TEST_F(PlanIntegrity, ArenaDamageIsRefused) {
  expect_refused(conv_.edited([](json& h) { h["memory"]["arena_bytes"] = 0; }), "arena",
                 "arena 0 bytes");
  expect_refused(conv_.edited([](json& h) {
    const int v = value_where(h, is_arena_value);
    h["values"][v]["arena_offset"] = h["memory"]["arena_bytes"];
  }),
                 "inside the arena", "offset past the arena");
  expect_refused(conv_.edited([](json& h) {
    h["values"][value_where(h, is_arena_value)]["arena_offset"] = 8;
  }),
                 "64-byte aligned", "unaligned offset");
  expect_refused(conv_.edited([](json& h) {
    json& v = h["values"][value_where(h, is_arena_value)];
    v["shape"][0] = v["shape"][0].get<int64_t>() * 1000;
  }),
                 "inside the arena", "shape past the arena");
  expect_refused(conv_.edited([](json& h) {
    json& v = h["values"][value_where(h, is_arena_value)];
    v["shape"][0] = int64_t{1} << 40;
  }),
                 "plan", "huge shape");
  expect_refused(conv_.edited([](json& h) {
    json& v = h["values"][value_where(h, is_arena_value)];
    v["shape"][0] = -3;
  }),
                 "dimension -3", "negative dim");
  expect_refused(conv_.edited([](json& h) { h["memory"]["arena_bytes"] = int64_t{1} << 50; }),
                 "not between 0 and the sum of its buffers", "huge arena");
}

// A step's workspace planned in the arena (device plans, PlanStep::workspace_offset):
// one past every buffer loads and runs bit-identically (the step's kernel gets it);
// one outside the arena, unaligned, or over a buffer alive at that step is refused.
TEST_F(PlanIntegrity, StepWorkspacesInTheArenaAreCheckedLikeValues) {
  const json h0 = conv_.header();
  // A step that runs and reads an arena buffer (the fusions decide which one).
  int step = -1;
  for (std::size_t i = 0; i < h0["steps"].size() && step < 0; ++i) {
    const json& st = h0["steps"][i];
    const int in = st["inputs"][0].get<int>();
    if (!st["alias"].get<bool>() && in >= 0 && h0["values"][in]["arena_offset"].get<int64_t>() >= 0)
      step = static_cast<int>(i);
  }
  ASSERT_GE(step, 0) << "no step reads an arena buffer in the test plan";
  const int64_t arena = h0["memory"]["arena_bytes"].get<int64_t>();
  const std::string placed = conv_.edited([&](json& h) {
    h["steps"][step]["workspace_offset"] = (arena + 63) / 64 * 64;
    h["steps"][step]["workspace_bytes"] = 4096;
    h["memory"]["arena_bytes"] = (arena + 63) / 64 * 64 + 4096;
  });
  ExecutionPlan back = ExecutionPlan::deserialize(placed);
  EXPECT_EQ(back.steps[static_cast<std::size_t>(step)].workspace_offset, (arena + 63) / 64 * 64);
  // Saved again, the fields come back (written only when planned).
  EXPECT_NE(ExecutionPlan::deserialize(back.serialize())
                .steps[static_cast<std::size_t>(step)]
                .workspace_bytes,
            0);
  const HostTensor x = random_tensor({2, 3, 8, 8}, 9);
  auto a = Executor(std::make_shared<ExecutionPlan>(ExecutionPlan::deserialize(conv_.bytes)))
               .run({"x"}, {x});
  auto b = Executor(std::make_shared<ExecutionPlan>(std::move(back))).run({"x"}, {x});
  ASSERT_EQ(a[0].nbytes(), b[0].nbytes());
  EXPECT_EQ(std::memcmp(a[0].data, b[0].data, a[0].nbytes()), 0);

  expect_refused(conv_.edited([&](json& h) {
    h["steps"][step]["workspace_offset"] = (arena + 63) / 64 * 64;
    h["steps"][step]["workspace_bytes"] = 4096;
  }),
                 "inside the arena", "workspace past the arena");
  expect_refused(conv_.edited([&](json& h) {
    h["steps"][step]["workspace_offset"] = 8;
    h["steps"][step]["workspace_bytes"] = 64;
  }),
                 "64-byte aligned", "unaligned workspace");
  // Over the step's own input (alive while the step runs).
  const int in = h0["steps"][step]["inputs"][0].get<int>();
  const int64_t in_off = h0["values"][in]["arena_offset"].get<int64_t>();
  ASSERT_GE(in_off, 0);
  expect_refused(conv_.edited([&](json& h) {
    h["steps"][step]["workspace_offset"] = in_off;
    h["steps"][step]["workspace_bytes"] = 64;
  }),
                 "workspace of", "workspace over a live input");
}

TEST_F(PlanIntegrity, SwappedKernelOrOpTypeIsRefused) {
  // Edited in place (not resealed), any swap is a checksum mismatch.
  expect_refused(
      conv_.edited([](json& h) { h["steps"][step_of(h, "Softmax")]["op_type"] = "Relu"; },
                   /*seal=*/false),
      "checksum mismatch in the header", "unsealed op type swap");
  // Resealed: another op's kernel name, or no such kernel.
  expect_refused(
      conv_.edited([](json& h) { h["steps"][step_of(h, "Softmax")]["kernel"] = "cpu_blas"; }),
      "kernel 'cpu_blas'", "kernel of another op");
  expect_refused(
      conv_.edited([](json& h) { h["steps"][step_of(h, "Softmax")]["kernel"] = "no_such_kernel"; }),
      "no_such_kernel", "unknown kernel");
  // The op type swapped, its recorded op key kept: the key is not the op's.
  expect_refused(
      conv_.edited([](json& h) { h["steps"][step_of(h, "Softmax")]["op_type"] = "Relu"; }),
      "op key", "op type swapped");
  // Op type and key swapped together, the kernel of the old op kept (a GEMM
  // kernel under a Relu step, whose output shape differs too).
  expect_refused(conv_.edited([](json& h) {
    json& s = h["steps"][step_of(h, "MatMul")];
    s["op_type"] = "Relu";
    s["op_key"] = "relu";
  }),
                 "MatMul", "op type and key swapped");
  // A consistent swap (op type, key and a kernel of the new op, same shapes) is a
  // valid plan of another model; only the checksum tells it from the saved one.
  // An op whose output shape differs from the recorded one.
  expect_refused(conv_.edited([](json& h) {
    json& s = h["steps"][step_of(h, "Softmax")];
    s["op_type"] = "ReduceSum";
    s["op_key"] = "reducesum";
  }),
                 "the op gives", "op type with another shape");
}

TEST_F(PlanIntegrity, InconsistentValuesAreRefused) {
  auto constant = [](const json& v) { return v["constant"].get<int>() >= 0; };
  expect_refused(
      conv_.edited([&](json& h) { h["values"][value_where(h, constant)]["constant"] = 99; }),
      "refers to constant 99", "constant index");
  expect_refused(conv_.edited([&](json& h) { h["values"][value_where(h, constant)]["dtype"] = 7; }),
                 "but its constant", "constant dtype");
  expect_refused(conv_.edited([](json& h) { h["values"][0]["kind"] = 9; }), "kind 9", "kind");
  expect_refused(conv_.edited([](json& h) { h["values"][0]["dtype"] = 250; }), "dtype code 250",
                 "dtype");
  // A step writing the model input or a constant.
  expect_refused(conv_.edited([](json& h) { h["steps"][0]["outputs"][0] = h["inputs"][0]; }),
                 "an input or constant", "writes input");
  // A step reading a value no earlier step wrote (steps reordered).
  expect_refused(conv_.edited([](json& h) { std::swap(h["steps"][0], h["steps"][1]); }),
                 "before any step writes it", "reordered");
  // The recorded output shape is not what the op gives (same byte size).
  expect_refused(conv_.edited([](json& h) {
    const int y = h["outputs"][0].get<int>();
    h["values"][y]["shape"] = json::array({10, 2});
  }),
                 "the op gives", "output shape");
  // View damage: a value claimed as a view, and a view step whose output is not one.
  expect_refused(conv_.edited([](json& h) {
    const int y = h["outputs"][0].get<int>();
    h["values"][y]["alias_of"] = h["inputs"][0];
  }),
                 "view", "bogus view");
  expect_refused(conv_.edited([](json& h) {
    for (json& s : h["steps"])
      if (s["alias"].get<bool>()) s["alias"] = false;
  }),
                 "view", "view step cleared");
  expect_refused(conv_.edited([](json& h) { h["steps"][step_of(h, "Softmax")]["alias"] = true; }),
                 "view", "step made a view");
}

TEST_F(PlanIntegrity, ShortenedLifetimeIsRefused) {
  // The dynamic net's intermediates are freed after their recorded last use: an
  // earlier one would free a buffer a later step still reads.
  expect_refused(dyn_.edited([](json& h) {
    for (json& v : h["values"])
      if (v["kind"] == 2 && v["last_use"].get<int>() > 0) {
        v["last_use"] = v["last_use"].get<int>() - 1;
        return;
      }
  }),
                 "last use", "shortened lifetime");
  // Two arena buffers alive together moved onto each other.
  expect_refused(conv_.edited([](json& h) {
    std::vector<int> arena;
    for (std::size_t i = 0; i < h["values"].size(); ++i)
      if (is_arena_value(h["values"][i])) arena.push_back(static_cast<int>(i));
    ASSERT_GE(arena.size(), 2u);
    h["values"][arena[1]]["arena_offset"] = h["values"][arena[0]]["arena_offset"];
  }),
                 "plan", "overlapping buffers");
}

TEST_F(PlanIntegrity, MalformedJsonTypesAreRefused) {
  expect_refused(conv_.edited([](json& h) { h["values"] = 3; }), "plan file", "values not a list");
  expect_refused(conv_.edited([](json& h) { h["steps"][0]["inputs"] = "x"; }), "not a list",
                 "inputs string");
  expect_refused(conv_.edited([](json& h) { h["steps"][0]["attrs"] = json::array({1}); }),
                 "plan file", "attrs array");
  expect_refused(conv_.edited([](json& h) { h.erase("environment"); }), "plan file",
                 "no environment");
  expect_refused(conv_.edited([](json& h) { h["constants"][0]["offset"] = 3; }), "unaligned",
                 "constant offset");
  expect_refused(conv_.edited([](json& h) { h["constants"][0]["nbytes"] = 1ULL << 62; }),
                 "extends past", "constant size");
  expect_refused(conv_.edited([](json& h) { h["blob_bytes"] = 0; }), "trailing bytes", "blob size");
}

// Random single-bit flips of a saved plan: a typed error, or (a flip that changes
// nothing the plan means, which the checksum leaves no room for) bit-identical
// outputs. Never a crash, never a different result.
TEST_F(PlanIntegrity, SingleBitFlipsAreRefusedOrHarmless) {
  const HostTensor x = random_tensor({2, 3, 8, 8}, 11);
  const auto ref =
      Executor(std::make_shared<ExecutionPlan>(ExecutionPlan::deserialize(conv_.bytes)))
          .run({"x"}, {x});
  std::mt19937_64 rng(1234);
  int refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string b = conv_.bytes;
    const std::size_t bit = rng() % (b.size() * 8);
    b[bit / 8] = static_cast<char>(b[bit / 8] ^ (1u << (bit % 8)));
    try {
      auto plan = std::make_shared<ExecutionPlan>(ExecutionPlan::deserialize(b));
      const auto y = Executor(plan).run({"x"}, {x});
      ASSERT_EQ(y[0].nbytes(), ref[0].nbytes()) << "bit " << bit;
      EXPECT_EQ(std::memcmp(y[0].data, ref[0].data, y[0].nbytes()), 0) << "bit " << bit;
    } catch (const XpuRuntimeError&) {
      ++refused;
    }
  }
  EXPECT_EQ(refused, 300);  // the digests cover every byte of the file
}

// A provider that runs the CPU kernels under another device kind, with an
// environment the test sets (as CUDA's records the GPU architecture).
class EnvProvider final : public ExecutionProvider {
 public:
  explicit EnvProvider(ProviderPtr cpu) : cpu_(std::move(cpu)) {}
  const std::string& name() const override { return name_; }
  DeviceKind kernel_device() const override { return cpu_->kernel_device(); }
  Device device() const override { return cpu_->device(); }
  FusionSupport fusions() const override { return cpu_->fusions(); }
  bool host_memory() const override { return cpu_->host_memory(); }
  std::map<std::string, std::string> environment() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return env_;
  }
  void set_environment(std::map<std::string, std::string> env) {
    std::lock_guard<std::mutex> lock(mu_);
    env_ = std::move(env);
  }
  std::shared_ptr<const DeviceConstants> upload_constants(
      const std::vector<HostTensor>& constants,
      const std::vector<bool>& read_on_device) const override {
    return cpu_->upload_constants(constants, read_on_device);
  }
  std::unique_ptr<RunResources> begin_run(std::size_t arena, std::size_t workspace) const override {
    return cpu_->begin_run(arena, workspace);
  }

 private:
  ProviderPtr cpu_;
  std::string name_ = "envtest";
  mutable std::mutex mu_;
  std::map<std::string, std::string> env_;
};

TEST(PlanProvenance, EnvironmentMismatchIsRefusedNamingTheField) {
  auto provider = std::make_shared<EnvProvider>(ProviderRegistry::instance().get("cpu"));
  provider->set_environment({{"gpu_arch", "sm_90"}, {"cuda_runtime", "12080"}});
  ASSERT_TRUE(ProviderRegistry::instance().add(provider, /*replace=*/true));
  CompileOptions o;
  o.device = "envtest";
  const ExecutionPlan plan = compile(conv_net(), o);
  EXPECT_EQ(plan.header.environment.at("gpu_arch"), "sm_90");
  EXPECT_NE(plan.summary().find("gpu_arch=sm_90"), std::string::npos);
  const std::string bytes = plan.serialize();
  EXPECT_NO_THROW(ExecutionPlan::deserialize(bytes));  // same environment: loads

  provider->set_environment({{"gpu_arch", "sm_80"}, {"cuda_runtime", "12080"}});
  expect_refused(bytes, "gpu_arch: plan sm_90, this device sm_80", "arch");
  provider->set_environment({{"gpu_arch", "sm_90"}});
  expect_refused(bytes, "cuda_runtime: plan 12080, this device (none)", "missing field here");
  provider->set_environment({{"gpu_arch", "sm_90"}, {"cuda_runtime", "12080"}, {"cudnn", "9.1.0"}});
  expect_refused(bytes, "cudnn: plan (not recorded), this device 9.1.0", "field the plan lacks");
  // The recorded environment is under the checksum: editing it needs a reseal, and
  // then the comparison still refuses.
  File f{bytes};
  provider->set_environment({{"gpu_arch", "sm_90"}, {"cuda_runtime", "12080"}});
  expect_refused(f.edited([](json& h) { h["environment"]["gpu_arch"] = "sm_80"; }),
                 "gpu_arch: plan sm_80, this device sm_90", "edited environment");
  // The CPU records none (its kernels pick their micro-kernels on the loading CPU).
  EXPECT_TRUE(compile(conv_net(), CompileOptions{}).header.environment.empty());
  EXPECT_TRUE(ProviderRegistry::instance().remove("envtest"));
}

}  // namespace
}  // namespace xpuruntime::graph
