// The CUDA op kernels inside CUDA graphs: a prepared kernel captured once and
// replayed gives the bits of a direct run (elementwise with broadcasting, softmax,
// a reduction through its workspace, a tiled transpose, a gather); a kernel that
// must read a run-time input on the host refuses to run under capture with a
// typed error instead of breaking the capture.
#include "test_cuda_op_kernels_util.h"

namespace xpuruntime::cuda_op_tests {
namespace {

TEST_F(CudaOpTest, CapturedGraphReplaysGiveTheBitsOfADirectRun) {
  std::vector<OpCall> calls;
  calls.push_back(
      {"Add",
       {},
       {random_array(rng, DType::kFloat16, {4, 1, 65}), random_array(rng, DType::kFloat16, {3, 1})},
       {},
       {{DType::kFloat16, {4, 3, 65}}}});
  calls.push_back({"Softmax",
                   {},
                   {random_array(rng, DType::kBFloat16, {7, 1500})},
                   {},
                   {{DType::kBFloat16, {7, 1500}}}});
  calls.push_back({"ReduceMean",
                   {{"axes", Attr::of_ints({0, 2})}, {"keepdims", Attr::of_int(0)}},
                   {random_array(rng, DType::kFloat32, {6, 5, 7})},
                   {},
                   {{DType::kFloat32, {5}}}});
  calls.push_back({"Transpose",
                   {},
                   {random_array(rng, DType::kFloat32, {33, 70})},
                   {},
                   {{DType::kFloat32, {70, 33}}}});
  calls.push_back({"Gather",
                   {{"axis", Attr::of_int(1)}},
                   {random_array(rng, DType::kFloat32, {3, 9, 4}),
                    make_array(DType::kInt64, {5}, {0, 8, -1, 3, 3})},
                   {},
                   {{DType::kFloat32, {3, 5, 4}}}});
  for (const OpCall& c : calls) {
    const std::vector<HostArray> direct = run(c);
    if (direct.empty()) return;
    std::optional<Staged> st = stage(c);
    ASSERT_TRUE(st.has_value());
    std::shared_ptr<Stream> stream = StreamManager::instance().create_stream(Device::parse("cuda:0"));
    st->args.stream = stream->native();
    GraphCapture capture(stream);
    capture.begin();
    st->kernel->run(st->args);
    std::shared_ptr<Graph> graph = capture.end();
    for (int rep = 0; rep < 2; ++rep) graph->replay(*stream);
    stream->synchronize();
    const std::vector<HostArray> replayed = download(*st);
    ASSERT_EQ(replayed.size(), direct.size());
    EXPECT_EQ(replayed[0].v, direct[0].v)
        << c.op_type << ": the graph replay differs from a direct run";
  }
}

TEST_F(CudaOpTest, RunTimeHostInputsAreRefusedUnderCapture) {
  HostArray x = random_array(rng, DType::kFloat32, {6, 8});
  auto ints = [](std::vector<double> v) {
    // The size is read before v is moved: the order in which one call's arguments are
    // evaluated is unspecified (GCC moved v first, so every array came out empty).
    const int64_t n = static_cast<int64_t>(v.size());
    return make_array(DType::kInt64, {n}, std::move(v));
  };
  // Slice starts/ends as run-time inputs: their values are needed on the host.
  std::optional<Staged> st =
      stage({"Slice", {}, {x, ints({1}), ints({5}), ints({0})}, {}, {{DType::kFloat32, {4, 8}}}});
  if (!st) return;
  std::shared_ptr<Stream> stream = StreamManager::instance().create_stream(Device::parse("cuda:0"));
  st->args.stream = stream->native();
  {
    GraphCapture capture(stream);
    capture.begin();
    try {
      st->kernel->run(st->args);
      ADD_FAILURE() << "Slice read a run-time input on the host during a capture";
    } catch (const UnsupportedOperationError& e) {
      // Which run-time input is read first (starts or axes) is up to the kernel.
      const std::string m = e.what();
      EXPECT_NE(m.find("computed at run time"), std::string::npos) << m;
      EXPECT_NE(m.find("graph"), std::string::npos) << m;
    }
  }  // the capture is aborted here
  // Outside a capture the same prepared kernel runs, on a stream that never captured.
  std::shared_ptr<Stream> plain = StreamManager::instance().create_stream(Device::parse("cuda:0"));
  st->args.stream = plain->native();
  st->kernel->run(st->args);
  plain->synchronize();
  const std::vector<HostArray> out = download(*st);
  std::vector<double> want(x.v.begin() + 8, x.v.begin() + 40);
  expect_close(out[0], want, "Slice after the refused capture", 0);
}

// The run-time host read itself (no capture anywhere): starts/ends/axes as inputs.
TEST_F(CudaOpTest, RunTimeHostInputsRunOutsideCapture) {
  HostArray x = random_array(rng, DType::kFloat32, {6, 8});
  auto ints = [](std::vector<double> v) {
    // The size is read before v is moved: the order in which one call's arguments are
    // evaluated is unspecified (GCC moved v first, so every array came out empty).
    const int64_t n = static_cast<int64_t>(v.size());
    return make_array(DType::kInt64, {n}, std::move(v));
  };
  std::optional<Staged> st =
      stage({"Slice", {}, {x, ints({1}), ints({5}), ints({0})}, {}, {{DType::kFloat32, {4, 8}}}});
  if (!st) return;
  std::shared_ptr<Stream> stream = StreamManager::instance().create_stream(Device::parse("cuda:0"));
  st->args.stream = stream->native();
  st->kernel->run(st->args);
  stream->synchronize();
  const std::vector<HostArray> out = download(*st);
  std::vector<double> want(x.v.begin() + 8, x.v.begin() + 40);
  expect_close(out[0], want, "Slice with run-time starts/ends/axes", 0);
}

}  // namespace
}  // namespace xpuruntime::cuda_op_tests
