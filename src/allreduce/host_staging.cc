// SPDX-License-Identifier: Apache-2.0
// host_staging.cc - shared pinned host memory in one process (cudaHostAlloc) and across processes (POSIX
// shared memory, registered with CUDA in every process).
#include "allreduce/host_staging.h"

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "allreduce/rank_setup.h"
#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::detail {

namespace {

class ProcessStaging final : public HostStaging {
 public:
  explicit ProcessStaging(std::vector<int> devices) : devices_(std::move(devices)) {}
  tpsResult_t allocate(size_t bytes, SharedHost* out) override {
    PinnedBuffer b;
    TPS_CHECK(PinnedBuffer::create(bytes, &b));
    std::memset(b.host(), 0, bytes);
    SharedHost s;
    s.host = static_cast<char*>(b.host());
    s.bytes = bytes;
    for (int d : devices_) {
      void* p = nullptr;
      TPS_CHECK(b.devicePointer(d, &p));
      s.device.push_back(static_cast<char*>(p));
    }
    buffers_.push_back(std::move(b));
    *out = std::move(s);
    return tpsSuccess;
  }

 private:
  std::vector<int> devices_;
  std::vector<PinnedBuffer> buffers_;
};

// One mapping of a shared-memory area, registered with CUDA.
struct Mapping {
  void* addr = nullptr;
  size_t bytes = 0;
  bool registered = false;
};

class SharedMemoryStaging final : public HostStaging {
 public:
  explicit SharedMemoryStaging(RankGroup& g) : g_(g) {}
  ~SharedMemoryStaging() override {
    for (Mapping& m : maps_) {
      if (m.registered) (void)cudaHostUnregister(m.addr);
      if (m.addr) munmap(m.addr, m.bytes);
    }
    (void)cudaGetLastError();
  }
  tpsResult_t allocate(size_t bytes, SharedHost* out) override;

 private:
  RankGroup& g_;
  std::vector<Mapping> maps_;
};

tpsResult_t SharedMemoryStaging::allocate(size_t bytes, SharedHost* out) {
  const std::string name = fmt::format("/tpscope-{:016x}-host-{}", g_.boot->nonce(), maps_.size());
  // Rank 0 creates and sizes the area (zero-filled by the kernel); the others open it once it exists.
  // Rank 0 removes the name on every way out: once all ranks have mapped it, or given up.
  struct Unlink {
    const std::string& name;
    bool owner;
    ~Unlink() {
      if (owner) (void)shm_unlink(name.c_str());
    }
  } unlink_on_exit{name, g_.rank == 0};
  tpsResult_t status = tpsSuccess;
  if (g_.rank == 0) {
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    // posix_fallocate, not ftruncate alone: a /dev/shm too small for the area fails here, not later
    // with SIGBUS on first touch.
    const int err = fd < 0 ? errno : posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (fd >= 0) close(fd);
    if (err != 0) {
      TPS_LOG_WARN("host backend: rank 0 cannot create {} bytes of shared memory {}: {}", bytes, name,
                   std::strerror(err));
      status = tpsUnavailable;
    }
  }
  TPS_CHECK(agree(g_, "creating the host staging area", status));
  Mapping m;
  m.bytes = bytes;
  auto map = [&]() -> tpsResult_t {
    const int fd = shm_open(name.c_str(), O_RDWR, 0600);
    TPS_EXPECT(fd >= 0, tpsUnavailable, "host backend: rank {} cannot open shared memory {}: {}", g_.rank, name,
               std::strerror(errno));
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    TPS_EXPECT(p != MAP_FAILED, tpsUnavailable, "host backend: rank {} cannot map {}: {}", g_.rank, name,
               std::strerror(errno));
    m.addr = p;
    DeviceGuard dg(g_.device);
    TPS_CUDA_CHECK(cudaHostRegister(m.addr, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
    m.registered = true;
    return tpsSuccess;
  };
  status = map();
  void* dev = nullptr;
  if (status == tpsSuccess) {
    DeviceGuard dg(g_.device);
    if (cudaHostGetDevicePointer(&dev, m.addr, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      status = tpsCudaError;
    }
  }
  maps_.push_back(m);  // released with the staging, whatever the others say
  // After this every rank has it mapped (or has given up): the name goes, and the memory with the last
  // mapping.
  TPS_CHECK(agree(g_, "mapping the host staging area", status));
  out->host = static_cast<char*>(m.addr);
  out->device = {static_cast<char*>(dev)};
  out->bytes = bytes;
  return tpsSuccess;
}

}  // namespace

std::unique_ptr<HostStaging> makeProcessStaging(const std::vector<int>& devices) {
  return std::make_unique<ProcessStaging>(devices);
}

std::unique_ptr<HostStaging> makeSharedMemoryStaging(RankGroup& g) { return std::make_unique<SharedMemoryStaging>(g); }

}  // namespace tpscope::detail
