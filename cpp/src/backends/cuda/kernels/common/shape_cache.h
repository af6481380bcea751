// A plan computed once for the shapes prepare() saw, recomputed (without caching)
// for a run whose shapes differ (a dynamic-shape plan step). Immutable after
// construction, so safe to share between concurrent runs.
#pragma once

#include <exception>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "xpuruntime/ir.h"

namespace xpuruntime::cuda_ops {

template <typename Plan>
class ShapeCached {
 public:
  using Make = std::function<Plan(const std::vector<graph::Shape>&)>;
  // A plan that cannot be made for the prepared shapes (they may be placeholders of
  // a dynamic plan) is made, and its error raised, at run time instead.
  ShapeCached(std::vector<graph::Shape> shapes, Make make)
      : shapes_(std::move(shapes)), make_(std::move(make)) {
    try {
      plan_ = make_(shapes_);
    } catch (const std::exception&) {
      plan_.reset();
    }
  }
  Plan get(const std::vector<graph::Shape>& shapes) const {
    return plan_ && shapes == shapes_ ? *plan_ : make_(shapes);
  }

 private:
  std::vector<graph::Shape> shapes_;
  Make make_;
  std::optional<Plan> plan_;
};

}  // namespace xpuruntime::cuda_ops
