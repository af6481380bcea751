// Shape products for checked.h: one place that turns dims into counts and bytes.
#include "xpuruntime/checked.h"

#include <sstream>

namespace xpuruntime {
namespace {

std::string dims_str(std::span<const int64_t> shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i == 8 && shape.size() > 10) {  // a message shows a shape, not a hostile list
      os << ", ... (" << shape.size() << " dims)";
      break;
    }
    os << (i ? ", " : "") << shape[i];
  }
  os << ']';
  return os.str();
}

}  // namespace

int64_t checked_numel(std::span<const int64_t> shape, std::string_view what) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    XRT_CHECK(d >= 0, InvalidArgumentError, what, ": negative dimension in shape ",
              dims_str(shape));
    // Keep checking the signs after an overflow; a zero dim still makes it empty.
    if (!overflow) {
      std::optional<int64_t> next = try_mul(n, d);
      if (next)
        n = *next;
      else
        overflow = true;
    }
  }
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  XRT_CHECK(!overflow, InvalidArgumentError, what, ": shape ", dims_str(shape),
            " has more elements than a 64-bit count holds; check the shape");
  return n;
}

std::size_t checked_nbytes(std::span<const int64_t> shape, std::size_t element_size,
                           std::string_view what) {
  auto n = static_cast<std::size_t>(checked_numel(shape, what));
  std::optional<std::size_t> bytes = try_mul(n, element_size);
  XRT_CHECK(bytes && *bytes <= kMaxAllocationBytes, InvalidArgumentError, what, ": shape ",
            dims_str(shape), " of ", element_size, "-byte elements needs more than ",
            kMaxAllocationBytes, " bytes; check the shape");
  return *bytes;
}

}  // namespace xpuruntime
