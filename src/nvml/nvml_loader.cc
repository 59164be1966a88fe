// SPDX-License-Identifier: Apache-2.0
// nvml_loader.cc - dlopen/dlsym of NVML, once per process.
#include "nvml/nvml_loader.h"

#include <dlfcn.h>

#include <cstdlib>

#include "common/log.h"

namespace tpscope::nvml {

namespace {

struct Symbol {
  const char* name;
  void** slot;
  bool required;
};

template <typename F>
void** slotOf(F* fn) {
  return reinterpret_cast<void**>(fn);
}

struct State {
  Api api;
  bool ok = false;
  std::string reason;
};

State& state() {
  static State s = [] {
    State st;
    const char* override_path = std::getenv("TPSCOPE_NVML_LIBRARY");
    const char* path = (override_path && *override_path) ? override_path : "libnvidia-ml.so.1";
    void* handle = nullptr;
    if (!loadApi(path, &st.api, &handle, &st.reason)) return st;
    nvmlReturn_t r = st.api.init();
    if (r != NVML_SUCCESS) {
      st.reason = std::string("NVML could not start (nvmlInit_v2: ") + st.api.errorString(r) +
                  "): the NVIDIA driver is not loaded or no GPU is visible";
      return st;
    }
    // NVML stays initialised until exit: the meter and topology share it, and nvmlShutdown at exit
    // would race with a sampler thread still reading.
    st.ok = true;
    return st;
  }();
  return s;
}

}  // namespace

bool loadApi(const char* path, Api* api, void** handle, std::string* reason) {
  *api = Api{};
  *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (*handle == nullptr) {
    const char* err = dlerror();
    *reason = std::string(path) + " could not be loaded (" + (err ? err : "unknown error") +
              "): no NVIDIA driver on this machine, so NVML counters cannot be read";
    return false;
  }
  const Symbol symbols[] = {
      {"nvmlInit_v2", slotOf(&api->init), true},
      {"nvmlShutdown", slotOf(&api->shutdown), true},
      {"nvmlErrorString", slotOf(&api->errorString), true},
      {"nvmlDeviceGetHandleByPciBusId_v2", slotOf(&api->deviceGetHandleByPciBusId), true},
      {"nvmlDeviceGetFieldValues", slotOf(&api->deviceGetFieldValues), true},
      {"nvmlSystemGetDriverVersion", slotOf(&api->systemGetDriverVersion), false},
      {"nvmlDeviceGetCount_v2", slotOf(&api->deviceGetCount), false},
      {"nvmlDeviceGetHandleByIndex_v2", slotOf(&api->deviceGetHandleByIndex), false},
      {"nvmlDeviceGetName", slotOf(&api->deviceGetName), false},
      {"nvmlDeviceGetPciInfo_v3", slotOf(&api->deviceGetPciInfo), false},
      {"nvmlDeviceGetCurrPcieLinkGeneration", slotOf(&api->deviceGetCurrPcieLinkGeneration), false},
      {"nvmlDeviceGetMaxPcieLinkGeneration", slotOf(&api->deviceGetMaxPcieLinkGeneration), false},
      {"nvmlDeviceGetCurrPcieLinkWidth", slotOf(&api->deviceGetCurrPcieLinkWidth), false},
      {"nvmlDeviceGetMaxPcieLinkWidth", slotOf(&api->deviceGetMaxPcieLinkWidth), false},
      {"nvmlDeviceGetNvLinkState", slotOf(&api->deviceGetNvLinkState), false},
      {"nvmlDeviceGetNvLinkRemotePciInfo_v2", slotOf(&api->deviceGetNvLinkRemotePciInfo), false},
      {"nvmlDeviceGetNvLinkRemoteDeviceType", slotOf(&api->deviceGetNvLinkRemoteDeviceType), false},
      {"nvmlDeviceGetTopologyCommonAncestor", slotOf(&api->deviceGetTopologyCommonAncestor), false},
      {"nvmlDeviceGetP2PStatus", slotOf(&api->deviceGetP2PStatus), false},
      {"nvmlDeviceGetPcieThroughput", slotOf(&api->deviceGetPcieThroughput), false},
      {"nvmlDeviceGetComputeRunningProcesses_v3", slotOf(&api->deviceGetComputeRunningProcesses), false},
      {"nvmlDeviceGetMemoryInfo", slotOf(&api->deviceGetMemoryInfo), false},
      {"nvmlDeviceGetUUID", slotOf(&api->deviceGetUUID), false},
  };
  for (const Symbol& s : symbols) {
    *s.slot = dlsym(*handle, s.name);
    if (*s.slot == nullptr && s.required) {
      *reason = std::string(path) + " has no " + s.name + ": the driver is too old for tpscope";
      dlclose(*handle);
      *handle = nullptr;
      *api = Api{};
      return false;
    }
    if (*s.slot == nullptr) TPS_LOG_INFO("NVML symbol {} not found; features that use it report N/A", s.name);
  }
  reason->clear();
  return true;
}

const Api* Nvml::get() {
  State& s = state();
  return s.ok ? &s.api : nullptr;
}

const std::string& Nvml::unavailableReason() { return state().reason; }

std::string Nvml::driverVersion() {
  const Api* api = get();
  if (api == nullptr || api->systemGetDriverVersion == nullptr) return {};
  char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (api->systemGetDriverVersion(buf, sizeof(buf)) != NVML_SUCCESS) return {};
  return buf;
}

std::string Nvml::errorString(nvmlReturn_t r) {
  const Api* api = get();
  if (api != nullptr) return api->errorString(r);
  return "NVML error " + std::to_string(static_cast<int>(r));
}

}  // namespace tpscope::nvml
