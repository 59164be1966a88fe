// SPDX-License-Identifier: Apache-2.0
// configure.cc - the engine, the box and the records for `tpscope arms`.
#include "experiment/configure.h"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "allreduce/media.h"
#include "engine/gguf.h"
#include "experiment/server_phases.h"
#include "experiment/workload_phases.h"
#include "topology/topology.h"
#include "workload/model_config.h"

namespace tpscope::experiment {

namespace {

// The first line of /proc/cpuinfo that starts with `key`, after its colon; "" where there is none.
std::string cpuinfoField(const std::string& key) {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0 && line.find(':') != std::string::npos) {
      std::string v = line.substr(line.find(':') + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "";
}

// What the manifest says about the machine: the host's name, its kernel, CPU and GPUs, and a
// description a report prints ("2x NVIDIA H200"), from the topology where it was read (`topo` null:
// none was, and the description says what the GPUs were instead, e.g. the fake ones).
nlohmann::json machineRecord(const Topology* topo, const std::string& no_topology) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  utsname u{};
  uname(&u);
  nlohmann::json m = {{"hostname", host},
                      {"os", std::string(u.sysname) + " " + u.release + " " + u.machine},
                      {"cpu", cpuinfoField("model name")}};
  if (topo == nullptr || topo->gpus.empty()) {
    m["description"] = no_topology;
    return m;
  }
  // GPU names in order of first appearance, with their counts: "2x NVIDIA H200".
  std::vector<std::pair<std::string, int>> names;
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuInfo& g : topo->gpus) {
    gpus.push_back(g.name);
    auto it = std::find_if(names.begin(), names.end(), [&](const auto& n) { return n.first == g.name; });
    if (it == names.end())
      names.emplace_back(g.name, 1);
    else
      ++it->second;
  }
  std::string description;
  for (const auto& [name, count] : names)
    description += (description.empty() ? "" : ", ") + fmt::format("{}x {}", count, name);
  m["gpus"] = gpus;
  m["description"] = description + " (" + host + ")";
  return m;
}

Configuration refused(Configuration::Status status, std::string message) {
  Configuration out;
  out.status = status;
  out.message = std::move(message);
  return out;
}

// The GPUs to measure on; false with why there are none.
bool countGpus(int* count, std::string* why) {
  if (cudaDeviceCount(count, why) == tpsSuccess && *count > 0) return true;
  if (why->empty()) *why = "no GPU";
  return false;
}

// The backends this box's media allow, and for each missing one the reason of its first medium.
void readBackends(const std::vector<MediumStatus>& media, Availability* box) {
  for (const MediumStatus& m : media) {
    if (m.state == MediumState::kAvailable) {
      if (std::find(box->backends.begin(), box->backends.end(), m.backend) == box->backends.end())
        box->backends.push_back(m.backend);
    } else if (!box->backend_reasons.count(m.backend)) {
      box->backend_reasons[m.backend] = m.reason;
    }
  }
  for (tpsBackend_t b : box->backends) box->backend_reasons.erase(b);
}

// Host staging's needs of a GPU, as the media check states them (src/allreduce/media.cc): pinned host
// memory it can map, and compute capability 7.0+ for the flag wait. Tensor positions sharing one GPU
// need nothing more, so they can run on a box of one GPU, where the media check (two GPUs) says no.
bool hostOnSharedGpu(const Topology& topo) {
  if (topo.gpus.empty()) return false;
  for (const GpuInfo& g : topo.gpus)
    if (!g.can_map_host_memory || g.cc_major < 7) return false;
  return true;
}

// True when `path` is a GGUF file llama.cpp can load, else false with the one-line error in *why.
bool isGguf(const std::string& path, std::string* why) {
  engine::GgufHeader header;
  return engine::readGgufHeader(path, &header, why);
}

// The synthetic transformer on this box's GPUs, or with fake_workload on none.
Configuration configureWorkload(Configuration out, const ConfigureOptions& o) {
  RunnerConfig& c = out.config;
  if (o.fake_workload) {
    if (!o.fake_meter)
      return refused(Configuration::Status::kUsage,
                     "--fake-workload needs TPSCOPE_METER_FAKE=1 (the fake workload runs on no GPU)");
    c.box.gpu_count = o.fake_gpus;
    if (o.fake_gpus >= 2) c.box.backends = {tpsBackendHost, tpsBackendP2p, tpsBackendNccl};
    c.box.host_on_shared_gpu = true;
    c.versions["workload"] = "fake (--fake-workload)";
    c.machine = machineRecord(nullptr, o.fake_gpus == 2 ? std::string("fake GPUs (--fake-workload)")
                                                        : fmt::format("{} fake GPUs (--fake-workload)", o.fake_gpus));
    c.make_phases = [](const EffectiveSettings& arm) { return makeFakeArmPhases(arm); };
    return out;
  }
  std::string why;
  if (!countGpus(&c.box.gpu_count, &why)) return refused(Configuration::Status::kNoGpu, why);
  Topology topo;
  if (queryTopology({}, &topo, &why) == tpsSuccess) {
    const BackendsBuilt built = backendsBuilt();
    const std::vector<MediumStatus> media = evaluateMedia(topo, built);
    readBackends(media, &c.box);
    c.box.host_on_shared_gpu = hostOnSharedGpu(topo);
    c.topology = topologyDocument(topo, media, built.nccl_version ? ncclVersionString(*built.nccl_version) : "");
    c.machine = machineRecord(&topo, "");
  } else {
    c.box.backends = {tpsBackendHost};
  }
  c.decide = workloadDecisions;
  c.make_phases = [](const EffectiveSettings&) { return makeWorkloadArmPhases(); };
  return out;
}

// A server or a command: its binary, model and GPUs checked before the runner starts anything.
Configuration configureEngine(Configuration out, const ConfigureOptions& o) {
  RunnerConfig& c = out.config;
  EngineSettings& e = c.spec.shared.engine;
  // The meter needs the GPUs; the fake meter gives it two scripted ones (tests, CI).
  if (o.fake_meter) {
    c.box.gpu_count = 2;
    c.machine = machineRecord(nullptr, "fake meter GPUs (TPSCOPE_METER_FAKE=1)");
  } else {
    std::string why;
    if (!countGpus(&c.box.gpu_count, &why)) return refused(Configuration::Status::kNoGpu, why);
    Topology topo;
    if (queryTopology({}, &topo, &why) == tpsSuccess) c.machine = machineRecord(&topo, "");
  }
  // The server itself says which split modes it implements (a mode it lists but lacks fails to load).
  c.box.split_modes = {"none", "layer", "tensor", "row"};
  if (e.engine == Engine::kLlamaServer) {
    if (e.server.empty()) {
      const char* env = std::getenv("TPSCOPE_LLAMA_SERVER");
      e.server = env ? env : "";
    }
    if (e.server.empty())
      return refused(Configuration::Status::kUsage,
                     "name the llama-server to run: server = \"PATH\" in [experiment], or TPSCOPE_LLAMA_SERVER=PATH "
                     "(scripts/llama/build-llama-server --print-path builds the pinned one)");
    std::string why;
    if (!isGguf(e.model, &why)) return refused(Configuration::Status::kUsage, why);
    auto checkDraft = [&](const std::optional<std::string>& d) {
      return !d || *d == "self" || *d == "none" || isGguf(*d, &why);
    };
    if (!checkDraft(c.spec.shared.base.draft)) return refused(Configuration::Status::kUsage, why);
    for (const ArmSpec& a : c.spec.arms)
      if (!checkDraft(a.delta.draft)) return refused(Configuration::Status::kUsage, why);
  }
  c.versions["engine"] = engineName(e.engine);
  std::vector<std::string> visible;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && *v) {
    std::stringstream ss(v);
    for (std::string item; std::getline(ss, item, ',');) visible.push_back(item);
  }
  const std::string dir = c.out_dir;
  const EngineSettings settings = e;
  if (e.engine == Engine::kLlamaServer) {
    c.make_phases = [settings, dir, visible](const EffectiveSettings&) {
      return makeServerArmPhases(settings, dir, visible);
    };
    c.probe = true;
    c.tail_seconds = 1;
  } else {
    c.make_phases = [settings, dir](const EffectiveSettings&) { return makeCommandArmPhases(settings, dir); };
  }
  return out;
}

}  // namespace

Configuration configure(const ExperimentSpec& spec, const ConfigureOptions& o) {
  Configuration out;
  out.status = Configuration::Status::kReady;
  RunnerConfig& c = out.config;
  c.spec = spec;
  if (o.fake_meter)
    c.start_meter = [](const MeterOptions& m, std::unique_ptr<Meter>* meter, std::string* reason) {
      MeterOptions fake = m;
      fake.fake_gpus = true;
      return Meter::start(fake, meter, reason);
    };
  c.out_dir = o.out_dir;
  c.progress = o.progress;
  c.versions = o.versions;
  c.invocation = o.invocation;
  c.machine = machineRecord(nullptr, "GPUs not read");
  c.box.split_modes = {"none", "layer", "tensor"};
  c.box.presets = workload::presetNames();
  if (spec.shared.engine.engine == Engine::kSynthetic) return configureWorkload(std::move(out), o);
  return configureEngine(std::move(out), o);
}

}  // namespace tpscope::experiment
