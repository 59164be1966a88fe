// SPDX-License-Identifier: Apache-2.0
// allreduce_procs_test - rank-per-process communicators (tpsCommInitRank) with 2 and 4 processes sharing
// GPU 0: every backend's correctness matrix, CUDA graphs and the fused call, each result checked against
// the double-precision reference and bit-identical on every rank and to the same call made by one
// process with all ranks (tpsCommCreate on the shared GPU); and a rank killed mid-call leaving the
// others with tpsTimeout. The ranks are procs_worker processes (started fresh, never forked from a
// process that has used CUDA).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../gpu_test_util.h"
#include "procs_cases.h"
#include "tpscope/tpscope.h"

extern char** environ;

namespace {

using namespace tpscope::testing::procs;

struct Worker {
  pid_t pid = -1;
  int status = -1;
  std::string out;
};

std::string hexId(const tpsUniqueId& id) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < sizeof(id); ++i) {
    std::snprintf(b, sizeof(b), "%02x", static_cast<unsigned char>(id.internal[i]));
    s += b;
  }
  return s;
}

// Starts one worker per rank and waits for all (killing them after `limit_s`). Returns the workers with
// their exit statuses; their output files are read by the caller.
std::vector<Worker> runRanks(const std::string& scenario, const char* backend, int nranks, unsigned spin_ms,
                             double limit_s = 150) {
  tpsUniqueId id;
  EXPECT_EQ(tpsGetUniqueId(&id), tpsSuccess);
  const std::string hex = hexId(id);
  char dir_tmpl[] = "/tmp/tpscope-procs-XXXXXX";
  const std::string dir = mkdtemp(dir_tmpl);  // mode 0700: the id file below is this user's alone
  const std::string id_file = dir + "/id.hex";
  std::ofstream(id_file) << hex << "\n";
  std::vector<Worker> w(nranks);
  for (int r = 0; r < nranks; ++r) {
    w[r].out = dir + "/rank" + std::to_string(r) + ".txt";
    const std::string rank = std::to_string(r), n = std::to_string(nranks), spin = std::to_string(spin_ms);
    std::vector<std::string> args = {TPSCOPE_PROCS_WORKER, scenario, backend, n, rank, id_file, w[r].out, spin};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&w[r].pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  for (int left = nranks; left > 0;) {
    for (Worker& x : w)
      if (x.status == -1 && waitpid(x.pid, &x.status, WNOHANG) == x.pid) --left;
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << scenario << ": ranks still running after " << limit_s << " s: killed";
      for (Worker& x : w)
        if (x.status == -1) kill(x.pid, SIGKILL), waitpid(x.pid, &x.status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return w;
}

// Lines of a worker's output file, keyed by their first words.
std::vector<std::vector<std::string>> lines(const std::string& path) {
  std::vector<std::vector<std::string>> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    std::istringstream is(line);
    std::vector<std::string> words;
    for (std::string w; is >> w;) words.push_back(w);
    out.push_back(words);
  }
  return out;
}

bool noGpu(const std::vector<Worker>& w) {
  for (const Worker& x : w)
    if (WIFEXITED(x.status) && WEXITSTATUS(x.status) == 77) return true;
  return false;
}

void expectAllExited(const std::vector<Worker>& w, const std::string& what) {
  for (size_t r = 0; r < w.size(); ++r)
    EXPECT_TRUE(WIFEXITED(w[r].status) && WEXITSTATUS(w[r].status) == 0)
        << what << ": rank " << r << " ended with status " << w[r].status << " (its reason is on stderr)";
}

// The single-process result of each case: all ranks in this process on GPU 0 (tpsCommCreate).
struct OneProcess {
  tpsComm_t comm = nullptr;
  std::vector<cudaStream_t> streams;
  int n = 0;
  explicit OneProcess(tpsBackend_t backend, int nranks) : n(nranks) {
    std::vector<int> devs(nranks, 0);
    streams.resize(nranks);
    cudaSetDevice(0);
    for (auto& s : streams) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    tpsConfig_t cfg;
    tpsConfigInit(&cfg);
    cfg.backend = backend;
    cfg.shared_devices = 1;  // every rank on GPU 0, as the workers (which say so too)
    EXPECT_EQ(tpsCommCreate(&comm, nranks, devs.data(), &cfg), tpsSuccess);
  }
  ~OneProcess() {
    tpsCommDestroy(comm);
    for (auto& s : streams) cudaStreamDestroy(s);
  }
  // Rank 0's result of a case, hashed.
  uint64_t reduce(const Case& c) {
    const size_t es = tpsDataTypeSize(c.dtype);
    std::vector<void*> alloc(n), bufs(n);
    for (int r = 0; r < n; ++r) {
      cudaMalloc(&alloc[r], (c.count + c.offset) * es + 256);
      bufs[r] = static_cast<char*>(alloc[r]) + c.offset * es;
      const auto in = input(c, r);
      cudaMemcpy(bufs[r], in.data(), c.count * es, cudaMemcpyHostToDevice);
    }
    cudaDeviceSynchronize();  // as in fusedOneProcess
    EXPECT_EQ(tpsAllReduce(comm, bufs.data(), c.count, c.dtype, reinterpret_cast<tpsStream_t*>(streams.data())),
              tpsSuccess);
    for (auto& s : streams) cudaStreamSynchronize(s);
    std::vector<unsigned char> out(c.count * es);
    cudaMemcpy(out.data(), bufs[0], out.size(), cudaMemcpyDeviceToHost);
    for (void* p : alloc) cudaFree(p);
    return hashBytes(out.data(), out.size());
  }
};

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(v));
  return b;
}

void correctness(const char* backend_name, tpsBackend_t backend, int nranks) {
  TPS_REQUIRE_GPUS(1);
  const auto w = runRanks("matrix", backend_name, nranks, 10000);
  if (noGpu(w)) GTEST_SKIP() << "the ranks found no GPU";
  expectAllExited(w, "matrix");
  const auto cases = matrix();
  OneProcess one(backend, nranks);
  std::vector<std::string> single;
  for (const Case& c : cases) single.push_back(hex64(one.reduce(c)));
  for (int r = 0; r < nranks; ++r) {
    const auto ls = lines(w[r].out);
    ASSERT_EQ(ls.size(), cases.size() + 1) << "rank " << r << " wrote " << ls.size() << " lines";
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const std::string what = std::string(backend_name) + " N=" + std::to_string(nranks) + " rank " +
                               std::to_string(r) + " " + tpsDataTypeName(c.dtype) +
                               " count=" + std::to_string(c.count) + " offset=" + std::to_string(c.offset);
      EXPECT_EQ(ls[i][3], "0") << what << ": elements off the double reference";
      EXPECT_EQ(ls[i][2], single[i]) << what << ": not bit-identical to one process's result";
    }
    std::printf("[ procs    ] %s N=%d rank %d: %s us per eager 8 KiB bf16 call (ranks time-slice GPU 0)\n",
                backend_name, nranks, r, ls.back()[1].c_str());
  }
}

TEST(AllReduceProcs, P2pTwoProcesses) { correctness("p2p", tpsBackendP2p, 2); }
TEST(AllReduceProcs, P2pFourProcesses) { correctness("p2p", tpsBackendP2p, 4); }
TEST(AllReduceProcs, HostTwoProcesses) { correctness("host", tpsBackendHost, 2); }
TEST(AllReduceProcs, HostFourProcesses) { correctness("host", tpsBackendHost, 4); }
TEST(AllReduceProcs, P2pThreeProcesses) { correctness("p2p", tpsBackendP2p, 3); }
TEST(AllReduceProcs, HostThreeProcesses) { correctness("host", tpsBackendHost, 3); }

void graphReplays(const char* backend_name, tpsBackend_t backend, int nranks) {
  TPS_REQUIRE_GPUS(1);
  const auto w = runRanks("graph", backend_name, nranks, 10000);
  if (noGpu(w)) GTEST_SKIP() << "the ranks found no GPU";
  expectAllExited(w, "graph");
  const auto cases = graphCases();
  OneProcess one(backend, nranks);
  for (int r = 0; r < nranks; ++r) {
    const auto ls = lines(w[r].out);
    ASSERT_EQ(ls.size(), cases.size() * 3);
    for (size_t i = 0; i < ls.size(); ++i) {
      const Case& c = cases[i / 3];
      EXPECT_EQ(ls[i][4], "0") << backend_name << " graph case " << i / 3 << " replay " << i % 3 << " rank " << r;
      EXPECT_EQ(ls[i][3], hex64(one.reduce(c))) << backend_name << " graph case " << i / 3 << " replay " << i % 3
                                                << " rank " << r << ": not bit-identical to one process's result";
    }
  }
}

TEST(AllReduceProcs, GraphReplaysP2p) {
  for (int n : {2, 3, 4}) graphReplays("p2p", tpsBackendP2p, n);
}
TEST(AllReduceProcs, GraphReplaysHost) {
  for (int n : {2, 3, 4}) graphReplays("host", tpsBackendHost, n);
}

// The fused call in one process, hashed as the workers hash it.
std::pair<std::string, std::string> fusedOneProcess(int nranks) {
  OneProcess one(tpsBackendP2p, nranks);
  const size_t n = kFusedRows * kFusedWidth;
  std::vector<void*> partial(nranks), res_in(nranks), res_out(nranks), weight(nranks), normed(nranks);
  for (int r = 0; r < nranks; ++r) {
    for (void** p : {&partial[r], &res_in[r], &res_out[r], &normed[r]}) cudaMalloc(p, n * 2);
    cudaMalloc(&weight[r], kFusedWidth * 2);
    const auto part = fusedInput(0, r), res = fusedInput(1, r), wt = fusedInput(2, r);
    cudaMemcpy(partial[r], part.data(), n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(res_in[r], res.data(), n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(weight[r], wt.data(), kFusedWidth * 2, cudaMemcpyHostToDevice);
  }
  cudaDeviceSynchronize();  // pageable uploads may still be in flight; the streams are non-blocking
  std::vector<const void*> ri(res_in.begin(), res_in.end()), wt(weight.begin(), weight.end());
  EXPECT_EQ(tpsAllReduceAddRmsNorm(one.comm, tpsBackendP2p, partial.data(), ri.data(), res_out.data(), wt.data(),
                                   normed.data(), kFusedRows, kFusedWidth, kFusedEps, tpsBfloat16,
                                   reinterpret_cast<tpsStream_t*>(one.streams.data())),
            tpsSuccess);
  for (auto& s : one.streams) cudaStreamSynchronize(s);
  std::vector<unsigned char> ro(n * 2), nm(n * 2);
  cudaMemcpy(ro.data(), res_out[0], n * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(nm.data(), normed[0], n * 2, cudaMemcpyDeviceToHost);
  for (int r = 0; r < nranks; ++r)
    for (void* p : {partial[r], res_in[r], res_out[r], weight[r], normed[r]}) cudaFree(p);
  return {hex64(hashBytes(ro.data(), ro.size())), hex64(hashBytes(nm.data(), nm.size()))};
}

TEST(AllReduceProcs, FusedAddRmsNormP2p) {
  TPS_REQUIRE_GPUS(1);
  for (int nranks : {2, 3, 4}) {
    const auto w = runRanks("fused", "p2p", nranks, 10000);
    if (noGpu(w)) GTEST_SKIP() << "the ranks found no GPU";
    expectAllExited(w, "fused");
    const auto ref = fusedOneProcess(nranks);
    for (int r = 0; r < nranks; ++r) {
      const auto ls = lines(w[r].out);
      ASSERT_EQ(ls.size(), 3u);
      for (const auto& l : ls) {
        EXPECT_EQ(l[2], ref.first) << "N=" << nranks << " rank " << r << " call " << l[1] << ": residual_out differs";
        EXPECT_EQ(l[3], ref.second) << "N=" << nranks << " rank " << r << " call " << l[1] << ": normed differs";
      }
    }
  }
}

// The last rank dies mid-call: every other rank's next call ends with tpsTimeout within the spin timeout
// plus kKillSlackMs, and its communicator refuses further calls; nothing hangs. At 8 KiB, 16 MiB and
// 256 MiB: the large calls run in pieces (host: 1 MiB kernels; p2p: 64 MiB two-shot launches), and
// only the first piece waits out the timeout.
constexpr unsigned kKillSpinMs = 500;
constexpr double kKillSlackMs = 250;
void killedRank(const char* backend_name, int nranks, size_t count) {
  TPS_REQUIRE_GPUS(1);
  const auto w = runRanks("kill-" + std::to_string(count), backend_name, nranks, kKillSpinMs, 60);
  if (noGpu(w)) GTEST_SKIP() << "the ranks found no GPU";
  EXPECT_TRUE(WIFSIGNALED(w[nranks - 1].status) && WTERMSIG(w[nranks - 1].status) == SIGKILL);
  for (int r = 0; r < nranks - 1; ++r) {
    EXPECT_TRUE(WIFEXITED(w[r].status) && WEXITSTATUS(w[r].status) == 0)
        << backend_name << " rank " << r << " ended with status " << w[r].status;
    const auto ls = lines(w[r].out);
    ASSERT_EQ(ls.size(), 1u) << backend_name << " rank " << r;
    ASSERT_EQ(ls[0].size(), 3u);
    const double ms = std::stod(ls[0][2]);
    std::printf("[ procs    ] %s N=%d %zu B rank %d: tpsTimeout on call %s after %.0f ms (spin timeout %u ms)\n",
                backend_name, nranks, count * 2, r, ls[0][1].c_str(), ms, kKillSpinMs);
    EXPECT_LT(ms, kKillSpinMs + kKillSlackMs) << backend_name << " " << count * 2 << " B rank " << r;
  }
}

TEST(AllReduceProcs, KilledRankTimesOutP2p) {
  for (size_t count : {size_t{4096}, size_t{8} << 20, size_t{128} << 20}) killedRank("p2p", 2, count);
  killedRank("p2p", 4, 4096);
}
TEST(AllReduceProcs, KilledRankTimesOutHost) {
  for (size_t count : {size_t{4096}, size_t{8} << 20, size_t{128} << 20}) killedRank("host", 2, count);
  killedRank("host", 4, 4096);
}

// A p2p self-check that fails on one rank (TPSCOPE_TEST_P2P_CHECK_FAULT=1, set by the ctest entry
// ProcsP2pSelfCheckFault): forced p2p is refused on every rank; auto goes on without p2p on every rank
// and still sums right.
TEST(ProcsP2pSelfCheckInjectedFault, RefusedEverywhere) {
  TPS_REQUIRE_GPUS(1);
  const char* fault = std::getenv("TPSCOPE_TEST_P2P_CHECK_FAULT");
  if (fault == nullptr) GTEST_SKIP() << "runs under the ctest entry ProcsP2pSelfCheckFault (needs its environment)";
  for (int nranks : {2, 4}) {
    auto w = runRanks("refused", "p2p", nranks, 2000, 60);
    if (noGpu(w)) GTEST_SKIP() << "the ranks found no GPU";
    expectAllExited(w, "refused");
    for (int r = 0; r < nranks; ++r) EXPECT_EQ(lines(w[r].out), (std::vector<std::vector<std::string>>{{"refused"}}));
    w = runRanks("fallback", "auto", nranks, 2000, 60);
    expectAllExited(w, "fallback");
    for (int r = 0; r < nranks; ++r)
      EXPECT_EQ(lines(w[r].out), (std::vector<std::vector<std::string>>{{"fallback", "0"}})) << "rank " << r;
  }
}

}  // namespace
