// SPDX-License-Identifier: Apache-2.0
// host_shm.cu - backend `host` for a rank-per-process communicator: host_kernels.cuh's one-kernel path,
// with the staging area and the flags in POSIX shared memory that every rank's process maps and
// registers with CUDA (mapped, so the kernels load and store it directly).
//
// Every size takes the kernel path, in pieces of the staging stride: its waits are bounded in-kernel
// spins on the flags. The copy-engine path of host_staged.cu orders copies across GPUs with CUDA events,
// and a wait on another process's event could not be bounded.
// Every rank runs the vector kernel on a 16-byte aligned buffer (the ranks must split the work alike
// and cannot see each other's buffers): a buffer that is not aligned goes through a local scratch.
#include "allreduce/host_shm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "allreduce/async_status.h"
#include "allreduce/host_kernels.cuh"
#include "allreduce/rank_backend.cuh"
#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::detail {

namespace {

constexpr size_t kStageMax = 1u << 20;  // bytes per (slot, rank): 2 x 8 x 1 MiB fits a small /dev/shm
constexpr size_t kAlign = 16;

size_t roundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// What the ranks must agree on to share one layout.
struct Layout {
  uint64_t stride;
  int32_t blocks;
  int32_t pad;
};

class HostShmBackend final : public RankBackend<HostShmBackend> {
 public:
  ~HostShmBackend() override;
  tpsResult_t init(RankGroup& g, const HostTuning& tuning);
  tpsBackend_t kind() const override { return tpsBackendHost; }
  tpsPath_t pathFor(const CallArgs&) const override { return tpsPathHostKernel; }
  Traffic trafficFor(tpsPath_t, size_t bytes) const override {
    return Traffic{bytes, bytes * static_cast<size_t>(nranks_ - 1)};
  }
  tpsResult_t asyncError() const override { return status_.error(nranks_); }
  // This rank's call of `count` elements of T (RankBackend::allReduce dispatches here).
  template <typename T>
  tpsResult_t run(void* buf, size_t count, cudaStream_t stream);

 private:
  int device_ = -1, rank_ = 0, nranks_ = 0;
  Layout layout_{};
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  bool registered_ = false;
  AsyncStatus status_;
  DeviceBuffer counters_, scratch_;
  HostKernelHandle handle_{};
};

HostShmBackend::~HostShmBackend() {
  if (registered_) {
    (void)cudaHostUnregister(map_);
    (void)cudaGetLastError();
  }
  if (map_) munmap(map_, map_bytes_);
}

tpsResult_t HostShmBackend::init(RankGroup& g, const HostTuning& tuning) {
  device_ = g.device, rank_ = g.rank, nranks_ = g.nranks;
  const int n = nranks_;
  layout_.stride = roundUp(std::min(std::max(tuning.copy_threshold, size_t{64} << 10), kStageMax), kAlign);
  layout_.blocks = tuning.blocks;
  const size_t stage_bytes = 2 * n * layout_.stride;
  const size_t flag_bytes = size_t{2} * n * layout_.blocks * kFlagStride * sizeof(unsigned long long);
  map_bytes_ = stage_bytes + flag_bytes;
  const std::string name = fmt::format("/tpscope-{:016x}-host", g.boot->nonce());

  // Rank 0 creates and sizes the area (zero-filled by the kernel); the others open it once it exists.
  // Rank 0 removes the name on every way out: once all ranks have mapped it, or given up.
  struct Unlink {
    const std::string& name;
    bool owner;
    ~Unlink() {
      if (owner) (void)shm_unlink(name.c_str());
    }
  } unlink_on_exit{name, rank_ == 0};
  tpsResult_t status = tpsSuccess;
  if (rank_ == 0) {
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    // posix_fallocate, not ftruncate alone: a /dev/shm too small for the area fails here, not later
    // with SIGBUS on first touch.
    const int err = fd < 0 ? errno : posix_fallocate(fd, 0, static_cast<off_t>(map_bytes_));
    if (fd >= 0) close(fd);
    if (err != 0) {
      TPS_LOG_WARN("host backend: rank 0 cannot create {} bytes of shared memory {}: {}", map_bytes_, name,
                   std::strerror(err));
      status = tpsUnavailable;
    }
  }
  std::vector<char> all;
  TPS_CHECK(exchange(g, "creating the host staging area", status, &layout_, sizeof(layout_), &all));
  for (int q = 0; q < n && status == tpsSuccess; ++q) {
    const Layout* l = reinterpret_cast<const Layout*>(all.data()) + q;
    if (l->stride != layout_.stride || l->blocks != layout_.blocks) {
      TPS_LOG_WARN(
          "host backend: ranks {} and {} disagree on the host tuning (stride {} / {}, blocks {} / {}); give "
          "every rank the same config, environment and tune file",
          rank_, q, layout_.stride, l->stride, layout_.blocks, l->blocks);
      status = tpsInvalidArgument;
    }
  }
  auto map = [&]() -> tpsResult_t {
    const int fd = shm_open(name.c_str(), O_RDWR, 0600);
    TPS_EXPECT(fd >= 0, tpsUnavailable, "host backend: rank {} cannot open shared memory {}: {}", rank_, name,
               std::strerror(errno));
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    TPS_EXPECT(p != MAP_FAILED, tpsUnavailable, "host backend: rank {} cannot map {}: {}", rank_, name,
               std::strerror(errno));
    map_ = p;
    DeviceGuard dg(device_);
    cudaDeviceProp prop{};
    TPS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    TPS_EXPECT(prop.canMapHostMemory && prop.major >= 7, tpsUnavailable,
               "host backend: GPU {} cannot map host memory or predates sm_70", device_);
    TPS_CUDA_CHECK(cudaHostRegister(map_, map_bytes_, cudaHostRegisterMapped | cudaHostRegisterPortable));
    registered_ = true;
    void* dev = nullptr;
    TPS_CUDA_CHECK(cudaHostGetDevicePointer(&dev, map_, 0));
    TPS_CHECK(status_.create());
    TPS_CHECK(DeviceBuffer::create(device_, layout_.blocks * sizeof(unsigned long long), &counters_));
    TPS_CUDA_CHECK(cudaMemset(counters_.get(), 0, counters_.bytes()));
    TPS_CHECK(DeviceBuffer::create(device_, layout_.stride, &scratch_));
    TPS_CUDA_CHECK(cudaDeviceSynchronize());
    handle_.stage = static_cast<char*>(dev);
    handle_.stage_stride = layout_.stride;
    handle_.flags = reinterpret_cast<unsigned long long*>(static_cast<char*>(dev) + stage_bytes);
    handle_.counters = counters_.as<unsigned long long>();
    TPS_CHECK(status_.devicePointer(device_, &handle_.status));
    handle_.timeout_ns = static_cast<unsigned long long>(tuning.spin_timeout_ms) * 1000000ull;
    handle_.rank = rank_;
    handle_.nranks = n;
    cudaFuncAttributes fa;  // load the kernels now, as host_staged.cu does
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<float, true>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<__half, true>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<__nv_bfloat16, true>));
    return tpsSuccess;
  };
  if (status == tpsSuccess) status = map();
  // After this every rank has it mapped (or has given up): the name goes, and the memory with the last
  // mapping.
  TPS_CHECK(agree(g, "mapping the host staging area", status));
  TPS_LOG_INFO("host backend: rank {} of {} on GPU {}, staging {} B per slot and rank in shared memory {}", rank_, n,
               device_, layout_.stride, name);
  return tpsSuccess;
}

template <typename T>
tpsResult_t HostShmBackend::run(void* user, size_t count, cudaStream_t stream) {
  DeviceGuard g(device_);
  const size_t piece = layout_.stride / sizeof(T);
  const bool aligned = reinterpret_cast<uintptr_t>(user) % kAlign == 0;
  for (size_t off = 0; off < count; off += piece) {
    const size_t cnt = std::min(piece, count - off);
    T* src = static_cast<T*>(user) + off;
    T* buf = aligned ? src : scratch_.as<T>();
    if (!aligned) TPS_CUDA_CHECK(cudaMemcpyAsync(buf, src, cnt * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    hostKernelAllReduce<T, true><<<layout_.blocks, kKernelThreads, 0, stream>>>(handle_, buf, cnt);
    TPS_CUDA_CHECK_LAUNCH();
    if (!aligned) TPS_CUDA_CHECK(cudaMemcpyAsync(src, buf, cnt * sizeof(T), cudaMemcpyDeviceToDevice, stream));
  }
  return tpsSuccess;
}

}  // namespace

tpsResult_t createHostShmBackend(RankGroup& g, const HostTuning& tuning, std::unique_ptr<Backend>* out) {
  return HostShmBackend::create(g, tuning, out);
}

}  // namespace tpscope::detail
