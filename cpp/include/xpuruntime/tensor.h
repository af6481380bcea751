// Tensor: dtype, shape, strides (in elements), offset, device, shared storage.
// Copies of a Tensor share storage (like torch). Storage owns its memory through a
// release function: the caching allocator, or a DLPack producer's deleter.
// A Tensor is not synchronized: concurrent writers need external ordering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xpuruntime/backend.h"
#include "xpuruntime/device.h"
#include "xpuruntime/dtype.h"

namespace xpuruntime {

using Shape = std::vector<int64_t>;

class Storage {
 public:
  // Takes ownership of `data`; `release` runs once when the last user lets go.
  Storage(void* data, std::size_t nbytes, Device device, std::function<void(void*)> release)
      : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)) {}
  ~Storage() {
    if (release_) release_(data_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  const Device& device() const { return device_; }

 private:
  void* data_;
  std::size_t nbytes_;
  Device device_;
  std::function<void(void*)> release_;
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates through the device's caching allocator (for use on `stream`).
  static Tensor empty(const Shape& shape, DType dtype, const Device& device,
                      NativeStream stream = nullptr);
  static Tensor zeros(const Shape& shape, DType dtype, const Device& device);
  // A view over existing storage; validates that the view fits in the storage.
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
         DType dtype);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }  // in elements
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;
  int64_t numel() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  std::size_t element_size() const { return dtype_size(dtype_); }
  Device device() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Pointer to element 0 (storage data + offset).
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_ptr());
  }
  bool is_contiguous() const;

  // Same data, new shape (contiguous tensors only).
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int64_t a, int64_t b) const;  // a view
  // A contiguous tensor: itself when already contiguous, else a copy.
  Tensor contiguous(NativeStream stream = nullptr) const;
  // Copies to `device` (itself when already there and copy is false).
  Tensor to(const Device& device, NativeStream stream = nullptr, bool copy = false) const;
  // Copies elements of `src` (same shape and dtype, any strides/devices) into this.
  void copy_from(const Tensor& src, NativeStream stream = nullptr);
  std::string str() const;  // "Tensor(shape=[2, 3], dtype=float32, device=cpu)"

  static Shape contiguous_strides(const Shape& shape);

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::kFloat32;
};

}  // namespace xpuruntime
