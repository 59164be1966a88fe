// SPDX-License-Identifier: Apache-2.0
// cuda_raii.cc - creation and release of the CUDA owners.
#include "common/cuda_raii.h"

#include "common/checks.h"

namespace tpscope {

DeviceGuard::DeviceGuard(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
  if (previous_ != device) (void)cudaSetDevice(device);
}
DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    reset();
    stream_ = std::exchange(o.stream_, nullptr);
    device_ = o.device_;
  }
  return *this;
}
tpsResult_t Stream::create(int device, Stream* out, int priority) {
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  TPS_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
  out->reset();
  out->stream_ = s;
  out->device_ = device;
  return tpsSuccess;
}
void Stream::reset() {
  if (stream_ != nullptr) {
    DeviceGuard guard(device_);
    (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    reset();
    event_ = std::exchange(o.event_, nullptr);
    device_ = o.device_;
  }
  return *this;
}
tpsResult_t Event::create(int device, Event* out, bool timing) {
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  TPS_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  out->reset();
  out->event_ = e;
  out->device_ = device;
  return tpsSuccess;
}
void Event::reset() {
  if (event_ != nullptr) {
    DeviceGuard guard(device_);
    (void)cudaEventDestroy(event_);
    event_ = nullptr;
  }
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    device_ = o.device_;
  }
  return *this;
}
tpsResult_t DeviceBuffer::create(int device, size_t bytes, DeviceBuffer* out) {
  DeviceGuard guard(device);
  void* p = nullptr;
  TPS_CUDA_CHECK(cudaMalloc(&p, bytes));
  out->reset();
  out->ptr_ = p;
  out->bytes_ = bytes;
  out->device_ = device;
  return tpsSuccess;
}
void DeviceBuffer::reset() {
  if (ptr_ != nullptr) {
    DeviceGuard guard(device_);
    (void)cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    host_ = std::exchange(o.host_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}
tpsResult_t PinnedBuffer::create(size_t bytes, PinnedBuffer* out) {
  void* p = nullptr;
  TPS_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
  out->reset();
  out->host_ = p;
  out->bytes_ = bytes;
  return tpsSuccess;
}
tpsResult_t PinnedBuffer::devicePointer(int device, void** out) const {
  DeviceGuard guard(device);
  TPS_CUDA_CHECK(cudaHostGetDevicePointer(out, host_, 0));
  return tpsSuccess;
}
void PinnedBuffer::reset() {
  if (host_ != nullptr) {
    (void)cudaFreeHost(host_);
    host_ = nullptr;
    bytes_ = 0;
  }
}

}  // namespace tpscope
