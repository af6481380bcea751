// The channels-last layout pass, shared by its two sources: layout_channels_last.cpp
// (values, Conv, Transpose, elementwise ops, the pass itself) and
// layout_channels_last_ops.cpp (Concat/Split/Slice, channel shuffles, BatchNormalization,
// Shape, pooling). What the pass does and why: layout_channels_last.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <unordered_map>

#include "graph/fusion_patterns.h"
#include "graph/passes.h"
#include "xpuruntime/decision.h"
#include "xpuruntime/kernel_registry.h"
#include "xpuruntime/ops/elementwise_program.h"
#include "xpuruntime/ops/op_schema.h"
#include "xpuruntime/ops/spatial.h"

namespace xpuruntime::graph::passes::channels_last {

using Perm = std::vector<int64_t>;

bool is_identity(const Perm& p);
// transpose(transpose(x, a), b) == transpose(x, compose(a, b)).
Perm compose(const Perm& a, const Perm& b);
// The position of logical axis `axis` in the channels-last order.
int64_t cl_axis(int64_t axis, std::size_t rank);
// A constant transposed at compile time (any dtype: bytes moved element-wise).
HostTensor transposed_constant(const HostTensor& t, const Perm& perm);
// Ops that do not care which axis holds the channels.
bool elementwise_op(const Node& n);

class ChannelsLast {
 public:
  ChannelsLast(Graph& g, const ExecutionProvider& provider) : g_(g), provider_(provider) {
    for (std::size_t k = 0; k < g_.nodes.size(); ++k) {
      const Node& n = g_.nodes[k];
      std::set<int> read(n.inputs.begin(), n.inputs.end());
      for (int i : read)
        if (i >= 0) {
          ++uses_[i];
          readers_[i].push_back(static_cast<int>(k));
        }
    }
  }

  int run() {
    const std::vector<int> order = g_.topo_order();
    std::vector<Node> nodes = g_.nodes;  // the originals, read while `out_` is built
    for (int k : order) {
      if (absorbed_.count(k)) continue;  // rewritten with an earlier node (a shuffle)
      const Node& n = nodes[k];
      if (!convert(n)) keep(n);
    }
    for (int& o : g_.outputs) {
      if (auto it = alias_.find(o); it != alias_.end()) {
        // A graph output whose Transpose cancelled: copied out under its own name.
        Node id;
        id.name = patterns::unique_node_name(g_, g_.values[o].name + "_identity");
        id.op_type = "Identity";
        id.inputs = {it->second};
        id.outputs = {o};
        out_.push_back(std::move(id));
        alias_.erase(it);
        continue;
      }
      o = plain(o);
    }
    g_.nodes = std::move(out_);
    compact(g_);
    return converted_;
  }

  int convs() const { return convs_; }
  int transposes() const { return transposes_; }
  int swishes() const { return swishes_; }
  // Elements the inserted Transposes move, and the convolutions' input + output
  // elements (what the NCHW path reorders around each oneDNN primitive); -1 where a
  // shape is known only at run time.
  int64_t transposed_elements() const { return moved_; }
  int64_t conv_elements() const { return conv_io_; }

 private:
  // ---- values -------------------------------------------------------------------

  int rank_of(int v) const {
    if (v < 0) return -1;
    const Value& val = g_.values[v];
    if (val.constant.defined()) return static_cast<int>(val.constant.shape.size());
    if (val.shape) return static_cast<int>(val.shape->size());
    if (val.declared) return static_cast<int>(val.declared->size());
    auto it = rank_.find(v);
    return it == rank_.end() ? -1 : it->second;
  }

  // The logical value's spatial dims are all 1 (its NCHW and NHWC bytes are equal).
  bool spatial_ones(int v) const {
    if (ones_.count(v)) return true;
    const Value& val = g_.values[v];
    if (!val.shape || val.shape->size() < 3) return false;
    return std::all_of(val.shape->begin() + 2, val.shape->end(), [](int64_t d) { return d == 1; });
  }

  int fresh(const std::string& prefix, int like, bool channels_last) {
    const int v = g_.value_id(fresh_name(g_, prefix));
    Value& nv = g_.values[v];
    const Value& src = g_.values[like];
    nv.dtype = src.dtype;
    nv.dtype_known = src.dtype_known;
    if (src.shape) {
      nv.shape = channels_last ? ops::permuted(*src.shape, ops::to_channels_last(src.shape->size()))
                               : *src.shape;
    }
    return v;
  }

  int int64_constant(const std::string& prefix, const std::vector<int64_t>& vals) {
    return patterns::int64_constant(g_, prefix, vals);
  }

  // A node moving `from` into `to` by `perm` (into channels-last when `into_cl`): a
  // Reshape when only size-1 dims move around the channel axis (same bytes), else a
  // Transpose.
  void move_layout(int from, int to, const Perm& perm, bool into_cl, bool ones,
                   const std::string& name) {
    Node t;
    t.name = patterns::unique_node_name(g_, name);
    t.inputs = {from};
    t.outputs = {to};
    if (ones) {
      // [N, C, 1..] <-> [N, 1.., C]: 0 keeps N, -1 takes the channels.
      const std::size_t r = perm.size();
      std::vector<int64_t> dims(r, 1);
      dims[0] = 0;
      dims[into_cl ? r - 1 : 1] = -1;  // channels-last: C last; NCHW: C second
      if (g_.values[to].shape) dims = *g_.values[to].shape;
      t.op_type = "Reshape";
      t.inputs.push_back(int64_constant(name + "_shape", dims));
    } else {
      t.op_type = "Transpose";
      t.attrs["perm"] = Attr::of_ints(perm);
      ++transposes_;
      add_elements(moved_, to);
    }
    out_.push_back(std::move(t));
  }

  // The channels-last form of logical value v (rank r), created on first use.
  int cl(int v, int r) {
    if (auto it = cl_.find(v); it != cl_.end()) return it->second;
    const Perm to_cl = ops::to_channels_last(r);
    int c;
    if (g_.values[v].constant.defined()) {
      c = g_.value_id(fresh_name(g_, g_.values[v].name + "_nhwc"));
      Value& cv = g_.values[c];
      cv.constant = transposed_constant(g_.values[v].constant, to_cl);
      cv.dtype = cv.constant.dtype;
      cv.dtype_known = true;
      cv.shape = cv.constant.shape;
    } else if (auto t = transposed_from_.find(v); t != transposed_from_.end()) {
      // v = transpose(b, q): one Transpose from b, none when the two cancel.
      const auto& [b, q] = t->second;
      const Perm p = compose(q, to_cl);
      if (is_identity(p)) {
        c = b;
      } else {
        c = fresh(g_.values[v].name + "_nhwc", v, true);
        move_layout(b, c, p, true, false, g_.values[v].name + "_to_nhwc");
      }
    } else {
      c = fresh(g_.values[v].name + "_nhwc", v, true);
      move_layout(plain(v), c, to_cl, true, spatial_ones(v), g_.values[v].name + "_to_nhwc");
    }
    cl_[v] = c;
    return c;
  }

  // v in the model's layout: materialized once (Transpose back) when its producer
  // was converted; values produced in the model's layout are returned as they are.
  int plain(int v) {
    if (v < 0) return v;
    if (auto it = alias_.find(v); it != alias_.end()) return it->second;
    if (!pending_.count(v)) return v;
    pending_.erase(v);
    const int r = rank_of(v);
    move_layout(cl_.at(v), v, ops::from_channels_last(r), false, spatial_ones(v),
                g_.values[v].name + "_to_nchw");
    return v;
  }

  // v was produced channels-last (by a converted node): its readers convert for free.
  // A value that merely has a channels-last copy does not pull its readers along
  // (their other inputs might need Transposes of their own).
  bool produced_cl(int v) const {
    if (native_.count(v)) return true;
    // The output of a Transpose whose channels-last form is its source (ConvNeXt's
    // Permute back from the MLP): free too. Rank 4-5 only: at rank 3 that
    // permutation is the ubiquitous swap of the last two axes (a ViT's tokens), which
    // says nothing about channels.
    auto t = transposed_from_.find(v);
    return t != transposed_from_.end() && t->second.second.size() >= 4 &&
           is_identity(compose(t->second.second, ops::to_channels_last(t->second.second.size())));
  }

  // Output `v` of a converted node now lives in channels-last value c.
  void set_produced_cl(int v, int c, int r) {
    cl_[v] = c;
    pending_.insert(v);
    native_.insert(v);
    rank_[v] = r;
  }

  void keep(Node n) {
    for (int& i : n.inputs) i = plain(i);
    out_.push_back(std::move(n));
  }

  // ---- conversions --------------------------------------------------------------

  bool convert(const Node& n) {
    if (n.op_type == "Conv" && n.domain.empty()) return convert_conv(n);
    if (n.op_type == "Transpose" && n.domain.empty()) return convert_transpose(n);
    if (elementwise_op(n)) return convert_elementwise(n);
    if ((n.op_type == "Concat" || n.op_type == "Split") && n.domain.empty()) return convert_axis_op(n);
    if (n.op_type == "Slice" && n.domain.empty()) return convert_slice(n);
    if (n.op_type == "Reshape" && n.domain.empty())
      return convert_channel_shuffle(n) || convert_whole_norm(n);
    if (n.op_type.rfind("Reduce", 0) == 0 && n.domain.empty()) return convert_reduce(n);
    if (n.op_type == "BatchNormalization" && n.domain.empty()) return convert_batchnorm(n);
    if (n.op_type == "Shape" && n.domain.empty()) return convert_shape(n);
    static const std::set<std::string> kPools = {"MaxPool", "AveragePool", "GlobalAveragePool",
                                                 "GlobalMaxPool"};
    if (kPools.count(n.op_type) && n.domain.empty()) return convert_pool(n);
    return false;
  }

  // A kernel of the provider runs op `op_type` on these (channels-last) specs. With
  // X's shape known only at run time the kernels answer for the dtype alone (the
  // NCHW Conv is dispatched the same way).
  bool kernel_runs(const Node& n, const std::string& op_type, const std::vector<int>& inputs) {
    if (ops::find_schema(op_type) == nullptr) return false;
    if (!inputs.empty() && !patterns::spec_of(g_, inputs[0])) {
      bool any = false;
      for (const KernelPtr& k : KernelRegistry::instance().kernels(ops::find_schema(op_type)->key))
        any = any || (k->def().runs_on(provider_.kernel_device()) && !k->def().requested_only);
      return any;
    }
    patterns::Candidate c;
    c.node = n;
    c.node.op_type = op_type;
    c.node.domain = "xrt";
    for (int v : inputs) {
      TensorSpec s;
      if (v >= 0) {
        auto spec = patterns::spec_of(g_, v);
        if (spec) {
          s = *spec;
          if (!g_.values[v].constant.defined() && s.shape.size() >= 3)
            s.shape = ops::permuted(s.shape, ops::to_channels_last(s.shape.size()));
        } else {
          s.dtype = g_.values[v].dtype;
        }
      }
      c.inputs.push_back(s);
    }
    return patterns::any_kernel_supports(c, provider_);
  }

  bool convert_conv(const Node& n) {
    if (n.inputs.size() < 2 || n.inputs[0] < 0 || n.inputs[1] < 0) return false;
    const int r = rank_of(n.inputs[1]);
    const DType t = g_.values[n.inputs[0]].dtype;
    if (r < 3 || r > 5 || !g_.values[n.inputs[0]].dtype_known ||
        (t != DType::kFloat32 && t != DType::kFloat16 && t != DType::kBFloat16))
      return false;
    if (!kernel_runs(n, "NhwcConv", n.inputs)) return false;
    Node c = n;
    c.op_type = "NhwcConv";
    c.domain = "xrt";
    c.inputs[0] = cl(n.inputs[0], r);
    if (c.inputs.size() > 3 && c.inputs[3] >= 0) c.inputs[3] = cl(n.inputs[3], r);
    const int y = n.outputs[0];
    c.outputs = {fresh(g_.values[y].name + "_nhwc", y, true)};
    set_produced_cl(y, c.outputs[0], r);
    add_elements(conv_io_, n.inputs[0]);
    add_elements(conv_io_, y);
    conv_step_[y] = static_cast<int>(out_.size());
    conv_node_[y] = n;
    out_.push_back(std::move(c));
    ++converted_;
    ++convs_;
    return true;
  }

  // A Transpose of a channels-last value reads it directly with the composed
  // permutation (none at all when they cancel).
  bool convert_transpose(const Node& n) {
    const int x = n.inputs[0], y = n.outputs[0];
    const Perm p = n.attr_ints("perm", {});
    const int r = rank_of(x);
    if (produced_cl(x) && static_cast<int>(p.size()) == r) {
      const Perm q = compose(ops::from_channels_last(r), p);
      const int c = cl_.at(x);
      if (is_identity(q)) {
        alias_[y] = c;
      } else {
        Node t = n;
        t.inputs = {c};
        t.attrs["perm"] = Attr::of_ints(q);
        out_.push_back(std::move(t));
      }
      transposed_from_[y] = {c, q};
      ++converted_;
      return true;
    }
    // Kept as it is; remembered so that a channels-last reader of y can compose.
    if (static_cast<int>(p.size()) == r && r >= 3) transposed_from_[y] = {plain(x), p};
    return false;
  }

  // A SiLU, FusedElementwise(Sigmoid, Mul) of an NhwcConv's output and nothing else,
  // that output read by no other node: folded into the convolution as oneDNN's swish
  // post-op ("_swish"), one pass over memory fewer (EfficientNet: 49 of them).
  bool fold_swish(const Node& n) {
    if (n.op_type != "FusedElementwise" || n.outputs.size() != 1 || n.inputs.empty()) return false;
    const int x = n.inputs[0];
    auto conv = conv_step_.find(x);
    if (conv == conv_step_.end() || uses_[x] != 1 || patterns::is_output(g_, x)) return false;
    for (int v : n.inputs)
      if (v != x) return false;
    const ops::ElementwiseProgram prog = ops::ElementwiseProgram::from_node(n);
    using K = ops::ElementwiseInstr::Kind;
    if (prog.instrs.size() != 2 || prog.instrs[0].kind != K::kUnary ||
        prog.instrs[0].unary != ops::Unary::kSigmoid || prog.instrs[1].kind == K::kUnary ||
        prog.instrs[1].binary != ops::FusedBin::kMul)
      return false;
    Node& c = out_[conv->second];
    if (c.has("_act") || c.attr_int("_sum", 0) != 0 || c.has("_swish")) return false;
    // Only where the device's channels-last convolution has the post-op (oneDNN's).
    Node probe = conv_node_.at(x);
    probe.attrs["_swish"] = Attr::of_int(1);
    if (!kernel_runs(probe, "NhwcConv", probe.inputs)) return false;
    c.attrs["_swish"] = Attr::of_int(1);
    set_produced_cl(n.outputs[0], cl_.at(x), rank_of(x));
    ++converted_;
    ++swishes_;
    return true;
  }

  bool convert_elementwise(const Node& n) {
    if (n.outputs.size() != 1 || n.outputs[0] < 0) return false;
    if (fold_swish(n)) return true;
    int r = -1;
    bool any_cl = false;
    for (int v : n.inputs)
      if (v >= 0 && produced_cl(v) && !g_.values[v].constant.defined()) {
        any_cl = true;
        r = rank_of(v);
      }
    if (!any_cl || r < 3 || r > 5) return false;
    if (n.op_type == "FusedElementwise" && !fused_operands_stay_suffixes(n, r)) return false;
    // Every input: rank r (its channels-last form), a constant broadcasting to rank r
    // (permuted now), or a single element.
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      const int v = n.inputs[i];
      if (v < 0) continue;
      const Value& val = g_.values[v];
      if (val.constant.defined()) {
        if (val.constant.numel() == 1 || static_cast<int>(val.constant.shape.size()) <= r) continue;
        return false;
      }
      const int vr = rank_of(v);
      if (vr == r) continue;
      if (n.op_type == "Clip" && i > 0) continue;  // min / max: scalars
      return false;
    }
    Node c = n;
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      const int v = n.inputs[i];
      if (v < 0 || (n.op_type == "Clip" && i > 0)) continue;
      const Value& val = g_.values[v];
      if (val.constant.defined() && val.constant.numel() == 1) continue;
      if (val.constant.defined() && static_cast<int>(val.constant.shape.size()) < r) {
        HostTensor t = val.constant;
        Shape s(static_cast<std::size_t>(r) - t.shape.size(), 1);
        s.insert(s.end(), t.shape.begin(), t.shape.end());
        t.shape = s;  // the same bytes at rank r
        c.inputs[i] = const_cl(v, t, r);
        continue;
      }
      c.inputs[i] = cl(v, r);
    }
    const int y = n.outputs[0];
    c.outputs = {fresh(g_.values[y].name + "_nhwc", y, true)};
    set_produced_cl(y, c.outputs[0], r);
    bool ones = true;
    for (int v : n.inputs)
      if (v >= 0 && !g_.values[v].constant.defined() && rank_of(v) == r) ones = ones && spatial_ones(v);
    if (ones) ones_.insert(y);
    out_.push_back(std::move(c));
    ++converted_;
    return true;
  }

  // FusedElementwise reads each operand as the full tensor, a scalar or a suffix row
  // of the output (the fusion checked that in NCHW): each must stay one in
  // channels-last order ([W] broadcast along the last axis does not). Needs shapes.
  bool fused_operands_stay_suffixes(const Node& n, int r) const {
    const Value& y = g_.values[n.outputs[0]];
    if (!y.shape) return false;
    const Shape out = ops::permuted(*y.shape, ops::to_channels_last(static_cast<std::size_t>(r)));
    for (int v : n.inputs) {
      if (v < 0) continue;
      const Value& val = g_.values[v];
      const std::optional<Shape> s = val.constant.defined() ? std::optional<Shape>(val.constant.shape) : val.shape;
      if (!s || s->size() > static_cast<std::size_t>(r)) return false;
      if (shape_numel(*s) == 1) continue;
      Shape at_rank(static_cast<std::size_t>(r) - s->size(), 1);
      at_rank.insert(at_rank.end(), s->begin(), s->end());
      const Shape p = ops::permuted(at_rank, ops::to_channels_last(static_cast<std::size_t>(r)));
      std::size_t lead = 0;
      while (lead < p.size() && p[lead] == 1) ++lead;
      if (!std::equal(p.begin() + static_cast<std::ptrdiff_t>(lead), p.end(),
                      out.end() - static_cast<std::ptrdiff_t>(p.size() - lead)))
        return false;
    }
    return true;
  }

  // A lower-rank constant broadcast to rank r, then permuted.
  int const_cl(int v, const HostTensor& at_rank, int r) {
    const int c = g_.value_id(fresh_name(g_, g_.values[v].name + "_nhwc"));
    Value& cv = g_.values[c];
    cv.constant = transposed_constant(at_rank, ops::to_channels_last(r));
    cv.dtype = cv.constant.dtype;
    cv.dtype_known = true;
    cv.shape = cv.constant.shape;
    return c;
  }

  // Concat / Split on any axis: the axis moves to its channels-last position.
  bool convert_axis_op(const Node& n);

  // Slice with constant starts/ends/axes/steps: the axes move to their channels-last
  // positions.
  bool convert_slice(const Node& n);

  // ShuffleNet's channel shuffle, Reshape [N, C, H, W] -> [N, g, C/g, H, W], Transpose
  // (0, 2, 1, 3, 4), Reshape back to [N, C, H, W], on a channels-last value: the same
  // permutation of the channels as Reshape [N, H, W, g, C/g], Transpose (0, 1, 2, 4, 3),
  // Reshape [N, H, W, C], so the activations stay channels-last.
  bool convert_channel_shuffle(const Node& n);
  // GroupNorm with one group as exported: Reshape [N, C, H, W] -> [N, 1, C*H*W],
  // InstanceNormalization with one scale and bias, Reshape back (PoolFormer's norms;
  // the per-channel affine follows as a Mul and an Add). Its statistics span the whole
  // sample and its scale and bias are scalars, so on a channels-last value the same
  // three nodes (Reshape [N, 1, H*W*C], back to [N, H, W, C]) compute the same tensor.
  bool convert_whole_norm(const Node& n);
  // Reduce* over constant axes: the axes move to their channels-last positions. With
  // keepdims the result stays channels-last; without, it is in the model's layout
  // already where the channels are reduced or no spatial axis remains (a global
  // pooling written as ReduceMean over [2, 3]), and the node stays NCHW otherwise.
  bool convert_reduce(const Node& n);
  // The only node reading v (once), not a graph output; nullptr otherwise.
  const Node* sole_reader(int v) const;

  // Inference BatchNormalization with constant parameters: y = x * a + b per channel,
  // a = scale / sqrt(var + eps), b = bias - mean * a, as a Mul and an Add over [C].
  bool convert_batchnorm(const Node& n);

  // Shape of a channels-last value: its dims gathered back into the model's order.
  bool convert_shape(const Node& n);

  // Pooling on a channels-last value, where an Nhwc* pooling kernel runs it.
  bool convert_pool(const Node& n);

  Graph& g_;
  const ExecutionProvider& provider_;
  std::vector<Node> out_;
  std::unordered_map<int, int> cl_;     // logical value -> its channels-last value
  std::set<int> native_;                // produced channels-last (by a converted node)
  std::set<int> pending_;               // ... whose NCHW form is not made yet
  std::unordered_map<int, int> alias_;  // a Transpose that cancelled: value -> its source
  std::unordered_map<int, std::pair<int, Perm>> transposed_from_;  // y = transpose(b, q)
  std::unordered_map<int, int> rank_;
  std::set<int> ones_;
  void add_elements(int64_t& sum, int v) const {
    const Value& val = g_.values[v];
    if (sum < 0) return;
    sum = val.shape ? sum + shape_numel(*val.shape) : -1;
  }

  std::unordered_map<int, int> uses_;       // value -> original nodes reading it
  std::unordered_map<int, std::vector<int>> readers_;  // value -> indices of those nodes
  std::set<int> absorbed_;  // original nodes an earlier conversion rewrote with it
  std::unordered_map<int, int> conv_step_;  // NhwcConv's logical output -> its index in out_
  std::unordered_map<int, Node> conv_node_;  // ... -> the Conv it was made from (NCHW inputs)
  int converted_ = 0, convs_ = 0, transposes_ = 0, swishes_ = 0;
  int64_t moved_ = 0, conv_io_ = 0;
};

}  // namespace xpuruntime::graph::passes::channels_last
