// SPDX-License-Identifier: Apache-2.0
// topo/topo_command.cc - `tpscope topo`.
#include "topo/topo_command.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "allreduce/auto_table.h"
#include "allreduce/tuning.h"
#include "allreduce/wire.h"
#include "tpscope/tpscope.h"

namespace tpscope::cli {

namespace {

std::string orNA(const std::optional<int>& v, const char* prefix = "") {
  return v ? fmt::format("{}{}", prefix, *v) : "N/A";
}

std::string mbps(const std::optional<double>& v) {
  if (!v) return "N/A";
  // Thousands separators, as the study and nvidia-smi users write ceilings (63,015 MB/s).
  std::string digits = fmt::format("{:.0f}", *v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out + " MB/s";
}

std::string pcieText(const std::optional<int>& gen, const std::optional<int>& width) {
  return fmt::format("{} {}", orNA(gen, "Gen"), orNA(width, "x"));
}

// What `auto` would pick here, from the same tune file, host tunables and wire setting (TPSCOPE_WIRE) a
// communicator with a default configuration would read.
AutoSummary autoSummary(const Topology& topo, const std::vector<MediumStatus>& media) {
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  detail::HostTuning host;
  const size_t threshold = detail::resolveHostTuning(cfg, &host) == tpsSuccess ? host.copy_threshold : SIZE_MAX;
  const std::string path = detail::tuneFilePath();
  const detail::AutoTableLoad load = detail::loadAutoTable(path, [&] { return detail::boxFingerprint(topo); });
  std::ifstream f(path);
  const nlohmann::json tune = f ? nlohmann::json::parse(f, nullptr, false) : nlohmann::json();
  return autoSummaryWith(topo, media, load, threshold, std::getenv("TPSCOPE_WIRE"), tune, path);
}

class TopoCommand : public Command {
 public:
  explicit TopoCommand(CLI::App& app) {
    sub_ = app.add_subcommand("topo", "Devices, links, P2P matrix, ceilings, and which AllReduce paths work and why");
    sub_->add_option("-i,--id", devices_, "GPU indices to show, comma-separated (default: all)");
    sub_->add_option("--format", format_, "Output format")
        ->check(CLI::IsMember({"table", "json"}))
        ->capture_default_str();
  }
  CLI::App* subcommand() const override { return sub_; }

  int run() override {
    std::vector<int> ids = parseDeviceList(devices_, "-i");
    Topology topo;
    std::string reason;
    tpsResult_t r = queryTopology(ids, &topo, &reason);
    if (r == tpsInvalidArgument) return fail(kExitUsage, reason);
    if (r != tpsSuccess) return fail(kExitRuntime, "cannot read the topology: " + reason);
    BackendsBuilt built = backendsBuilt();
    std::vector<MediumStatus> media = evaluateMedia(topo, built);
    std::string nccl = built.nccl_version ? ncclVersionString(*built.nccl_version) : "";
    const AutoSummary autos = autoSummary(topo, media);
    if (format_ == "json")
      std::printf("%s\n", topologyDocument(topo, media, nccl, autos).dump(2).c_str());
    else
      std::fputs(formatTopologyTable(topo, media, nccl, autos).c_str(), stdout);
    return kExitOk;
  }

 private:
  CLI::App* sub_ = nullptr;
  std::string devices_;
  std::string format_ = "table";
};

}  // namespace

std::unique_ptr<Command> makeTopoCommand(CLI::App& app) { return std::make_unique<TopoCommand>(app); }

AutoSummary autoSummaryWith(const Topology& topo, const std::vector<MediumStatus>& media,
                            const detail::AutoTableLoad& load, size_t host_copy_threshold, const char* wire_env,
                            const nlohmann::json& tune, const std::string& tune_path) {
  detail::WirePolicy policy;
  std::string refused;
  if (detail::requestedWire(tpsWireExact, 0, wire_env, &policy, &refused) != tpsSuccess)
    policy = detail::WirePolicy{};  // a communicator refuses it: shown as the note, the picks exact
  detail::WireTableLoad wires;
  if (policy.automatic) wires = detail::selectWireTable(tune, tune_path, [&] { return detail::boxFingerprint(topo); });
  AutoSummary s = autoPicks(topo, media, load.table ? &*load.table : nullptr, load.why, host_copy_threshold,
                            [&](uint64_t bytes, tpsBackend_t backend) {
                              return detail::policyWire(policy, wires.table ? &*wires.table : nullptr, bytes, backend);
                            });
  s.wire_policy = detail::wirePolicyText(policy);
  if (!refused.empty())
    s.wire_note = refused + " (a communicator refuses it)";
  else if (policy.automatic)
    s.wire_note = wires.table ? fmt::format("wires measured in tune file {}, {}", tune_path, wires.table->measured)
                              : wires.why + "; every call is exact";
  return s;
}

nlohmann::json topologyDocument(const Topology& topo, const std::vector<MediumStatus>& media,
                                const std::string& nccl_version, const AutoSummary& autos) {
  nlohmann::json doc = tpscope::topologyDocument(topo, media, nccl_version);
  doc["allreduce_auto"] = toJson(autos);
  return doc;
}

std::string formatTopologyTable(const Topology& topo, const std::vector<MediumStatus>& media,
                                const std::string& nccl_version, const AutoSummary& autos) {
  std::string s;
  auto cudaVer = [](int v) { return v ? fmt::format("{}.{}", v / 1000, (v % 1000) / 10) : std::string("N/A"); };
  s += fmt::format("# tpscope topo: {} GPU{} | driver {} | CUDA driver {}, runtime {} | NCCL {}\n", topo.gpus.size(),
                   topo.gpus.size() == 1 ? "" : "s", topo.driver_version.empty() ? "N/A" : topo.driver_version,
                   cudaVer(topo.cuda_driver_version), cudaVer(topo.cuda_runtime_version),
                   nccl_version.empty() ? "N/A" : nccl_version);
  if (!topo.nvml_available) s += fmt::format("# NVML unavailable: {}; link fields show N/A\n", topo.nvml_reason);
  s += "# Ceilings are per direction: PCIe from max generation x max width, NVLink links up x link rate.\n";
  s += fmt::format("{:>3}  {:<26} {:<13} {:>10}  {:<9} {:<9} {:>12}  {:>6} {:>12} {:>14}  {:>3}  {}\n", "GPU", "Name",
                   "Bus Id", "Memory", "PCIe now", "PCIe max", "PCIe ceil", "NVLink", "Link rate", "NVLink ceil", "CEs",
                   "Host atomics");
  for (const GpuInfo& g : topo.gpus) {
    s += fmt::format("{:>3}  {:<26} {:<13} {:>6.1f} GiB  {:<9} {:<9} {:>12}  {:>6} {:>12} {:>14}  {:>3}  {}\n", g.index,
                     g.name.substr(0, 26), g.bus_id, g.memory_bytes / double(1ull << 30),
                     pcieText(g.pcie_gen_current, g.pcie_width_current), pcieText(g.pcie_gen_max, g.pcie_width_max),
                     mbps(g.pcie_ceiling_mbps), orNA(g.nvlink_links_up), mbps(g.nvlink_link_rate_mbps),
                     mbps(g.nvlink_ceiling_mbps), g.copy_engines, g.host_native_atomics ? "yes" : "no");
  }
  if (topo.gpus.size() > 1) {
    s += "\n# Links (like nvidia-smi topo -m) and P2P access/atomics (cudaDeviceCanAccessPeer, native P2P atomics)\n";
    s += fmt::format("{:<6}", "");
    for (const GpuInfo& g : topo.gpus) s += fmt::format(" {:>12}", fmt::format("GPU{}", g.index));
    s += "\n";
    for (const auto& row : topo.pairs) {
      s += fmt::format("{:<6}", fmt::format("GPU{}", row.front().from));
      for (const PairInfo& p : row) {
        std::string cell = p.from == p.to ? "X"
                                          : fmt::format("{} {}/{}", linkLabel(p), p.p2p_access ? "OK" : "--",
                                                        p.p2p_atomics ? "OK" : "--");
        s += fmt::format(" {:>12}", cell);
      }
      s += "\n";
    }
    s +=
        "# NV# = NVLink links joining the pair; PIX/PXB = PCIe switch(es); PHB = host bridge; NODE/SYS = across host\n";
    s += "# bridges / NUMA nodes. The pair of OK/-- reads: P2P access / P2P atomics.\n";
  }
  s += "\n# AllReduce paths\n";
  for (const MediumStatus& p : media)
    s += fmt::format("  {:<16} {:<12} {}\n", p.label, mediumStateName(p.state), p.reason);
  s += fmt::format("# auto: what tpsAllReduce picks per call size (bytes per GPU) on this box, \"{}\"\n",
                   autos.fingerprint);
  if (!autos.note.empty()) s += fmt::format("# built-in defaults: {}\n", autos.note);
  if (!autos.tune_file.empty()) s += fmt::format("# {}\n", autos.tune_file);
  s += fmt::format("# wire: {}{}{} (what a bfloat16 call travels as; a backend without that wire runs exact)\n",
                   autos.wire_policy, autos.wire_policy == "exact" ? ", the default" : " from TPSCOPE_WIRE",
                   autos.wire_note.empty() ? "" : "; " + autos.wire_note);
  s += fmt::format("  {:<9} {:<8} {:<18} {:<6} {}\n", "size", "backend", "algorithm", "wire", "from");
  for (const AutoPick& a : autos.picks)
    s += fmt::format("  {:<9} {:<8} {:<18} {:<6} {}\n", detail::bytesLabel(a.bytes),
                     a.backend == tpsBackendAuto ? "none" : tpsBackendName(a.backend), a.algorithm, a.wire,
                     a.source == autos.tune_file ? "tune file" : a.source);
  return s;
}

}  // namespace tpscope::cli
