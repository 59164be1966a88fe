// SPDX-License-Identifier: Apache-2.0
// nvml_loader.h - NVML loaded with dlopen at run time, as a table of function pointers.
//
// The binary links no NVML, so it starts on a machine without a driver and can say why it cannot
// measure. "Not available" is a value: Nvml::get() returns the table or nullptr, and
// Nvml::unavailableReason() says why in one sentence. Symbols marked optional may be null on older
// drivers; callers treat a null entry like NVML_ERROR_FUNCTION_NOT_FOUND.
//
// The library path is libnvidia-ml.so.1 unless TPSCOPE_NVML_LIBRARY names another (tests use that).
// Loading and nvmlInit_v2 happen once per process, on the first get(); NVML is thread-safe after it.
#pragma once

#include <nvml.h>

#include <string>

namespace tpscope::nvml {

struct Api {
  // Required: loading fails without these.
  decltype(&::nvmlInit_v2) init = nullptr;
  decltype(&::nvmlShutdown) shutdown = nullptr;
  decltype(&::nvmlErrorString) errorString = nullptr;
  decltype(&::nvmlDeviceGetHandleByPciBusId_v2) deviceGetHandleByPciBusId = nullptr;
  decltype(&::nvmlDeviceGetFieldValues) deviceGetFieldValues = nullptr;
  // Optional.
  decltype(&::nvmlSystemGetDriverVersion) systemGetDriverVersion = nullptr;
  decltype(&::nvmlDeviceGetCount_v2) deviceGetCount = nullptr;
  decltype(&::nvmlDeviceGetHandleByIndex_v2) deviceGetHandleByIndex = nullptr;
  decltype(&::nvmlDeviceGetName) deviceGetName = nullptr;
  decltype(&::nvmlDeviceGetPciInfo_v3) deviceGetPciInfo = nullptr;
  decltype(&::nvmlDeviceGetCurrPcieLinkGeneration) deviceGetCurrPcieLinkGeneration = nullptr;
  decltype(&::nvmlDeviceGetMaxPcieLinkGeneration) deviceGetMaxPcieLinkGeneration = nullptr;
  decltype(&::nvmlDeviceGetCurrPcieLinkWidth) deviceGetCurrPcieLinkWidth = nullptr;
  decltype(&::nvmlDeviceGetMaxPcieLinkWidth) deviceGetMaxPcieLinkWidth = nullptr;
  decltype(&::nvmlDeviceGetNvLinkState) deviceGetNvLinkState = nullptr;
  decltype(&::nvmlDeviceGetNvLinkRemotePciInfo_v2) deviceGetNvLinkRemotePciInfo = nullptr;
  decltype(&::nvmlDeviceGetNvLinkRemoteDeviceType) deviceGetNvLinkRemoteDeviceType = nullptr;
  decltype(&::nvmlDeviceGetTopologyCommonAncestor) deviceGetTopologyCommonAncestor = nullptr;
  decltype(&::nvmlDeviceGetP2PStatus) deviceGetP2PStatus = nullptr;
  decltype(&::nvmlDeviceGetPcieThroughput) deviceGetPcieThroughput = nullptr;
  decltype(&::nvmlDeviceGetComputeRunningProcesses_v3) deviceGetComputeRunningProcesses = nullptr;
  decltype(&::nvmlDeviceGetMemoryInfo) deviceGetMemoryInfo = nullptr;
  decltype(&::nvmlDeviceGetUUID) deviceGetUUID = nullptr;
};

class Nvml {
 public:
  // The process-wide table, loaded and initialised on first use; nullptr when NVML is not available.
  static const Api* get();
  // Why get() returned nullptr ("libnvidia-ml.so.1 not found: no NVIDIA driver on this machine");
  // empty when NVML is available.
  static const std::string& unavailableReason();
  // The driver version ("580.159.04"), or empty when NVML is not available.
  static std::string driverVersion();
  // Text for an NVML status, also when NVML is not loaded.
  static std::string errorString(nvmlReturn_t r);
};

// Loads a table from `path` without initialising NVML. Returns false and sets *reason on failure.
// Separate from Nvml::get() so tests can load a missing or bogus library and check the reason.
bool loadApi(const char* path, Api* api, void** handle, std::string* reason);

}  // namespace tpscope::nvml
