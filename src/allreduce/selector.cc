// SPDX-License-Identifier: Apache-2.0
// selector.cc - backend names, TPSCOPE_ALLREDUCE, and the automatic choice.
#include "allreduce/selector.h"

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

tpsResult_t requestedBackend(tpsBackend_t config_backend, const char* env, tpsBackend_t* out, std::string* error) {
  if (config_backend < tpsBackendAuto || config_backend >= tpsNumBackends) {
    *error = "config.backend " + std::to_string(static_cast<int>(config_backend)) + " is not a backend";
    return tpsInvalidArgument;
  }
  if (config_backend != tpsBackendAuto || env == nullptr || *env == '\0') {
    *out = config_backend;
    return tpsSuccess;
  }
  if (!parseBackendName(env, out)) {
    *error = std::string("TPSCOPE_ALLREDUCE=") + env + " is not one of host, p2p, nccl, auto";
    return tpsInvalidArgument;
  }
  return tpsSuccess;
}

tpsBackend_t chooseAuto(const Availability& a, size_t /*bytes*/) {
  // Crossover points by size arrive with the measured tuning of AllReduce part 2; until then the
  // order below holds at every size on the boxes we measured (docs/PERFORMANCE.md).
  if (a.p2p && a.all_peer_access) return tpsBackendP2p;
  if (a.nccl && a.all_peer_access) return tpsBackendNccl;
  if (a.host) return tpsBackendHost;
  if (a.nccl) return tpsBackendNccl;
  return tpsBackendAuto;
}

}  // namespace tpscope::detail
