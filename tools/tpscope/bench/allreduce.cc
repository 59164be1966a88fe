// SPDX-License-Identifier: Apache-2.0
// bench/allreduce.cc - `tpscope bench allreduce`: an nccl-tests-compatible AllReduce sweep over the
// library's backends, interleaved size by size in one process so their ratios are measured side by side.
//
// The pieces: bench/args.h (options and their checks), bench/bench_runner.h (GPU timing), bench/check.h
// (-c 1), bench/stats.h (path and bytes columns), bench/table.h (text and JSON). This file wires them
// together. --tune runs bench/tune.h (the host backend's tunables), then bench/crossover.h (the fastest
// backend per size, for `auto`), then bench/wire_tune.h (each wire's time and error per size, for
// TPSCOPE_WIRE=auto) instead of the sweep; where ranks share a GPU, only the last. --procs N runs the sweep
// again with each rank a process of its own (bench/procs.h: this binary re-run per rank as the hidden
// `bench allreduce-rank`), after the sweep with every rank in this process, so that both stand in one table.
#include "bench/allreduce.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <limits>

#include "allreduce/auto_table.h"
#include "allreduce/media.h"
#include "allreduce/tuning.h"
#include "bench/args.h"
#include "bench/bench_runner.h"
#include "bench/crossover.h"
#include "bench/procs.h"
#include "bench/table.h"
#include "bench/tune.h"
#include "bench/wire_tune.h"
#include "cli.h"
#include "topology/topology.h"
#include "tpscope/tpscope.h"

namespace tpscope::cli {

namespace {

// `tpscope bench` groups benchmarks; the first bench subcommand registered creates it.
CLI::App* benchGroup(CLI::App& app) {
  try {
    return app.get_subcommand("bench");
  } catch (const CLI::OptionNotFound&) {
    CLI::App* bench = app.add_subcommand("bench", "Benchmarks that print nccl-tests-style tables and JSON");
    bench->require_subcommand(1);
    return bench;
  }
}

std::string utcNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Every size of every type, backends and within each backend the wires interleaved within each size; rows
// appended in measuring order, so a failure part-way leaves the rows measured before it.
void runSweep(AllReduceBench& bench, const BenchOptions& o, const std::vector<uint64_t>& sizes,
              const std::function<void(const BenchRow&)>& on_row, std::vector<BenchRow>* rows) {
  for (const ProcsItem& i : sweepItems(o, sizes))
    for (tpsWire_t w : o.wires) {
      // NCCL on symmetric windows is NCCL's own AllReduce: it has no wire but the dtype's.
      if (i.backend == kBenchNcclSymm && w != o.wires.front()) continue;
      rows->push_back(bench.measure(i.backend, i.dtype, i.count, w));
      on_row(rows->back());
    }
}

// This binary, for the --procs ranks.
std::string selfExe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot find this program's path (/proc/self/exe) to start the ranks");
  return std::string(buf, static_cast<size_t>(n));
}

std::string hexOf(const tpsUniqueId& id) {
  std::string s;
  for (char c : id.internal) s += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return s;
}

// The same sweep with each rank a process of its own; rows (marked procs) appended as the ranks report.
void runProcsSweep(const BenchOptions& o, const std::vector<uint64_t>& sizes, bool shared,
                   const std::function<void(const BenchRow&)>& on_row, std::vector<BenchRow>* rows) {
  tpsUniqueId id;
  if (tpsGetUniqueId(&id) != tpsSuccess) throw std::runtime_error("tpsGetUniqueId failed");
  ProcsPlan plan;
  plan.id_hex = hexOf(id);
  plan.devices = o.devices;
  plan.shared_devices = shared;
  plan.iters = o.iters, plan.warmup_iters = o.warmup_iters, plan.graph_replays = o.graph_replays;
  plan.graph = o.graph, plan.check = o.check;
  // nccl-symm is NCCL's own AllReduce, measured by this process beside the library's; not across processes.
  for (const ProcsItem& i : sweepItems(o, sizes))
    if (i.backend != kBenchNcclSymm) plan.items.push_back(i);
  if (plan.items.empty()) return;
  // The ranks report when they are done; their own waits are bounded (spin and bootstrap timeouts), so
  // this limit only catches a rank stuck outside the library.
  const auto results = runProcsPlan(plan, selfExe(), 3600.0);
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const int calls = o.graph ? o.iters * o.graph_replays : o.iters;
    if (std::optional<BenchRow> row = procsRow(plan.items[i], results[i], o.graph, calls)) {
      rows->push_back(*row);
      on_row(rows->back());
    } else {
      std::printf("# procs: backend %s is not available across processes here\n",
                  tpsBackendName(plan.items[i].backend));
    }
  }
}

// The hidden `tpscope bench allreduce-rank`: one rank of --procs.
class BenchAllReduceRankCommand : public Command {
 public:
  explicit BenchAllReduceRankCommand(CLI::App& app) {
    sub_ = benchGroup(app)->add_subcommand("allreduce-rank", "One rank of 'bench allreduce --procs' (internal)");
    sub_->group("");  // hidden from --help
    sub_->add_option("--plan", plan_, "The plan the parent wrote")->required();
    sub_->add_option("--rank", rank_, "This process's rank")->required();
    sub_->add_option("--out", out_, "Where to write one JSON line per measurement")->required();
  }
  CLI::App* subcommand() const override { return sub_; }
  int run() override { return runProcsRank(plan_, rank_, out_); }

 private:
  CLI::App* sub_ = nullptr;
  std::string plan_, out_;
  int rank_ = -1;
};

class BenchAllReduceCommand : public Command {
 public:
  explicit BenchAllReduceCommand(CLI::App& app) {
    sub_ = benchGroup(app)->add_subcommand(
        "allreduce", "AllReduce sweep over sizes and backends, nccl-tests table (all_reduce_perf flags)");
    min_opt_ = sub_->add_option("-b,--minbytes", min_bytes_, "Smallest size, bytes per GPU (K/M/G suffixes)")
                   ->capture_default_str();
    max_opt_ = sub_->add_option("-e,--maxbytes", max_bytes_, "Largest size, bytes per GPU")->capture_default_str();
    factor_opt_ = sub_->add_option("-f,--stepfactor", factor_, "Multiply the size by this; 1: add -i")
                      ->check(CLI::Range(1, 1 << 20))
                      ->capture_default_str();
    step_opt_ = sub_->add_option("-i,--stepbytes", step_bytes_, "Add this many bytes per step (with -f 1)");
    sub_->add_option("-n,--iters", o_.iters, "Timed calls per size (calls per graph with --graph)")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    sub_->add_option("-w,--warmup_iters", o_.warmup_iters, "Untimed calls before each size")
        ->check(CLI::Range(0, 100000))
        ->capture_default_str();
    sub_->add_option("-c,--check", check_, "Check every element against a host reference (0/1)")
        ->check(CLI::Range(0, 1))
        ->capture_default_str();
    sub_->add_option("-d,--datatype", dtype_, "float|half|bfloat16 (f32|f16|bf16) or all")->capture_default_str();
    sub_->add_option("-o,--op", op_, "Reduction (sum only)")->check(CLI::IsMember({"sum"}))->capture_default_str();
    auto* g = sub_->add_option("-g,--ngpus", ngpus_, "Use the first N GPUs (default: all, at most 8)")
                  ->check(CLI::Range(1, 1024));
    sub_->add_option("--devices", devices_, "GPU indices, comma-separated (instead of -g)")->excludes(g);
    sub_->add_option("--backend", backends_,
                     "host, p2p, nccl, auto, comma-separated, or all; nccl-symm: NCCL on symmetric windows beside them")
        ->capture_default_str();
    wire_opt_ = sub_->add_option("--wire", wires_,
                                 "Wires to measure side by side: exact, bf16, int8, fp8, int4, comma-separated, or "
                                 "all (default: exact, or TPSCOPE_WIRE's)");
    sub_->add_flag("--graph", o_.graph, "Time CUDA-graph launches of -n captured calls");
    sub_->add_flag(
        "!--no-meter", o_.meter,
        "Do not meter each size's bytes per call on PCIe and NVLink (the meter runs by default, eager only)");
    sub_->add_option("--graph-replays", o_.graph_replays, "Timed launches of each graph")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    sub_->add_option("-J,--json", o_.json_path, "Also write the results as JSON to FILE");
    sub_->add_flag("--tune", tune_,
                   "Instead of the sweep: measure the host backend's tunables, the fastest backend per size and "
                   "each wire's time and error per size (-b 8K -e 1G unless given) here, and write the tuning file "
                   "that auto and TPSCOPE_WIRE=auto:BUDGET read");
    sub_->add_option("--format", format_, "Output on stdout")
        ->check(CLI::IsMember({"table", "json"}))
        ->capture_default_str();
    sub_->add_option("--procs", o_.procs,
                     "Also run the sweep with each of N ranks a process of its own (tpsCommInitRank), rows "
                     "'procs' beside 'threads'; ranks share GPUs where there are fewer (shared_devices)");
  }
  CLI::App* subcommand() const override { return sub_; }
  int run() override;

 private:
  BenchOptions parseOptions();
  BenchContext context(const Topology& topo) const;
  // The GPUs given by -g or --devices (empty: none given), in the order given.
  std::vector<int> givenDevices() const;

  CLI::App* sub_ = nullptr;
  CLI::Option* min_opt_ = nullptr;
  CLI::Option* max_opt_ = nullptr;
  CLI::Option* factor_opt_ = nullptr;
  CLI::Option* step_opt_ = nullptr;
  CLI::Option* wire_opt_ = nullptr;
  BenchOptions o_;
  std::string min_bytes_ = "8K", max_bytes_ = "256M", step_bytes_ = "1M";
  int check_ = 1, factor_ = 2;  // ints, not unsigned: CLI11 would wrap "-1" to 2^64 - 1
  bool tune_ = false;
  int ngpus_ = 0;
  std::string dtype_ = "bfloat16", op_ = "sum", devices_, backends_ = "host,nccl", format_ = "table", wires_;
};

BenchOptions BenchAllReduceCommand::parseOptions() {
  BenchOptions o = o_;
  o.sweep.min_bytes = parseSizeFlag(min_bytes_, "-b");
  o.sweep.max_bytes = parseSizeFlag(max_bytes_, "-e");
  o.sweep.step_bytes = parseSizeFlag(step_bytes_, "-i");
  o.sweep.step_factor = static_cast<uint64_t>(factor_);
  if (step_opt_->count() > 0) {
    // nccl-tests adds -i when -f is 1; -i alone means that too, and -i beside -f > 1 is a contradiction.
    if (factor_opt_->count() > 0 && o.sweep.step_factor != 1)
      throw UsageError("-i steps by bytes and -f by a factor: give -f 1 -i BYTES, or -f alone");
    o.sweep.step_factor = 1;
  }
  o.check = check_ == 1;
  o.dtypes = parseDataTypes(dtype_);
  o.backends = parseBackends(backends_);
  if (wire_opt_->count() > 0) {
    o.wires = parseWires(wires_);
    o.wires_given = true;
  }
  // Config wire 0 means "TPSCOPE_WIRE, else exact": with it set, the exact wire's communicator would not be.
  if (const char* env = std::getenv("TPSCOPE_WIRE"); env && *env && (o.wires_given || tune_))
    throw UsageError("TPSCOPE_WIRE=" + std::string(env) + " would set the wire of every communicator: unset it to " +
                     (tune_ ? "tune" : "compare wires with --wire"));
  o.json_stdout = format_ == "json";
  return o;
}

std::vector<int> BenchAllReduceCommand::givenDevices() const {
  if (!devices_.empty()) return parseDeviceList(devices_, "--devices");
  std::vector<int> out;
  for (int g = 0; g < ngpus_; ++g) out.push_back(g);
  return out;
}

BenchContext BenchAllReduceCommand::context(const Topology& topo) const {
  BenchContext c;
  c.version = tpsGetVersion();
  c.git_sha = tpsGetGitRevision();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  c.hostname = host;
  c.pid = static_cast<int>(getpid());
  c.start_time = utcNow();
  c.argv = processArgv();
  // One entry per rank (ranks that share a GPU name it each); the topology lists each GPU once.
  for (size_t r = 0; r < o_.devices.size(); ++r)
    for (const auto& g : topo.gpus)
      if (g.index == o_.devices[r]) {
        c.devices.push_back({static_cast<int>(r), g.index, g.bus_id, g.name});
        break;
      }
  if (o_.procs > 0) c.procs_devices = o_.devices;
  c.driver_version = topo.driver_version;
  c.cuda_driver_version = topo.cuda_driver_version;
  c.cuda_runtime_version = topo.cuda_runtime_version;
  BackendsBuilt built = backendsBuilt();
  if (built.nccl_version) c.nccl_version = ncclVersionString(*built.nccl_version);
  for (const std::string& name : benchEnvNames())
    if (const char* v = std::getenv(name.c_str())) c.env.emplace_back(name, v);
  c.options = o_;
  return c;
}

int BenchAllReduceCommand::run() {
  o_ = parseOptions();
  if (tune_) {
    // The crossovers span decode sizes to the largest tensor-parallel activations: 8K to 1G unless given.
    if (min_opt_->count() == 0) o_.sweep.min_bytes = 8u << 10;
    if (max_opt_->count() == 0) o_.sweep.max_bytes = 1u << 30;
  }
  const std::vector<uint64_t> sizes = sizeSweep(o_.sweep);
  size_t max_bytes = 0;
  for (tpsDataType_t t : o_.dtypes) max_bytes = std::max(max_bytes, sweepCounts(sizes, t).back() * tpsDataTypeSize(t));
  // NVLink multicast must never be used by tpscope (it is off on our machines): refuse it, default it off.
  if (const char* nvls = std::getenv("NCCL_NVLS_ENABLE"); nvls && std::string(nvls) != "0")
    throw UsageError("NCCL_NVLS_ENABLE=" + std::string(nvls) +
                     ": tpscope never uses NVLink multicast; unset it or set 0");
  setenv("NCCL_NVLS_ENABLE", "0", 0);

  // Flag errors first, so a bad command line is a usage error even on a machine without GPUs.
  if (o_.procs != 0) {
    if (tune_) throw UsageError("--procs runs the sweep, --tune measures instead of it: give one of them");
    if (o_.wires_given && (o_.wires.size() > 1 || o_.wires.front() != tpsWireExact))
      throw UsageError("--procs measures the exact wire only: drop --wire, or --procs to compare wires");
    procsDevices(o_.procs, givenDevices(), std::numeric_limits<int>::max());
  } else if (ngpus_ != 0 || !devices_.empty()) {
    resolveDevices(ngpus_, devices_, std::numeric_limits<int>::max());
  }
  int visible = 0;
  std::string reason;
  if (cudaDeviceCount(&visible, &reason) != tpsSuccess) return fail(kExitRuntime, reason);
  if (o_.procs != 0 && ngpus_ > visible)
    return fail(kExitUsage, fmt::format("-g {} asks for {} GPUs; this machine shows {}", ngpus_, ngpus_, visible));
  o_.devices =
      o_.procs != 0 ? procsDevices(o_.procs, givenDevices(), visible) : resolveDevices(ngpus_, devices_, visible);
  // Ranks that share a GPU (--procs with fewer GPUs than ranks): both sweeps say shared_devices. The meter
  // reads each GPU once and gives its bytes per rank it holds (bench_runner.cc).
  const bool shared = ranksShareGpus(o_.devices);
  std::vector<int> gpus;
  for (int d : o_.devices)
    if (std::find(gpus.begin(), gpus.end(), d) == gpus.end()) gpus.push_back(d);
  Topology topo;
  tpsResult_t r = queryTopology(gpus, &topo, &reason);
  if (r == tpsInvalidArgument) return fail(kExitUsage, reason);
  if (r != tpsSuccess) return fail(kExitRuntime, "cannot read the topology: " + reason);
  if (tune_) {
    std::string path = detail::tuneFilePath();
    if (!shared) {
      TuneResult tuned;
      if (int rc = runHostTune(o_.devices, stdout, &tuned); rc != 0) return rc;
      if (int rc = runCrossoverTune(o_.devices, detail::boxFingerprint(topo), sizes, o_, tuned.path, utcNow(), stdout);
          rc != 0)
        return rc;
      path = tuned.path;
    } else {
      std::printf(
          "# tune: ranks share a GPU: the host tunables and the crossovers need a GPU per rank; measuring the wires "
          "only\n");
    }
    // The box as a communicator over these ranks sees it (a GPU named once per rank), so that its
    // TPSCOPE_WIRE=auto finds the table.
    Topology ranks;
    if (tpsResult_t q = queryTopology(o_.devices, &ranks, &reason); q != tpsSuccess)
      return fail(kExitRuntime, "cannot read the topology: " + reason);
    return runWireTuneOnGpus(o_.devices, detail::boxFingerprint(ranks), sizes, o_, path, utcNow(), stdout);
  }
  std::ofstream json_file;
  if (!o_.json_path.empty()) {
    json_file.open(o_.json_path);
    if (!json_file) return fail(kExitRuntime, "cannot write " + o_.json_path + ": check the folder exists");
  }

  tpsConfig_t shared_config;
  tpsConfigInit(&shared_config);
  shared_config.shared_devices = 1;
  auto bench = std::make_unique<AllReduceBench>(o_.devices, max_bytes, o_, shared ? &shared_config : nullptr);
  std::vector<tpsBackend_t> usable;
  for (tpsBackend_t b : o_.backends) {
    if (bench->available(b)) {
      usable.push_back(b);
    } else if (backends_ != "all" && b != kBenchNcclSymm && !shared) {  // nccl-symm: N/A with its reason
      return fail(kExitRuntime, fmt::format("backend {} is not available on these GPUs with this build ('tpscope topo' "
                                            "says why; TPSCOPE_ALLREDUCE, if set, limits the backends)",
                                            tpsBackendName(b)));
    }
  }
  if (usable.empty()) return fail(kExitRuntime, "no backend of --backend all can run here ('tpscope topo' says why)");
  o_.backends = usable;
  BenchContext ctx = context(topo);
  ctx.communicator = bench->config();
  ctx.nccl_symm = bench->ncclSymmInfo();
  // The rate the host backend's algbw is judged by (its target: >= 80 % from 64 MiB), from this run's box.
  const double d2h = pinnedCopyRateGBps(o_.devices[0], true, 256u << 20);
  const double h2d = pinnedCopyRateGBps(o_.devices[0], false, 256u << 20);
  if (d2h > 0) ctx.pinned_d2h_gbps = d2h;
  if (h2d > 0) ctx.pinned_h2d_gbps = h2d;
  const bool table = !o_.json_stdout;
  if (table) std::fputs((formatPreamble(ctx) + formatHeader()).c_str(), stdout);
  std::fflush(stdout);
  const bool progress = !table && isatty(STDERR_FILENO);  // JSON on stdout: show progress on a terminal
  std::vector<BenchRow> rows;
  std::string stopped;  // a runtime error part-way: the rows so far are still printed and written
  const auto on_row = [&](const BenchRow& row) {
    if (table) std::fputs(formatRow(row).c_str(), stdout);
    std::fflush(stdout);  // rows appear as they are measured, like all_reduce_perf
    if (progress)
      std::fprintf(stderr, "\r# %s %s %s %llu B done   ", benchBackendName(row.backend), row.wire.c_str(),
                   tpsDataTypeName(row.dtype), static_cast<unsigned long long>(row.bytes()));
  };
  try {
    runSweep(*bench, o_, sizes, on_row, &rows);
    ctx.nccl_symm = bench->ncclSymmInfo();  // with NCCL's estimates for the sizes measured
    bench.reset();                          // the ranks' processes get the GPUs to themselves
    if (o_.procs != 0) runProcsSweep(o_, sizes, shared, on_row, &rows);
  } catch (const std::exception& e) {
    stopped = e.what();
  }
  if (progress) std::fputs("\n", stderr);
  if (table) {
    std::string tail = stopped.empty() ? "" : "# Stopped early: " + stopped + "\n";
    tail += formatFooter(rows, o_.backends);
    if (o_.backends.size() > 1) {
      const tpsBackend_t ref = ratioReference(o_.backends);
      const std::string first_wire = rows.empty() ? "exact" : rows.front().wire;
      tail += formatRatios(timeRatios(rows, o_.backends, ref, first_wire), o_.backends, ref);
    }
    tail += formatWireRatios(rows);
    tail += formatProcsRatios(rows);
    std::fputs(tail.c_str(), stdout);
  }
  if (bench) ctx.nccl_symm = bench->ncclSymmInfo();  // the sweep stopped early
  const nlohmann::json doc = benchDocument(ctx, rows, stopped);
  if (o_.json_stdout) std::printf("%s\n", doc.dump(2).c_str());
  if (json_file.is_open()) json_file << doc.dump(2) << "\n";
  if (!stopped.empty()) return fail(kExitRuntime, stopped);
  uint64_t wrong = 0;
  for (const BenchRow& row : rows) wrong += row.check ? row.check->wrong : 0;
  if (wrong) return fail(kExitRuntime, fmt::format("{} elements were wrong (the #wrong column says where)", wrong));
  return kExitOk;
}

}  // namespace

std::unique_ptr<Command> makeBenchAllReduceCommand(CLI::App& app) {
  return std::make_unique<BenchAllReduceCommand>(app);
}

std::unique_ptr<Command> makeBenchAllReduceRankCommand(CLI::App& app) {
  return std::make_unique<BenchAllReduceRankCommand>(app);
}

}  // namespace tpscope::cli
