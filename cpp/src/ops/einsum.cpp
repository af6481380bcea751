// Schema of Einsum (torchvision's MaxViT attention and other einsum-written
// models export it): the equation is parsed once, checked against the operands'
// ranks and extents, and gives the output shape.
#include "xpuruntime/ops/einsum.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "ops/families.h"
#include "xpuruntime/error.h"

namespace xpuruntime::ops {
namespace {

constexpr int kEllipsisBase = 256;

// One term of the equation without spaces; "..." becomes '.'.
std::string parse_term(const Node &n, const std::string &eq,
                       const std::string &raw) {
  std::string term;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (c == ' ')
      continue;
    if (c == '.') {
      XRT_CHECK(raw.compare(i, 3, "...") == 0 &&
                    term.find('.') == std::string::npos,
                InvalidModelError, n.where(), ": equation '", eq,
                "' has a '.' that is not one ellipsis '...' per term");
      term += '.';
      i += 2;
      continue;
    }
    XRT_CHECK(std::isalpha(static_cast<unsigned char>(c)), InvalidModelError,
              n.where(), ": equation '", eq, "' has the character '", c,
              "'; labels are letters a-z, A-Z (and '...')");
    term += c;
  }
  return term;
}

bool einsum_infer(const Node &n, const std::vector<Meta> &in,
                  std::vector<Meta> &out) {
  require_inputs(n, in, 1);
  const EinsumAttrs a = EinsumAttrs::from_node(n);
  XRT_CHECK(a.inputs.size() == in.size(), InvalidModelError, n.where(),
            ": equation has ", a.inputs.size(),
            " input terms but the node has ", in.size(), " inputs");
  for (const Meta &m : in)
    XRT_CHECK(m.dtype == in[0].dtype, InvalidModelError, n.where(),
              ": inputs are ", dtype_name(in[0].dtype), " and ",
              dtype_name(m.dtype), "; Einsum needs one dtype");
  out[0].present = true;
  out[0].dtype = in[0].dtype;
  if (!all_known(in))
    return false;
  std::vector<Shape> shapes;
  for (const Meta &m : in)
    shapes.push_back(*m.shape);
  out[0].shape = einsum_layout(n, a, shapes).output_shape();
  return true;
}

} // namespace

EinsumAttrs EinsumAttrs::from_node(const Node &n) {
  const std::string eq = n.attr_str("equation", "");
  XRT_CHECK(!eq.empty(), InvalidModelError, n.where(),
            ": the 'equation' attribute is missing");
  EinsumAttrs a;
  const std::size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  for (std::size_t b = 0;;) {
    const std::size_t e = lhs.find(',', b);
    a.inputs.push_back(
        parse_term(n, eq, lhs.substr(b, e == std::string::npos ? e : e - b)));
    if (e == std::string::npos)
      break;
    b = e + 1;
  }
  if (arrow != std::string::npos) {
    a.output = parse_term(n, eq, eq.substr(arrow + 2));
    for (std::size_t i = 0; i < a.output.size(); ++i) {
      XRT_CHECK(a.output.find(a.output[i], i + 1) == std::string::npos,
                InvalidModelError, n.where(), ": equation '", eq,
                "' repeats the output label '", a.output[i], "'");
      const bool used = std::any_of(
          a.inputs.begin(), a.inputs.end(), [&](const std::string &t) {
            return t.find(a.output[i]) != std::string::npos;
          });
      XRT_CHECK(used, InvalidModelError, n.where(), ": equation '", eq,
                "' has the output label '", a.output[i], "' that no input has");
    }
    return a;
  }
  // Implicit output: the ellipsis, then the labels seen once, in alphabetical
  // (ASCII) order.
  std::map<char, int> count;
  bool ellipsis = false;
  for (const std::string &t : a.inputs)
    for (char c : t) {
      if (c == '.')
        ellipsis = true;
      else
        ++count[c];
    }
  if (ellipsis)
    a.output += '.';
  for (const auto &[c, k] : count)
    if (k == 1)
      a.output += c;
  return a;
}

Shape EinsumLayout::output_shape() const {
  Shape s;
  for (int l : output)
    s.push_back(extent[static_cast<std::size_t>(l)]);
  return s;
}

EinsumLayout einsum_layout(const Node &n, const EinsumAttrs &a,
                           const std::vector<Shape> &shapes) {
  // Each term's ellipsis covers the dims its letters leave; the widest sets the
  // count.
  std::vector<int64_t> ell(shapes.size(), 0);
  int64_t widest = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::string &t = a.inputs[i];
    const bool has = t.find('.') != std::string::npos;
    const auto letters = static_cast<int64_t>(t.size()) - (has ? 1 : 0);
    const auto rank = static_cast<int64_t>(shapes[i].size());
    XRT_CHECK(has ? rank >= letters : rank == letters, InvalidModelError,
              n.where(), ": input ", i, " has rank ", rank,
              " but its equation term '", t, "' has ", letters, " labels",
              has ? " and an ellipsis" : "");
    ell[i] = has ? rank - letters : 0;
    widest = std::max(widest, ell[i]);
  }
  EinsumLayout lay;
  lay.extent.assign(static_cast<std::size_t>(kEllipsisBase + widest), -1);
  auto bind = [&](int label, int64_t dim, std::size_t input) {
    int64_t &e = lay.extent[static_cast<std::size_t>(label)];
    XRT_CHECK(e < 0 || e == dim || e == 1 || dim == 1, InvalidModelError,
              n.where(), ": input ", input, " gives ",
              label >= kEllipsisBase
                  ? std::string("an ellipsis dimension")
                  : "label '" + std::string(1, static_cast<char>(label)) + "'",
              " extent ", dim, " where another operand gives ", e,
              " (they must match or be 1)");
    if (e < 0 || e == 1)
      e = dim;
  };
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    std::vector<int> labels;
    int64_t d = 0;
    for (char c : a.inputs[i]) {
      if (c == '.') {
        for (int64_t k = 0; k < ell[i]; ++k, ++d) {
          const int label =
              kEllipsisBase + static_cast<int>(widest - ell[i] + k);
          labels.push_back(label);
          bind(label, shapes[i][static_cast<std::size_t>(d)], i);
        }
        continue;
      }
      labels.push_back(static_cast<unsigned char>(c));
      bind(static_cast<unsigned char>(c),
           shapes[i][static_cast<std::size_t>(d++)], i);
    }
    lay.inputs.push_back(std::move(labels));
  }
  for (char c : a.output) {
    if (c != '.') {
      lay.output.push_back(static_cast<unsigned char>(c));
      continue;
    }
    for (int64_t k = 0; k < widest; ++k)
      lay.output.push_back(kEllipsisBase + static_cast<int>(k));
  }
  return lay;
}

void register_einsum_schemas(std::vector<OpSchema> &s) {
  s.push_back(make_schema(
      "Einsum", kFloatTypes,
      "Einsum (any number of operands; explicit or implicit output, "
      "ellipsis, repeated labels: diagonals; size-1 extents broadcast)",
      einsum_infer));
}

} // namespace xpuruntime::ops
