// Schemas of the broadcasting binary ops (arithmetic, comparisons, logic), the
// variadic Min/Max/Sum/Mean, and Where.
#include "ops/families.h"
#include "xpuruntime/error.h"

namespace xpuruntime::ops {
namespace {

// Pow may raise to an exponent of another dtype; comparisons give bool.
InferFn binary_infer(bool same_dtypes, bool to_bool) {
  return [same_dtypes, to_bool](const Node& n, const std::vector<Meta>& in,
                                std::vector<Meta>& out) {
    require_inputs(n, in, 2);
    if (same_dtypes) {
      XRT_CHECK(in[0].dtype == in[1].dtype, InvalidModelError, n.where(), ": input dtypes differ (",
                dtype_name(in[0].dtype), " vs ", dtype_name(in[1].dtype), ")");
    }
    out[0].present = true;
    out[0].dtype = to_bool ? DType::kBool : in[0].dtype;
    if (!all_known(in)) return false;
    out[0].shape = broadcast_shapes(n, {*in[0].shape, *in[1].shape});
    return true;
  };
}

bool variadic_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, std::max<std::size_t>(1, in.size()));  // variadic: none omitted
  out[0] = out_meta(in[0].dtype, {});
  out[0].shape.reset();
  if (!all_known(in)) return false;
  std::vector<Shape> shapes;
  for (const Meta& m : in) {
    XRT_CHECK(m.dtype == in[0].dtype, InvalidModelError, n.where(), ": input dtypes differ");
    shapes.push_back(*m.shape);
  }
  out[0].shape = broadcast_shapes(n, shapes);
  return true;
}

bool where_infer(const Node& n, const std::vector<Meta>& in, std::vector<Meta>& out) {
  require_inputs(n, in, 3);
  XRT_CHECK(in[0].dtype == DType::kBool, InvalidModelError, n.where(),
            ": condition must be bool, got ", dtype_name(in[0].dtype));
  XRT_CHECK(in[1].dtype == in[2].dtype, InvalidModelError, n.where(), ": X and Y dtypes differ");
  out[0].present = true;
  out[0].dtype = in[1].dtype;
  if (!all_known(in)) return false;
  out[0].shape = broadcast_shapes(n, {*in[0].shape, *in[1].shape, *in[2].shape});
  return true;
}

}  // namespace

void register_elementwise_schemas(std::vector<OpSchema>& s) {
  std::vector<DType> with_bool = kNumericTypes;
  with_bool.push_back(DType::kBool);
  const std::vector<DType> bools = {DType::kBool};
  auto binary = [&](const std::string& type, const std::vector<DType>& dtypes, bool to_bool) {
    s.push_back(make_schema(type, dtypes, type + " with numpy broadcasting",
                            binary_infer(type != "Pow", to_bool)));
  };
  for (const char* t : {"Add", "Sub", "Mul", "Div", "Pow", "Mod"}) binary(t, kNumericTypes, false);
  binary("Equal", with_bool, true);
  for (const char* t : {"Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
    binary(t, kNumericTypes, true);
  for (const char* t : {"And", "Or", "Xor"}) binary(t, bools, true);
  for (const char* t : {"Min", "Max", "Sum", "Mean"})
    s.push_back(make_schema(t, kNumericTypes, std::string(t) + " over 1..N broadcast inputs",
                            variadic_infer));
  s.push_back(
      make_schema("Where", bools, "Where(cond, X, Y) with numpy broadcasting", where_infer));
}

}  // namespace xpuruntime::ops
