// Einsum lowering (passes.h): a two-operand Einsum becomes Transposes and Reshapes
// around one (batched) MatMul, so it runs on the GEMM kernels of every device (CUDA
// has no Einsum kernel; the CPU's is a generic loop, several times slower than its
// GEMMs on the batched equations attention-style models use).
//
// Every label of the equation is one of
//   batch     in both inputs and the output  -> the MatMul's batch dimension
//   contract  in both inputs, not the output -> K
//   free A    in input A and the output      -> M
//   free B    in input B and the output      -> N
// A is permuted to [batch, free A, contract] and B to [batch, contract, free B], each
// flattened to 3-D (2-D without batch labels); the product [batch, M, N] is
// unflattened and permuted to the output's label order. Identity permutations and
// reshapes are left out. A batch label of extent 1 in one operand (a bias or mask shared
// across heads or groups) keeps the batch dimensions unflattened, [batch.., M, K] and
// [batch.., K, N], and the MatMul broadcasts them. Left as they are (the Einsum kernel
// runs them): one or more than two operands, a label repeated within an operand (a
// diagonal), a label summed out of one operand alone, operands whose shapes are not
// known at compile time, and other labels whose extents differ between the operands.
#include <algorithm>
#include <numeric>
#include <set>

#include "graph/passes.h"
#include "xpuruntime/error.h"
#include "xpuruntime/ops/einsum.h"

namespace xpuruntime::graph::passes {
namespace {

using Labels = std::vector<int>;

bool contains(const Labels& l, int x) { return std::find(l.begin(), l.end(), x) != l.end(); }

bool unique_labels(const Labels& l) {
  std::set<int> s(l.begin(), l.end());
  return s.size() == l.size();
}

int64_t product(const std::vector<int64_t>& ext, const Labels& l) {
  int64_t p = 1;
  for (int x : l) p *= ext[static_cast<std::size_t>(x)];
  return p;
}

// Where each of `order`'s labels sits in `have`: the Transpose permutation that
// turns a tensor labelled `have` into one labelled `order`.
std::vector<int64_t> perm_of(const Labels& have, const Labels& order) {
  std::vector<int64_t> p;
  for (int x : order) p.push_back(std::find(have.begin(), have.end(), x) - have.begin());
  return p;
}

bool is_identity(const std::vector<int64_t>& p) {
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

class Lowering {
 public:
  Lowering(Graph& g, const Node& e) : g_(g), base_(e.name.empty() ? "einsum" : e.name) {}

  int value(DType t, const Shape& s) {
    const int v = g_.value_id(fresh_name(g_, base_ + "_lowered"));
    g_.values[v].dtype = t;
    g_.values[v].dtype_known = true;
    g_.values[v].shape = s;
    return v;
  }
  int shape_constant(const Shape& s) {
    const int v = g_.value_id(fresh_name(g_, base_ + "_shape"));
    HostTensor t = HostTensor::alloc(DType::kInt64, {static_cast<int64_t>(s.size())});
    std::copy(s.begin(), s.end(), t.ptr<int64_t>());
    Value& val = g_.values[v];
    val.constant = t;
    val.dtype = DType::kInt64;
    val.dtype_known = true;
    val.shape = t.shape;
    return v;
  }
  // x (shape s) transposed by perm; x itself for the identity. Writes `out` when
  // given (the last node of the lowering writes the Einsum's output value).
  int transpose(int x, const Shape& s, const std::vector<int64_t>& perm, int out = -1) {
    if (is_identity(perm) && out < 0) return x;
    Shape t(perm.size());
    for (std::size_t i = 0; i < perm.size(); ++i) t[i] = s[static_cast<std::size_t>(perm[i])];
    const int y = out >= 0 ? out : value(g_.values[x].dtype, t);
    Node n;
    n.name = fresh_node(is_identity(perm) ? "_identity" : "_transpose");
    n.op_type = is_identity(perm) ? "Identity" : "Transpose";
    n.inputs = {x};
    n.outputs = {y};
    if (!is_identity(perm)) n.attrs["perm"] = Attr::of_ints(perm);
    added_.push_back(std::move(n));
    return y;
  }
  int reshape(int x, const Shape& from, const Shape& to, int out = -1) {
    if (from == to && out < 0) return x;
    const int y = out >= 0 ? out : value(g_.values[x].dtype, to);
    Node n;
    n.name = fresh_node("_reshape");
    n.op_type = "Reshape";
    n.inputs = {x, shape_constant(to)};
    n.outputs = {y};
    added_.push_back(std::move(n));
    return y;
  }
  int matmul(int a, int b, DType t, const Shape& shape, int out = -1) {
    const int y = out >= 0 ? out : value(t, shape);
    Node n;
    n.name = fresh_node("_matmul");
    n.op_type = "MatMul";
    n.inputs = {a, b};
    n.outputs = {y};
    added_.push_back(std::move(n));
    return y;
  }
  void commit() {
    for (Node& n : added_) g_.add_node(std::move(n));
  }

 private:
  std::string fresh_node(const std::string& suffix) {
    return base_ + suffix + "_" + std::to_string(counter_++);
  }
  Graph& g_;
  std::string base_;
  std::vector<Node> added_;
  int counter_ = 0;
};

// Lowers node k when its equation and shapes allow; true when it did.
bool lower_one(Graph& g, int k) {
  const Node e = g.nodes[k];  // a copy: adding nodes may move the vector
  if (e.inputs.size() != 2 || e.outputs.size() != 1 || e.inputs[0] < 0 || e.inputs[1] < 0)
    return false;
  const Value& va = g.values[e.inputs[0]];
  const Value& vb = g.values[e.inputs[1]];
  const Value& vo = g.values[e.outputs[0]];
  const DType t = vo.dtype;
  const bool float_type = t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 ||
                          t == DType::kFloat64;
  if (!float_type || va.dtype != t || vb.dtype != t) return false;
  const Shape* sa = va.constant.defined() ? &va.constant.shape : (va.shape ? &*va.shape : nullptr);
  const Shape* sb = vb.constant.defined() ? &vb.constant.shape : (vb.shape ? &*vb.shape : nullptr);
  if (sa == nullptr || sb == nullptr || !vo.shape) return false;
  // Copies: the lowering adds values, which may move the ones these point into.
  const Shape shape_a = *sa, shape_b = *sb;
  sa = &shape_a;
  sb = &shape_b;
  ops::EinsumLayout l;
  try {
    l = ops::einsum_layout(e, ops::EinsumAttrs::from_node(e), {*sa, *sb});
  } catch (const XpuRuntimeError&) {
    return false;  // the kernel reports the model's mistake with its own message
  }
  const Labels &A = l.inputs[0], &B = l.inputs[1], &O = l.output;
  if (!unique_labels(A) || !unique_labels(B) || !unique_labels(O)) return false;
  Labels batch, contract, free_a, free_b;
  for (int x : O) {
    const bool in_a = contains(A, x), in_b = contains(B, x);
    if (in_a && in_b) batch.push_back(x);
    else if (in_a) free_a.push_back(x);
    else if (in_b) free_b.push_back(x);
    else return false;
  }
  for (int x : A) {
    if (contains(O, x)) continue;
    if (!contains(B, x)) return false;  // summed out of A alone
    contract.push_back(x);
  }
  for (int x : B)
    if (!contains(O, x) && !contains(A, x)) return false;
  // Extents must agree between the operands, except a batch label of extent 1 in one
  // of them: the MatMul broadcasts it, so those keep their batch dimensions unflattened.
  bool broadcast = false;
  for (std::size_t i = 0; i < A.size(); ++i)
    for (std::size_t j = 0; j < B.size(); ++j)
      if (A[i] == B[j] && (*sa)[i] != (*sb)[j]) {
        if (!contains(batch, A[i]) || ((*sa)[i] != 1 && (*sb)[j] != 1)) return false;
        broadcast = true;
      }
  const std::vector<int64_t>& ext = l.extent;
  const int64_t nb = product(ext, batch), m = product(ext, free_a), kk = product(ext, contract),
                nn = product(ext, free_b);
  const bool batched = !batch.empty();
  auto labelled = [&](const Labels& order) {
    Shape s;
    for (int x : order) s.push_back(ext[static_cast<std::size_t>(x)]);
    return s;
  };
  // The extents of `order`'s labels in one operand (labels `have`, shape `shape`).
  auto labelled_in = [&](const Labels& have, const Shape& shape, const Labels& order) {
    Shape s;
    for (int x : order)
      s.push_back(
          shape[static_cast<std::size_t>(std::find(have.begin(), have.end(), x) - have.begin())]);
    return s;
  };
  // [batch extents as `shape` has them..., rows, cols]: flattened to 3-D, or with the
  // batch dimensions kept where a label broadcasts.
  auto operand_shape = [&](const Labels& have, const Shape& shape, int64_t rows, int64_t cols) {
    Shape s = broadcast ? labelled_in(have, shape, batch) : Shape{};
    if (!broadcast && batched) s.push_back(nb);
    s.push_back(rows);
    s.push_back(cols);
    return s;
  };
  Lowering low(g, e);
  Labels a_order = batch, b_order = batch;
  a_order.insert(a_order.end(), free_a.begin(), free_a.end());
  a_order.insert(a_order.end(), contract.begin(), contract.end());
  b_order.insert(b_order.end(), contract.begin(), contract.end());
  b_order.insert(b_order.end(), free_b.begin(), free_b.end());
  int a = low.transpose(e.inputs[0], *sa, perm_of(A, a_order));
  int b = low.transpose(e.inputs[1], *sb, perm_of(B, b_order));
  const Shape a3 = operand_shape(A, *sa, m, kk);
  const Shape b3 = operand_shape(B, *sb, kk, nn);
  a = low.reshape(a, labelled_in(A, *sa, a_order), a3);
  b = low.reshape(b, labelled_in(B, *sb, b_order), b3);
  Shape c3 = broadcast ? labelled(batch) : Shape{};
  if (!broadcast && batched) c3.push_back(nb);
  c3.push_back(m);
  c3.push_back(nn);
  Labels c_order = batch;
  c_order.insert(c_order.end(), free_a.begin(), free_a.end());
  c_order.insert(c_order.end(), free_b.begin(), free_b.end());
  // The last node writes the Einsum's own output value (readers keep it): the Transpose
  // to the output's order, else the Reshape out of the product, else the MatMul itself
  // (no Identity copy of the result).
  const int y = e.outputs[0];
  g.nodes[k].op_type.clear();
  g.values[y].producer = -1;
  const std::vector<int64_t> out_perm = perm_of(c_order, O);
  const Shape unflat = labelled(c_order);
  if (!is_identity(out_perm)) {
    int c = low.matmul(a, b, t, c3);
    c = low.reshape(c, c3, unflat);
    low.transpose(c, unflat, out_perm, y);
  } else if (c3 != unflat) {
    low.reshape(low.matmul(a, b, t, c3), c3, unflat, y);
  } else {
    low.matmul(a, b, t, c3, y);
  }
  low.commit();
  return true;
}

}  // namespace

int lower_einsum(Graph& g) {
  int lowered = 0;
  const std::size_t n = g.nodes.size();
  for (std::size_t k = 0; k < n; ++k)
    if (g.nodes[k].op_type == "Einsum" && g.nodes[k].domain.empty() &&
        lower_one(g, static_cast<int>(k)))
      ++lowered;
  if (lowered) compact(g);
  return lowered;
}

}  // namespace xpuruntime::graph::passes
