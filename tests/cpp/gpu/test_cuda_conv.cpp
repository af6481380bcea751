// The cuDNN Conv kernel ("conv", "cudnn") against a float64 host reference
// written from the ONNX definition: 1-D, 2-D with
// groups/dilations/strides/asymmetric pads, depthwise with SAME_UPPER, 3-D;
// float32 with TF32 off (rel 1e-4), float16 and bfloat16 (rel 1e-2); fused bias
// + Relu and residual; the workspace it reports and a pinned algorithm
// honoured; supports() refusals with their reason codes.
#include "test_cuda_op_kernels_util.h"

namespace xpuruntime::cuda_op_tests {
namespace {

struct ConvCase {
  std::string name;
  Shape x, w;
  std::vector<int64_t> strides, dilations, pads;  // empty = ONNX defaults
  int64_t group = 1;
  std::string auto_pad = "NOTSET";
};

// Output sizes and begin/end pads per spatial dim (ONNX Conv formulas).
void geometry(const ConvCase& c, std::vector<int64_t>& out, std::vector<int64_t>& pb,
              std::vector<int64_t>& pe) {
  const std::size_t r = c.x.size() - 2;
  out.assign(r, 0), pb.assign(r, 0), pe.assign(r, 0);
  for (std::size_t i = 0; i < r; ++i) {
    const int64_t in = c.x[2 + i], s = c.strides.empty() ? 1 : c.strides[i];
    const int64_t d = c.dilations.empty() ? 1 : c.dilations[i];
    const int64_t ext = (c.w[2 + i] - 1) * d + 1;
    if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
      out[i] = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>((out[i] - 1) * s + ext - in, 0);
      pb[i] = c.auto_pad == "SAME_UPPER" ? total / 2 : (total + 1) / 2;
      pe[i] = total - pb[i];
    } else {
      pb[i] = c.pads.empty() ? 0 : c.pads[i];
      pe[i] = c.pads.empty() ? 0 : c.pads[r + i];
      out[i] = (in + pb[i] + pe[i] - ext) / s + 1;
    }
  }
}

Shape out_shape(const ConvCase& c) {
  std::vector<int64_t> out, pb, pe;
  geometry(c, out, pb, pe);
  Shape y = {c.x[0], c.w[0]};
  y.insert(y.end(), out.begin(), out.end());
  return y;
}

// y = relu?(conv(x, w) + b + z) in float64 from the (dtype-rounded) inputs.
std::vector<double> conv_ref(const ConvCase& c, const HostArray& x, const HostArray& w,
                             const HostArray* b, const HostArray* z, bool relu) {
  std::vector<int64_t> out, pb, pe;
  geometry(c, out, pb, pe);
  const std::size_t r = out.size();
  const int64_t n = c.x[0], cin = c.x[1], m = c.w[0], cg = c.w[1], mg = m / c.group;
  int64_t in_sz = 1, out_sz = 1, k_sz = 1;
  for (std::size_t i = 0; i < r; ++i) in_sz *= c.x[2 + i], out_sz *= out[i], k_sz *= c.w[2 + i];
  std::vector<double> y(static_cast<std::size_t>(n * m * out_sz));
  std::vector<int64_t> oc(r), kc(r);
  for (int64_t b0 = 0; b0 < n; ++b0)
    for (int64_t oc_ch = 0; oc_ch < m; ++oc_ch)
      for (int64_t o = 0; o < out_sz; ++o) {
        for (std::size_t i = r, rem = static_cast<std::size_t>(o); i-- > 0;)
          oc[i] = static_cast<int64_t>(rem % static_cast<std::size_t>(out[i])),
          rem /= static_cast<std::size_t>(out[i]);
        double acc = b ? b->v[static_cast<std::size_t>(oc_ch)] : 0.0;
        const int64_t g = oc_ch / mg;
        for (int64_t ci = 0; ci < cg; ++ci)
          for (int64_t kk = 0; kk < k_sz; ++kk) {
            int64_t rem = kk, off = 0;
            bool inside = true;
            for (std::size_t i = r; i-- > 0;) kc[i] = rem % c.w[2 + i], rem /= c.w[2 + i];
            for (std::size_t i = 0; i < r; ++i) {
              const int64_t s = c.strides.empty() ? 1 : c.strides[i];
              const int64_t d = c.dilations.empty() ? 1 : c.dilations[i];
              const int64_t pos = oc[i] * s - pb[i] + kc[i] * d;
              if (pos < 0 || pos >= c.x[2 + i]) inside = false;
              off = off * c.x[2 + i] + pos;
            }
            if (!inside) continue;
            const double xv = x.v[static_cast<std::size_t>((b0 * cin + g * cg + ci) * in_sz + off)];
            const double wv = w.v[static_cast<std::size_t>((oc_ch * cg + ci) * k_sz + kk)];
            acc += xv * wv;
          }
        const std::size_t yi = static_cast<std::size_t>((b0 * m + oc_ch) * out_sz + o);
        if (z) acc += z->v[yi];
        y[yi] = relu ? std::max(acc, 0.0) : acc;
      }
  return y;
}

std::map<std::string, Attr> attrs_of(const ConvCase& c) {
  std::map<std::string, Attr> a;
  if (!c.strides.empty()) a["strides"] = Attr::of_ints(c.strides);
  if (!c.dilations.empty()) a["dilations"] = Attr::of_ints(c.dilations);
  if (!c.pads.empty()) a["pads"] = Attr::of_ints(c.pads);
  if (c.group != 1) a["group"] = Attr::of_int(c.group);
  if (c.auto_pad != "NOTSET") a["auto_pad"] = Attr::of_string(c.auto_pad);
  return a;
}

const std::vector<ConvCase>& cases() {
  static const std::vector<ConvCase> c = {
      {"1d_stride_asym_pad", {2, 4, 17}, {6, 4, 3}, {2}, {}, {1, 2}},
      {"2d_groups_dil_stride_asym", {2, 6, 11, 9}, {8, 3, 3, 2}, {2, 1}, {1, 2}, {1, 0, 2, 1}, 2},
      {"2d_depthwise_same_upper", {1, 8, 10, 10}, {8, 1, 3, 3}, {2, 2}, {}, {}, 8, "SAME_UPPER"},
      {"2d_plain", {2, 16, 12, 12}, {32, 16, 3, 3}, {}, {}, {1, 1, 1, 1}},
      {"3d", {1, 3, 5, 6, 7}, {4, 3, 3, 3, 3}, {1, 2, 1}, {}, {1, 1, 1, 1, 1, 1}},
  };
  return c;
}

class CudnnConvTest : public CudaOpTest {
 public:
  KernelPtr kernel() {
    KernelPtr k = KernelRegistry::instance().find("conv", "cudnn");
    if (!k)
      ADD_FAILURE() << "no (conv, cudnn) kernel: the plugin was built without cuDNN or "
                       "register_cudnn_conv_kernels is not called";
    return k;
  }

  struct Result {
    std::vector<HostArray> outputs;
    std::size_t workspace = 0;
  };

  // Prepares (conv, cudnn) for `call` with the context settings and runs it.
  std::optional<Result> run_conv(const OpCall& call, std::size_t ws_limit = 0,
                                 const std::string& algorithm = "", bool give_workspace = true,
                                 bool graph_replay = false) {
    KernelPtr k = kernel();
    if (!k) return std::nullopt;
    OpContext ctx = context_of(call, Device::parse("cuda:0"), capability_);
    ctx.op = "conv";
    ctx.allow_tf32 = false;
    ctx.workspace_limit_bytes = ws_limit;
    const Support s = KernelRegistry::check(*k, ctx);
    if (!s.ok) {
      ADD_FAILURE() << "refused: " << s.reason_code << ": " << s.detail;
      return std::nullopt;
    }
    graph::Node node = node_of(call);
    PrepareContext pc;
    pc.ctx = &ctx;
    pc.node = &node;
    pc.algorithm = algorithm;
    pc.constants.resize(call.inputs.size());
    PreparedKernelPtr p = k->prepare(pc);
    KernelArgs args;
    std::vector<Tensor> keep;
    for (const auto& in : call.inputs) {
      if (!in) {
        args.inputs.emplace_back();
        continue;
      }
      Tensor d = to_host_tensor(*in).to(Device::parse("cuda:0"));
      keep.push_back(d);
      args.inputs.push_back(TensorArg{d.dtype(), d.shape(), d.data_ptr()});
    }
    Tensor y = Tensor::empty(call.outputs[0].second, call.outputs[0].first, Device::parse("cuda:0"));
    args.outputs.push_back(TensorArg{y.dtype(), y.shape(), y.data_ptr()});
    Result r;
    r.workspace = p->workspace_bytes();
    if (give_workspace && r.workspace > 0) {
      Tensor ws =
          Tensor::empty({static_cast<int64_t>(r.workspace)}, DType::kUInt8, Device::parse("cuda:0"));
      keep.push_back(ws);
      args.workspace = ws.data_ptr();
      args.workspace_bytes = r.workspace;
    }
    std::shared_ptr<Stream> stream = StreamManager::instance().create_stream(Device::parse("cuda:0"));
    args.stream = stream->native();
    DeviceManager::instance().synchronize(0);
    p->run(args);
    stream->synchronize();
    Tensor h = y.to(Device::cpu());
    DeviceManager::instance().synchronize(0);
    r.outputs.push_back(from_host_tensor(h));
    if (graph_replay) {
      // The same prepared run captured once into a CUDA graph, replayed twice over
      // a cleared output: outputs[1].
      HostArray cleared{y.dtype(), y.shape(), std::vector<double>(y.numel(), 0.0)};
      y.copy_from(to_host_tensor(cleared));
      DeviceManager::instance().synchronize(0);
      GraphCapture capture(stream);
      capture.begin();
      p->run(args);
      std::shared_ptr<Graph> graph = capture.end();
      for (int rep = 0; rep < 2; ++rep) graph->replay(*stream);
      stream->synchronize();
      Tensor g = y.to(Device::cpu());
      DeviceManager::instance().synchronize(0);
      r.outputs.push_back(from_host_tensor(g));
    }
    return r;
  }

  // One case: random X, W (scaled so sums stay O(1)), optional
  // bias/residual/relu.
  void check(const ConvCase& c, DType t, bool bias, bool residual, bool relu, double tol) {
    const Shape y_shape = out_shape(c);
    int64_t fan_in = c.w[1];
    for (std::size_t i = 2; i < c.w.size(); ++i) fan_in *= c.w[i];
    const double sw = 1.0 / std::sqrt(static_cast<double>(fan_in));
    HostArray x = random_array(rng, t, c.x, -1, 1);
    HostArray w = random_array(rng, t, c.w, -sw, sw);
    HostArray b = random_array(rng, t, {c.w[0]}, -0.5, 0.5);
    HostArray z = random_array(rng, t, y_shape, -0.5, 0.5);
    OpCall call;
    call.op_type = "Conv";
    call.attrs = attrs_of(c);
    call.inputs = {x, w};
    if (bias || residual) call.inputs.push_back(bias ? std::optional<HostArray>(b) : std::nullopt);
    if (residual) {
      call.inputs.push_back(z);
      call.attrs["_sum"] = Attr::of_int(1);
    }
    if (relu) call.attrs["_act"] = Attr::of_string("Relu");
    call.outputs = {{t, y_shape}};
    const std::vector<double> want =
        conv_ref(c, x, w, bias ? &b : nullptr, residual ? &z : nullptr, relu);
    std::optional<Result> r = run_conv(call);
    if (!r) return;
    expect_close(
        r->outputs[0], want,
        c.name + (bias ? " +bias" : "") + (residual ? " +residual" : "") + (relu ? " +relu" : ""),
        tol);
  }
};

TEST_F(CudnnConvTest, Float32MatchesFloat64ReferenceWithTf32Off) {
  for (const ConvCase& c : cases()) check(c, DType::kFloat32, true, false, false, 1e-4);
  check(cases()[3], DType::kFloat32, false, false, false, 1e-4);  // no bias
}

TEST_F(CudnnConvTest, HalfAndBfloat16AccumulateInFloat32) {
  for (DType t : {DType::kFloat16, DType::kBFloat16})
    for (const ConvCase& c : cases()) check(c, t, true, false, false, 1e-2);
}

TEST_F(CudnnConvTest, FusedBiasReluAndResidual) {
  for (const ConvCase& c : cases()) {
    // bias + Relu: cudnnConvolutionBiasActivationForward; + residual through its z.
    check(c, DType::kFloat32, true, false, true, 1e-4);
    check(c, DType::kFloat32, true, true, true, 1e-4);
    // The unfused paths: bias + residual without activation, Relu or residual
    // without a bias.
    check(c, DType::kFloat32, true, true, false, 1e-4);
    check(c, DType::kFloat32, false, false, true, 1e-4);
    check(c, DType::kFloat32, false, true, true, 1e-4);
  }
  check(cases()[3], DType::kFloat16, true, true, true, 1e-2);
  check(cases()[3], DType::kBFloat16, true, false, true, 1e-2);
}

// The unprepared path (Kernel::run with a KernelLaunch, as the dispatch API and
// tuning call it), once per tunable algorithm.
TEST_F(CudnnConvTest, LaunchPathRunsEveryTunableAlgorithm) {
  KernelPtr k = kernel();
  ASSERT_TRUE(k);
  const ConvCase& c = cases()[3];
  HostArray x = random_array(rng, DType::kFloat32, c.x, -1, 1);
  HostArray w = random_array(rng, DType::kFloat32, c.w, -0.1, 0.1);
  HostArray b = random_array(rng, DType::kFloat32, {c.w[0]}, -0.5, 0.5);
  OpCall call{"Conv", attrs_of(c), {x, w, b}, {}, {{DType::kFloat32, out_shape(c)}}};
  call.attrs["_act"] = Attr::of_string("Relu");
  OpContext ctx = context_of(call, Device::parse("cuda:0"), capability_);
  ctx.op = "conv";
  const std::vector<std::string> algos = k->algorithms(ctx);
  ASSERT_FALSE(algos.empty());
  const std::size_t ws = k->workspace_bytes(ctx);
  const std::vector<double> want = conv_ref(c, x, w, &b, nullptr, true);
  for (const std::string& algo : algos) {
    KernelLaunch l;
    l.ctx = &ctx;
    l.algorithm = algo;
    for (const auto& in : call.inputs) l.inputs.push_back(to_host_tensor(*in).to(Device::parse("cuda:0")));
    l.outputs.push_back(Tensor::empty(out_shape(c), DType::kFloat32, Device::parse("cuda:0")));
    Tensor wt;
    if (ws > 0) {
      wt = Tensor::empty({static_cast<int64_t>(ws)}, DType::kUInt8, Device::parse("cuda:0"));
      l.workspace = wt.data_ptr();
      l.workspace_bytes = ws;
    }
    DeviceManager::instance().synchronize(0);
    k->run(l);
    DeviceManager::instance().synchronize(0);
    Tensor h = l.outputs[0].to(Device::cpu());
    DeviceManager::instance().synchronize(0);
    expect_close(from_host_tensor(h), want, "algorithm " + algo, 1e-4);
  }
}

// A run whose shapes differ from the prepared ones (a dynamic batch) plans them
// at run time within the workspace it is given.
TEST_F(CudnnConvTest, RunAtOtherShapesThanPrepared) {
  KernelPtr k = kernel();
  ASSERT_TRUE(k);
  ConvCase c = cases()[1];  // asymmetric pads: needs workspace for the padded copy
  HostArray x = random_array(rng, DType::kFloat32, c.x, -1, 1);
  HostArray w = random_array(rng, DType::kFloat32, c.w, -0.3, 0.3);
  OpCall call{"Conv", attrs_of(c), {x, w}, {}, {{DType::kFloat32, out_shape(c)}}};
  OpContext ctx = context_of(call, Device::parse("cuda:0"), capability_);
  ctx.op = "conv";
  graph::Node node = node_of(call);
  PrepareContext pc;
  pc.ctx = &ctx;
  pc.node = &node;
  PreparedKernelPtr p = k->prepare(pc);
  ConvCase small = c;
  small.x[0] = 1;
  small.x[2] = 7;  // batch 1, height 7
  HostArray xs = random_array(rng, DType::kFloat32, small.x, -1, 1);
  Tensor xd = to_host_tensor(xs).to(Device::parse("cuda:0"));
  Tensor wd = to_host_tensor(w).to(Device::parse("cuda:0"));
  Tensor yd = Tensor::empty(out_shape(small), DType::kFloat32, Device::parse("cuda:0"));
  const std::size_t ws = std::max<std::size_t>(p->workspace_bytes(), 1 << 20);
  Tensor wt = Tensor::empty({static_cast<int64_t>(ws)}, DType::kUInt8, Device::parse("cuda:0"));
  KernelArgs args;
  args.inputs = {{DType::kFloat32, small.x, xd.data_ptr()}, {DType::kFloat32, c.w, wd.data_ptr()}};
  args.outputs = {{DType::kFloat32, out_shape(small), yd.data_ptr()}};
  args.workspace = wt.data_ptr();
  args.workspace_bytes = ws;
  DeviceManager::instance().synchronize(0);
  p->run(args);
  DeviceManager::instance().synchronize(0);
  Tensor h = yd.to(Device::cpu());
  DeviceManager::instance().synchronize(0);
  expect_close(from_host_tensor(h), conv_ref(small, xs, w, nullptr, nullptr, false),
               "batch 1, height 7 after preparing batch 2, height 11", 1e-4);
}

TEST_F(CudnnConvTest, WorkspaceLimitAndPinnedAlgorithmHonoured) {
  const ConvCase& sym = cases()[3];  // symmetric pads: no padded copy
  HostArray x = random_array(rng, DType::kFloat32, sym.x, -1, 1);
  HostArray w = random_array(rng, DType::kFloat32, sym.w, -0.1, 0.1);
  OpCall call{"Conv", attrs_of(sym), {x, w}, {}, {{DType::kFloat32, out_shape(sym)}}};
  const std::vector<double> want = conv_ref(sym, x, w, nullptr, nullptr, false);
  // A 1-byte limit leaves only algorithms without workspace.
  std::optional<Result> r = run_conv(call, 1);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->workspace, 0u);
  expect_close(r->outputs[0], want, "limit 1 byte", 1e-4);
  r = run_conv(call, 0, "implicit_gemm");
  ASSERT_TRUE(r);
  expect_close(r->outputs[0], want, "pinned implicit_gemm", 1e-4);
  EXPECT_THROW(run_conv(call, 0, "no_such_algo"), InvalidArgumentError);
  // The asymmetric case copies the padded input into the workspace: it says so,
  // and a run without it is refused with a typed error.
  const ConvCase& asym = cases()[1];
  HostArray xa = random_array(rng, DType::kFloat32, asym.x, -1, 1);
  HostArray wa = random_array(rng, DType::kFloat32, asym.w, -0.1, 0.1);
  OpCall ca{"Conv", attrs_of(asym), {xa, wa}, {}, {{DType::kFloat32, out_shape(asym)}}};
  r = run_conv(ca);
  ASSERT_TRUE(r);
  EXPECT_GE(r->workspace, static_cast<std::size_t>(xa.numel()) * 4);
  EXPECT_THROW(run_conv(ca, 0, "", /*give_workspace=*/false), InvalidArgumentError);
}

// Prepared once, captured into a CUDA graph and replayed: the bits of a direct
// run, through the padded copy, the fused call and the unfused epilogue.
TEST_F(CudnnConvTest, CapturedGraphReplaysGiveTheBitsOfADirectRun) {
  for (int variant = 0; variant < 3; ++variant) {
    const ConvCase& c = cases()[variant == 0 ? 1 : 3];
    HostArray x = random_array(rng, DType::kFloat16, c.x, -1, 1);
    HostArray w = random_array(rng, DType::kFloat16, c.w, -0.2, 0.2);
    HostArray b = random_array(rng, DType::kFloat16, {c.w[0]}, -0.5, 0.5);
    HostArray z = random_array(rng, DType::kFloat16, out_shape(c), -0.5, 0.5);
    OpCall call{"Conv", attrs_of(c), {x, w, b}, {}, {{DType::kFloat16, out_shape(c)}}};
    if (variant != 2) call.attrs["_act"] = Attr::of_string("Relu");  // 2: bias only, unfused
    if (variant == 1) {
      call.inputs.push_back(z);
      call.attrs["_sum"] = Attr::of_int(1);
    }
    std::optional<Result> r = run_conv(call, 0, "", true, /*graph_replay=*/true);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->outputs.size(), 2u);
    EXPECT_EQ(r->outputs[1].v, r->outputs[0].v)
        << "variant " << variant << ": the graph replay differs from a direct run";
  }
}

// supports() needs no device: refusals carry the registry's reason codes.
TEST(CudnnConvSupports, RefusesWithReasonCodes) {
  KernelPtr k = KernelRegistry::instance().find("conv", "cudnn");
  if (!k) GTEST_SKIP() << "the CUDA plugin is not loaded or was built without cuDNN";
  auto ctx_of = [](DType t, Shape x, Shape w, std::map<std::string, std::string> attrs) {
    OpContext c;
    c.op = "conv";
    c.device = Device::parse("cuda:0");
    c.capability = 90;
    c.inputs = {{t, x, {}}, {t, w, {}}};
    Shape y = {x[0], w[0]};
    for (std::size_t i = 2; i < x.size(); ++i) y.push_back(x[i] - w[i] + 1);
    c.outputs = {{t, y, {}}};
    c.attrs = std::move(attrs);
    return c;
  };
  auto code = [&](const OpContext& c) { return KernelRegistry::check(*k, c).reason_code; };
  EXPECT_TRUE(
      KernelRegistry::check(*k, ctx_of(DType::kFloat32, {1, 4, 8, 8}, {4, 4, 3, 3}, {})).ok);
  EXPECT_EQ(code(ctx_of(DType::kFloat32, {1, 4, 8, 8}, {4, 4, 3, 3}, {{"_act", "Sigmoid"}})),
            reason::kAttributeUnsupported);
  EXPECT_EQ(code(ctx_of(DType::kFloat64, {1, 4, 8, 8}, {4, 4, 3, 3}, {})),
            reason::kDtypeUnsupported);
  EXPECT_EQ(code(ctx_of(DType::kFloat32, {1, 4, 3, 3, 3, 3}, {4, 4, 1, 1, 1, 1}, {})),
            reason::kShapeUnsupported);
  EXPECT_EQ(code(ctx_of(DType::kFloat32, {1, 6, 8, 8}, {4, 4, 3, 3}, {{"group", "2"}})),
            reason::kShapeUnsupported);
  OpContext mixed = ctx_of(DType::kFloat16, {1, 4, 8, 8}, {4, 4, 3, 3}, {});
  mixed.inputs[1].dtype = DType::kFloat32;
  EXPECT_EQ(code(mixed), reason::kDtypeUnsupported);
  OpContext old = ctx_of(DType::kFloat32, {1, 4, 8, 8}, {4, 4, 3, 3}, {});
  old.capability = 80;
  EXPECT_EQ(code(old), reason::kCapabilityTooLow);
  OpContext sum = ctx_of(DType::kFloat32, {1, 4, 8, 8}, {4, 4, 3, 3}, {{"_sum", "1"}});
  EXPECT_EQ(code(sum), reason::kShapeUnsupported);  // no residual input
}

}  // namespace
}  // namespace xpuruntime::cuda_op_tests
