#include "xpuruntime/tensor.h"

#include <cstring>
#include <numeric>
#include <optional>
#include <sstream>

#include "core/host_copy.h"
#include "xpuruntime/backend.h"
#include "xpuruntime/checked.h"
#include "xpuruntime/error.h"
#include "xpuruntime/memory.h"
#include "xpuruntime/plugin.h"

namespace xpuruntime {

void host_strided_copy(char* dst, std::span<const int64_t> dst_strides, const char* src,
                       std::span<const int64_t> src_strides, std::span<const int64_t> shape,
                       std::size_t esize) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  if (total == 0) return;
  if (nd == 0) {
    std::memcpy(dst, src, esize);
    return;
  }
  const int64_t inner = shape[nd - 1];
  const bool inner_contig = dst_strides[nd - 1] == 1 && src_strides[nd - 1] == 1;
  std::vector<int64_t> idx(nd, 0);
  for (int64_t done = 0; done < total; done += inner) {
    int64_t doff = 0, soff = 0;
    for (int64_t d = 0; d < nd - 1; ++d) {
      doff += idx[d] * dst_strides[d];
      soff += idx[d] * src_strides[d];
    }
    if (inner_contig) {
      std::memcpy(dst + doff * esize, src + soff * esize, inner * esize);
    } else {
      for (int64_t i = 0; i < inner; ++i)
        std::memcpy(dst + (doff + i * dst_strides[nd - 1]) * esize,
                    src + (soff + i * src_strides[nd - 1]) * esize, esize);
    }
    for (int64_t d = nd - 2; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

Shape Tensor::contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    if (i > 0) s = checked_mul<InvalidArgumentError>(s, std::max<int64_t>(shape[i], 1), "stride");
  }
  return strides;
}

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
               DType dtype)
    : storage_(std::move(storage)), shape_(std::move(shape)), strides_(std::move(strides)),
      offset_(offset), dtype_(dtype) {
  XRT_CHECK(storage_ != nullptr, InvalidArgumentError, "Tensor needs a storage");
  XRT_CHECK(shape_.size() == strides_.size(), InvalidArgumentError, "shape ", shape_str(shape_),
            " and strides ", shape_str(strides_), " differ in rank");
  XRT_CHECK(offset_ >= 0, InvalidArgumentError, "negative tensor offset ", offset_);
  // The element count must be representable (numel() and nbytes() rely on it), and
  // the view's extent is computed with checked arithmetic: shapes and strides come
  // from DLPack producers and plan files, and a wrapped extent would pass the bounds
  // check below and address memory outside the storage.
  const bool empty = checked_numel(shape_, "Tensor") == 0;
  auto fail = [&] {
    XRT_THROW(InvalidArgumentError, "view shape=", shape_str(shape_), " strides=",
              shape_str(strides_), " offset=", offset_, " does not fit in a storage of ",
              storage_->nbytes(), " bytes");
  };
  if (!empty) {
    int64_t lo = 0, hi = 0;  // element extent relative to offset
    for (std::size_t i = 0; i < shape_.size(); ++i) {
      std::optional<int64_t> span = try_mul(shape_[i] - 1, strides_[i]);
      if (!span) fail();
      std::optional<int64_t> sum = try_add(*span < 0 ? lo : hi, *span);
      if (!sum) fail();
      (*span < 0 ? lo : hi) = *sum;
    }
    const auto esize = static_cast<int64_t>(dtype_size(dtype_));
    std::optional<int64_t> first = try_add(offset_, lo);
    std::optional<int64_t> end = try_add(offset_, hi);
    if (end) end = try_add(*end, int64_t{1});
    if (end) end = try_mul(*end, esize);
    if (!first || *first < 0 || !end || static_cast<std::size_t>(*end) > storage_->nbytes()) {
      fail();
    }
  }
}

Tensor Tensor::empty(const Shape& shape, DType dtype, const Device& device, NativeStream stream) {
  std::size_t bytes = checked_nbytes(shape, dtype_size(dtype), "Tensor.empty");
  CachingAllocator& alloc = MemoryManager::instance().allocator(device);
  void* p = alloc.allocate(bytes, stream);
  auto storage = std::make_shared<Storage>(p, bytes, device, [&alloc](void* q) { alloc.free(q); });
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, const Device& device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu()) {
    std::memset(t.data_ptr(), 0, t.nbytes());
  } else {
    std::vector<char> host(t.nbytes(), 0);
    DeviceManager::instance().backend(device.kind).copy(t.data_ptr(), device, host.data(),
                                                         Device::cpu(), host.size(), nullptr);
    DeviceManager::instance().backend(device.kind).synchronize_device(device.index);
  }
  return t;
}

int64_t Tensor::size(int64_t d) const {
  int64_t nd = dim();
  if (d < 0) d += nd;
  XRT_CHECK(d >= 0 && d < nd, InvalidArgumentError, "dimension ", d, " out of range for rank ", nd);
  return shape_[d];
}

int64_t Tensor::numel() const {
  // The constructor checked that this product fits; the accumulate cannot wrap.
  return std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<>());
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

void* Tensor::data_ptr() const {
  XRT_CHECK(storage_ != nullptr, InvalidArgumentError, "data_ptr of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(element_size());
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

Tensor Tensor::reshape(const Shape& shape) const {
  int64_t n = checked_numel(shape, "Tensor.reshape");
  XRT_CHECK(n == numel(), InvalidArgumentError, "cannot reshape ", shape_str(shape_), " (", numel(),
            " elements) to ", shape_str(shape));
  Tensor src = is_contiguous() ? *this : contiguous();
  return Tensor(src.storage_, shape, contiguous_strides(shape), src.offset_, dtype_);
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  int64_t nd = dim();
  if (a < 0) a += nd;
  if (b < 0) b += nd;
  XRT_CHECK(a >= 0 && a < nd && b >= 0 && b < nd, InvalidArgumentError, "transpose(", a, ", ", b,
            ") out of range for rank ", nd);
  Shape s = shape_, st = strides_;
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  return Tensor(storage_, s, st, offset_, dtype_);
}

Tensor Tensor::contiguous(NativeStream stream) const {
  if (is_contiguous()) return *this;
  Tensor out = empty(shape_, dtype_, device(), stream);
  out.copy_from(*this, stream);
  return out;
}

Tensor Tensor::to(const Device& device, NativeStream stream, bool copy) const {
  if (device == this->device() && !copy) return *this;
  Tensor out = empty(shape_, dtype_, device, stream);
  out.copy_from(*this, stream);
  return out;
}

void Tensor::copy_from(const Tensor& src, NativeStream stream) {
  XRT_CHECK(src.shape_ == shape_, InvalidArgumentError, "copy_from: shape ", shape_str(src.shape_),
            " does not match ", shape_str(shape_));
  XRT_CHECK(src.dtype_ == dtype_, InvalidArgumentError, "copy_from: dtype ", dtype_name(src.dtype_),
            " does not match ", dtype_name(dtype_));
  if (numel() == 0) return;
  const Device sd = src.device(), dd = device();
  if (sd.is_cpu() && dd.is_cpu()) {
    host_strided_copy(static_cast<char*>(data_ptr()), strides_, static_cast<const char*>(src.data_ptr()),
                      src.strides_, shape_, element_size());
    return;
  }
  if (!sd.is_cpu() && !dd.is_cpu() && sd.kind != dd.kind) {  // two device kinds: through the host
    copy_from(src.to(Device::cpu(), stream), stream);
    return;
  }
  // The backend of the device side (both sides' when they are one kind).
  DeviceBackend& be = DeviceManager::instance().backend(dd.is_cpu() ? sd.kind : dd.kind);
  const int index = dd.is_cpu() ? sd.index : dd.index;
  if (src.is_contiguous() && is_contiguous()) {
    be.copy(data_ptr(), dd, src.data_ptr(), sd, nbytes(), stream);
    // The host reads the result as soon as we return.
    if (dd.is_cpu()) be.streams().synchronize_stream(sd.index, stream);
    return;
  }
  if (sd == dd) {  // same device, some side strided: the backend's strided copy
    be.copy_strided(dd.index, data_ptr(), strides_, src.data_ptr(), src.strides_, shape_, element_size(),
                    stream);
    return;
  }
  // Across devices with strides: make the source contiguous where it lives, then
  // copy the bytes, then scatter on the destination side.
  Tensor csrc = src.contiguous(stream);
  if (is_contiguous()) {
    be.copy(data_ptr(), dd, csrc.data_ptr(), sd, nbytes(), stream);
  } else {
    Tensor staging = empty(shape_, dtype_, dd, stream);
    be.copy(staging.data_ptr(), dd, csrc.data_ptr(), sd, nbytes(), stream);
    copy_from(staging, stream);
  }
  be.streams().synchronize_stream(index, stream);
}

std::string Tensor::str() const {
  std::ostringstream os;
  os << "Tensor(shape=" << shape_str(shape_) << ", dtype=" << dtype_name(dtype_)
     << ", device=" << device().str() << ")";
  return os.str();
}

}  // namespace xpuruntime
