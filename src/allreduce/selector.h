// SPDX-License-Identifier: Apache-2.0
// selector.h - which backend a communicator uses, and which one carries each call.
//
// The choice is pure logic over what is available, so it is unit-tested without GPUs:
//   1. a forced backend (config field, else TPSCOPE_ALLREDUCE) is used for every call, or creation
//      fails with the reason it cannot run; an unknown TPSCOPE_ALLREDUCE value is an error;
//   2. `auto` picks per call: p2p where it is built and every pair has peer access, else NCCL where
//      every pair has peer access (its NVLink/P2P transport beats staging), else host staging.
#pragma once

#include <string>
#include <string_view>

#include "tpscope/tpscope.h"

namespace tpscope::detail {

// "host" | "p2p" | "nccl" | "auto" (case-sensitive, as documented). False for anything else.
bool parseBackendName(std::string_view text, tpsBackend_t* out);

// The backend requested for a communicator: config.backend unless it is auto, then TPSCOPE_ALLREDUCE
// (`env`, may be null). tpsInvalidArgument with *error set for an unknown value.
tpsResult_t requestedBackend(tpsBackend_t config_backend, const char* env, tpsBackend_t* out, std::string* error);

struct Availability {
  bool host = false;
  bool p2p = false;
  bool nccl = false;
  bool all_peer_access = false;
};

// The backend `auto` uses for a call of `bytes` per GPU; tpsBackendAuto when nothing is available.
tpsBackend_t chooseAuto(const Availability& a, size_t bytes);

}  // namespace tpscope::detail
