// SPDX-License-Identifier: Apache-2.0
// procs_worker - one rank of a rank-per-process communicator, started by allreduce_procs_test (a fresh
// process per rank, so no CUDA state crosses a fork). It joins with the id it is given, runs one
// scenario, and writes one line per result to its output file:
//   matrix   "case <i> <hash> <wrong>" for every case of procs_cases.h's matrix, then "latency_us <mean>"
//            (the mean of 200 eager LL calls: what time-slicing one GPU among processes costs)
//   graph    "graph <i> <replay> <hash> <wrong>": each graph case captured once, replayed three times
//   fused    "fused <call> <hash of residual_out> <hash of normed>" for three fused calls
//   kill-N   the last rank makes one call of N bf16 elements, enqueues a second and kills itself; the
//            others make calls until one reports tpsTimeout: "timeout <call> <ms waited>"
//   refused  the p2p self-check must refuse the backend (the test sets TPSCOPE_TEST_P2P_CHECK_FAULT):
//            the join returns tpsUnavailable on every rank: "refused"
//   fallback the same fault under auto: the communicator is made without p2p (a p2p call is
//            tpsUnavailable) and an auto call still sums right: "fallback <wrong>"
// Exit status: 0 done, 77 no GPU, 1 a failure (the reason on stderr).
// Usage: procs_worker SCENARIO BACKEND NRANKS RANK ID_FILE OUT_FILE SPIN_TIMEOUT_MS
// ID_FILE holds the id in hex, in a folder only this user can read: the id is a secret (tpscope.h), and a
// command line is readable by every user of the host.
#include <cuda_runtime.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "procs_cases.h"
#include "tpscope/tpscope.h"

using namespace tpscope::testing::procs;

namespace {

#define FAIL_IF(cond, ...)                                    \
  do {                                                        \
    if (cond) {                                               \
      std::fprintf(stderr, "rank %d: ", g_rank);              \
      std::fprintf(stderr, __VA_ARGS__);                      \
      std::fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__); \
      std::exit(1);                                           \
    }                                                         \
  } while (0)
#define CUDA_OK(x) FAIL_IF((x) != cudaSuccess, "%s: %s", #x, cudaGetErrorString(cudaGetLastError()))
#define TPS_OK(x)                                                   \
  do {                                                              \
    tpsResult_t r_ = (x);                                           \
    FAIL_IF(r_ != tpsSuccess, "%s: %s", #x, tpsGetErrorString(r_)); \
  } while (0)

int g_rank = -1;

struct Buffer {
  void* alloc = nullptr;
  void* ptr = nullptr;
  size_t bytes = 0;
};

Buffer upload(const Case& c, int rank, cudaStream_t s) {
  Buffer b;
  const size_t es = tpsDataTypeSize(c.dtype);
  b.bytes = c.count * es;
  CUDA_OK(cudaMalloc(&b.alloc, (c.count + c.offset) * es + 256));
  b.ptr = static_cast<char*>(b.alloc) + c.offset * es;
  const auto in = input(c, rank);
  CUDA_OK(cudaMemcpyAsync(b.ptr, in.data(), b.bytes, cudaMemcpyHostToDevice, s));
  CUDA_OK(cudaStreamSynchronize(s));
  return b;
}

std::vector<unsigned char> download(const void* p, size_t bytes) {
  std::vector<unsigned char> v(bytes);
  CUDA_OK(cudaMemcpy(v.data(), p, bytes, cudaMemcpyDeviceToHost));
  return v;
}

void checkAsync(tpsComm_t comm) {
  tpsResult_t async = tpsInternalError;
  TPS_OK(tpsCommGetAsyncError(comm, &async));
  FAIL_IF(async != tpsSuccess, "asynchronous error %s", tpsGetErrorString(async));
}

void runMatrix(tpsComm_t comm, tpsBackend_t backend, int nranks, int rank, cudaStream_t s, FILE* out) {
  const auto cases = matrix();
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    Buffer b = upload(c, rank, s);
    TPS_OK(tpsAllReduceWith(comm, backend, &b.ptr, c.count, c.dtype, reinterpret_cast<tpsStream_t*>(&s)));
    CUDA_OK(cudaStreamSynchronize(s));
    const auto res = download(b.ptr, b.bytes);
    std::fprintf(out, "case %zu %016llx %zu\n", i, static_cast<unsigned long long>(hashBytes(res.data(), res.size())),
                 wrongElements(c, nranks, res.data()));
    CUDA_OK(cudaFree(b.alloc));
  }
  checkAsync(comm);
  const Case lat{tpsBfloat16, 4096, 0, 7};
  Buffer b = upload(lat, rank, s);
  const int calls = 200;
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < calls; ++k)
    TPS_OK(tpsAllReduceWith(comm, backend, &b.ptr, lat.count, lat.dtype, reinterpret_cast<tpsStream_t*>(&s)));
  CUDA_OK(cudaStreamSynchronize(s));
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
  std::fprintf(out, "latency_us %.1f\n", us);
  checkAsync(comm);
  // The latency calls (8 KiB) take the LL one-shot on p2p, and this rank's statistics say so.
  tpsStats_t st;
  TPS_OK(tpsCommGetStats(comm, &st));
  unsigned long long ll = 0;
  for (int k = 0; k < TPS_NUM_SIZE_CLASSES; ++k) ll += st.cells[tpsPathP2pLL][k].calls;
  FAIL_IF(st.ndev != 1 || st.devices[0] != 0, "statistics name %d GPUs, the first %d", st.ndev, st.devices[0]);
  FAIL_IF(backend == tpsBackendP2p && ll < static_cast<unsigned long long>(calls),
          "%llu calls counted under tpsPathP2pLL, not %d or more", ll, calls);
}

void graphs(tpsComm_t comm, tpsBackend_t backend, int nranks, int rank, cudaStream_t s, FILE* out) {
  const auto cases = graphCases();
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    Buffer b = upload(c, rank, s);
    const auto in = input(c, rank);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    TPS_OK(tpsAllReduceWith(comm, backend, &b.ptr, c.count, c.dtype, reinterpret_cast<tpsStream_t*>(&s)));
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; ++rep) {
      CUDA_OK(cudaMemcpyAsync(b.ptr, in.data(), b.bytes, cudaMemcpyHostToDevice, s));
      CUDA_OK(cudaGraphLaunch(exec, s));
      CUDA_OK(cudaStreamSynchronize(s));
      const auto res = download(b.ptr, b.bytes);
      std::fprintf(out, "graph %zu %d %016llx %zu\n", i, rep,
                   static_cast<unsigned long long>(hashBytes(res.data(), res.size())),
                   wrongElements(c, nranks, res.data()));
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaFree(b.alloc));
  }
  checkAsync(comm);
}

void fused(tpsComm_t comm, int rank, cudaStream_t s, FILE* out) {
  const size_t n = kFusedRows * kFusedWidth;
  void *partial, *res_in, *res_out, *weight, *normed;
  for (void** p : {&partial, &res_in, &res_out, &normed}) CUDA_OK(cudaMalloc(p, n * 2));
  CUDA_OK(cudaMalloc(&weight, kFusedWidth * 2));
  const auto part = fusedInput(0, rank), res = fusedInput(1, rank), w = fusedInput(2, rank);
  // Uploads on the call's stream, synchronised: a pageable cudaMemcpy may return before its DMA is done,
  // and the non-blocking stream does not wait for it.
  CUDA_OK(cudaMemcpyAsync(res_in, res.data(), n * 2, cudaMemcpyHostToDevice, s));
  CUDA_OK(cudaMemcpyAsync(weight, w.data(), kFusedWidth * 2, cudaMemcpyHostToDevice, s));
  for (int call = 0; call < 3; ++call) {
    CUDA_OK(cudaMemcpyAsync(partial, part.data(), n * 2, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaStreamSynchronize(s));
    const void* ri = res_in;
    const void* wt = weight;
    TPS_OK(tpsAllReduceAddRmsNorm(comm, tpsBackendP2p, &partial, &ri, &res_out, &wt, &normed, kFusedRows, kFusedWidth,
                                  kFusedEps, tpsBfloat16, reinterpret_cast<tpsStream_t*>(&s)));
    CUDA_OK(cudaStreamSynchronize(s));
    const auto ro = download(res_out, n * 2), nm = download(normed, n * 2);
    std::fprintf(out, "fused %d %016llx %016llx\n", call,
                 static_cast<unsigned long long>(hashBytes(ro.data(), ro.size())),
                 static_cast<unsigned long long>(hashBytes(nm.data(), nm.size())));
  }
  checkAsync(comm);
}

void killScenario(tpsComm_t comm, tpsBackend_t backend, int nranks, int rank, cudaStream_t s, unsigned timeout_ms,
                  size_t count, FILE* out) {
  const Case c{tpsBfloat16, count, 0, 9};
  Buffer b = upload(c, rank, s);
  auto call = [&] {
    TPS_OK(tpsAllReduceWith(comm, backend, &b.ptr, c.count, c.dtype, reinterpret_cast<tpsStream_t*>(&s)));
  };
  call();
  CUDA_OK(cudaStreamSynchronize(s));
  checkAsync(comm);
  if (rank == nranks - 1) {
    call();
    std::fflush(out);
    std::raise(SIGKILL);  // mid-call: its kernel may or may not have run
  }
  for (int k = 1; k <= 3; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    CUDA_OK(cudaStreamSynchronize(s));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    tpsResult_t async = tpsInternalError;
    TPS_OK(tpsCommGetAsyncError(comm, &async));
    if (async == tpsTimeout) {
      std::fprintf(out, "timeout %d %.0f\n", k, ms);
      FAIL_IF(ms > timeout_ms + 2000.0, "the timed-out call took %.0f ms with a spin timeout of %u ms", ms, timeout_ms);
      FAIL_IF(tpsAllReduceWith(comm, backend, &b.ptr, c.count, c.dtype, reinterpret_cast<tpsStream_t*>(&s)) !=
                  tpsInvalidUsage,
              "the communicator took a call after its timeout");
      return;
    }
    FAIL_IF(async != tpsSuccess, "asynchronous error %s", tpsGetErrorString(async));
  }
  FAIL_IF(true, "three calls after the peer died and none timed out");
}

void fallback(tpsComm_t comm, int nranks, int rank, cudaStream_t s, FILE* out) {
  const Case c{tpsFloat32, 100003, 0, 11};
  Buffer b = upload(c, rank, s);
  FAIL_IF(tpsAllReduceWith(comm, tpsBackendP2p, &b.ptr, c.count, c.dtype, reinterpret_cast<tpsStream_t*>(&s)) !=
              tpsUnavailable,
          "a p2p call was taken after the self-check refused p2p");
  TPS_OK(tpsAllReduce(comm, &b.ptr, c.count, c.dtype, reinterpret_cast<tpsStream_t*>(&s)));
  CUDA_OK(cudaStreamSynchronize(s));
  checkAsync(comm);
  const auto res = download(b.ptr, b.bytes);
  std::fprintf(out, "fallback %zu\n", wrongElements(c, nranks, res.data()));
  CUDA_OK(cudaFree(b.alloc));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: procs_worker SCENARIO BACKEND NRANKS RANK ID_FILE OUT_FILE SPIN_TIMEOUT_MS\n");
    return 2;
  }
  const std::string scenario = argv[1], backend_name = argv[2];
  const int nranks = std::atoi(argv[3]);
  g_rank = std::atoi(argv[4]);
  std::string hex;
  {
    std::ifstream f(argv[5]);
    f >> hex;
  }
  const unsigned timeout_ms = static_cast<unsigned>(std::atoi(argv[7]));
  tpsUniqueId id;
  FAIL_IF(hex.size() != 2 * sizeof(id), "the id is %zu hex digits, not %zu", hex.size(), 2 * sizeof(id));
  for (size_t i = 0; i < sizeof(id); ++i)
    id.internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  const tpsBackend_t backend = backend_name == "p2p"    ? tpsBackendP2p
                               : backend_name == "host" ? tpsBackendHost
                               : backend_name == "auto" ? tpsBackendAuto
                                                        : tpsBackendNccl;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 1) return 77;
  // Every rank on GPU 0: processes time-slice it.
  CUDA_OK(cudaSetDevice(0));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.backend = backend;
  cfg.spin_timeout_ms = timeout_ms;
  cfg.shared_devices = 1;
  tpsComm_t comm = nullptr;
  if (scenario == "refused") {
    const tpsResult_t r = tpsCommInitRank(&comm, nranks, id, g_rank, 0, &cfg);
    FAIL_IF(r != tpsUnavailable || comm != nullptr, "the join with a failed p2p self-check returned %s",
            tpsGetErrorString(r));
    FILE* out = std::fopen(argv[6], "w");
    FAIL_IF(out == nullptr, "cannot write %s", argv[6]);
    std::fprintf(out, "refused\n");
    std::fclose(out);
    return 0;
  }
  TPS_OK(tpsCommInitRank(&comm, nranks, id, g_rank, 0, &cfg));
  tpsConfig_t got;
  TPS_OK(tpsCommGetConfig(comm, &got));
  FAIL_IF(
      got.backend != backend || got.spin_timeout_ms != timeout_ms || got.shared_devices != 1 || got.host_blocks <= 0,
      "tpsCommGetConfig says backend %d, spin timeout %u, shared_devices %d, host blocks %d", got.backend,
      got.spin_timeout_ms, got.shared_devices, got.host_blocks);
  int n = 0, r = -1;
  TPS_OK(tpsCommCount(comm, &n));
  TPS_OK(tpsCommUserRank(comm, &r));
  FAIL_IF(n != nranks || r != g_rank, "tpsCommCount / tpsCommUserRank say %d / %d", n, r);
  FILE* out = std::fopen(argv[6], "w");
  FAIL_IF(out == nullptr, "cannot write %s", argv[6]);
  if (scenario == "matrix")
    runMatrix(comm, backend, nranks, g_rank, s, out);
  else if (scenario == "graph")
    graphs(comm, backend, nranks, g_rank, s, out);
  else if (scenario == "fused")
    fused(comm, g_rank, s, out);
  else if (scenario.rfind("kill-", 0) == 0)
    killScenario(comm, backend, nranks, g_rank, s, timeout_ms, std::stoull(scenario.substr(5)), out);
  else if (scenario == "fallback")
    fallback(comm, nranks, g_rank, s, out);
  else
    FAIL_IF(true, "unknown scenario %s", scenario.c_str());
  std::fclose(out);
  // Every rank is done with the others' memory once its own last call has completed (it waited for
  // every peer's part), so the communicator goes without a barrier.
  TPS_OK(tpsCommDestroy(comm));
  return 0;
}
