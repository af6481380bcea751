// NoDestructor<T>: a process-lifetime object that is never destroyed. Singletons
// that Python objects may still reach during interpreter shutdown (allocators,
// backends, registries) use it so static destruction order can never free them
// under a live tensor. Placement-new into static storage: no heap, no leak report.
#pragma once

#include <new>
#include <utility>

namespace xpuruntime {

template <typename T>
class NoDestructor {
 public:
  template <typename... Args>
  explicit NoDestructor(Args&&... args) {
    new (storage_) T(std::forward<Args>(args)...);
  }
  NoDestructor(const NoDestructor&) = delete;
  NoDestructor& operator=(const NoDestructor&) = delete;
  T& get() { return *std::launder(reinterpret_cast<T*>(storage_)); }
  T* operator->() { return &get(); }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace xpuruntime
