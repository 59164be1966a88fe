// SPDX-License-Identifier: Apache-2.0
// selector.cc - backend names, TPSCOPE_ALLREDUCE, and the automatic choice.
#include "allreduce/selector.h"

#include <cstring>

namespace tpscope::detail {

bool parseBackendName(std::string_view text, tpsBackend_t* out) {
  static const struct {
    const char* name;
    tpsBackend_t b;
  } kNames[] = {{"auto", tpsBackendAuto}, {"host", tpsBackendHost}, {"p2p", tpsBackendP2p}, {"nccl", tpsBackendNccl}};
  for (const auto& n : kNames)
    if (text == n.name) {
      *out = n.b;
      return true;
    }
  return false;
}

int configBackendValue(const tpsConfig_t& config) {
  static_assert(sizeof(config.backend) == sizeof(int), "a C enum is an int");
  int v = 0;
  std::memcpy(&v, &config.backend, sizeof(v));
  return v;
}

tpsResult_t requestedBackend(int config_backend, const char* env, tpsBackend_t* out, std::string* error) {
  if (config_backend < tpsBackendAuto || config_backend >= tpsNumBackends) {
    *error = "config.backend " + std::to_string(config_backend) + " is not a backend";
    return tpsInvalidArgument;
  }
  if (config_backend != tpsBackendAuto || env == nullptr || *env == '\0') {
    *out = static_cast<tpsBackend_t>(config_backend);
    return tpsSuccess;
  }
  if (!parseBackendName(env, out)) {
    *error = std::string("TPSCOPE_ALLREDUCE=") + env + " is not one of host, p2p, nccl, auto";
    return tpsInvalidArgument;
  }
  return tpsSuccess;
}

tpsBackend_t AutoTable::backendFor(size_t bytes) const {
  for (const AutoRange& r : ranges)
    if (!r.max_bytes || bytes <= *r.max_bytes) return r.backend;
  return tpsBackendAuto;
}

bool isAvailable(const Availability& a, tpsBackend_t b) {
  switch (b) {
    case tpsBackendHost: return a.host;
    case tpsBackendP2p: return a.p2p;
    case tpsBackendNccl: return a.nccl;
    default: return false;
  }
}

tpsBackend_t defaultAuto(const Availability& a) {
  if (a.p2p && a.all_peer_access) return tpsBackendP2p;
  if (a.nccl && a.all_peer_access) return tpsBackendNccl;
  if (a.host) return tpsBackendHost;
  if (a.nccl) return tpsBackendNccl;
  return tpsBackendAuto;
}

tpsBackend_t chooseAuto(const Availability& a, size_t bytes, const AutoTable* table, bool* from_table) {
  const tpsBackend_t measured = table ? table->backendFor(bytes) : tpsBackendAuto;
  const bool use = isAvailable(a, measured);
  if (from_table) *from_table = use;
  return use ? measured : defaultAuto(a);
}

}  // namespace tpscope::detail
