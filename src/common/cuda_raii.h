// SPDX-License-Identifier: Apache-2.0
// cuda_raii.h - owners for CUDA resources: the current device, streams, events, device and pinned buffers.
//
// Each owner is move-only and releases its resource on the device it was created on. Creation can
// fail, so owners are made by create() functions that return tpsResult_t; an empty owner is valid and
// releases nothing. Host-only code: it includes the runtime API, not device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "tpscope/tpscope.h"

namespace tpscope {

// Makes `device` current for the scope and restores the previous device after it.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// A non-blocking stream on one device.
class Stream {
 public:
  Stream() = default;
  ~Stream() { reset(); }
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)), device_(o.device_) {}
  Stream& operator=(Stream&& o) noexcept;
  static tpsResult_t create(int device, Stream* out, int priority = 0);
  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  void reset();

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = -1;
};

// An event; timing events unless `timing` is false (then cudaEventDisableTiming, cheaper to wait on).
class Event {
 public:
  Event() = default;
  ~Event() { reset(); }
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)), device_(o.device_) {}
  Event& operator=(Event&& o) noexcept;
  static tpsResult_t create(int device, Event* out, bool timing = true);
  cudaEvent_t get() const { return event_; }
  void reset();

 private:
  cudaEvent_t event_ = nullptr;
  int device_ = -1;
};

// cudaMalloc'd memory on one device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), device_(o.device_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  static tpsResult_t create(int device, size_t bytes, DeviceBuffer* out);
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }
  void reset();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
};

// Pinned host memory, portable (pinned for every context) and mapped (GPUs can load and store it).
// host() is for cudaMemcpyAsync; devicePointer() is what kernels use. The two can differ where
// cudaDevAttrCanUseHostPointerForRegisteredMem is 0, so kernels never get host().
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : host_(std::exchange(o.host_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  static tpsResult_t create(size_t bytes, PinnedBuffer* out);
  void* host() const { return host_; }
  // The device-side address of this memory as seen from `device`.
  tpsResult_t devicePointer(int device, void** out) const;
  size_t bytes() const { return bytes_; }
  void reset();

 private:
  void* host_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tpscope
