// SPDX-License-Identifier: Apache-2.0
// media.h - which AllReduce media work on a set of GPUs, and why (the last block of `tpscope topo`).
//
// A medium is a way for the bytes to travel: staged through pinned host memory, peer-to-peer over
// NVLink, peer-to-peer over PCIe, or NCCL (which picks its own transport); not a path, which is the
// algorithm one backend ran (tpsPath_t in tpscope.h). Each medium gets a state and a one-sentence
// reason. The evaluation is a pure function of the topology and of what this build contains, so it is
// unit-tested without GPUs.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "allreduce/selector.h"
#include "allreduce/wire_codec.h"
#include "topology/topology.h"

namespace tpscope {

enum class MediumState {
  kAvailable,    // hardware and backend are both there
  kUnavailable,  // the hardware (or library) cannot do it: reason says what is missing
  kNotBuilt,     // the hardware can, but this build has no backend for it yet
};

struct MediumStatus {
  std::string id;     // "host", "p2p_nvlink", "p2p_pcie", "nccl"
  std::string label;  // "host staging", ...
  MediumState state = MediumState::kUnavailable;
  std::string reason;
  tpsBackend_t backend = tpsBackendAuto;  // the backend that moves bytes over it
};

// What this build contains.
struct BackendsBuilt {
  bool host = false;
  bool p2p = false;
  bool nccl = false;
  std::optional<int> nccl_version;  // ncclGetVersion(), e.g. 22803; nullopt when NCCL does not load
};

// The backends compiled into this library, with NCCL's run-time version.
BackendsBuilt backendsBuilt();
// "2.28.3" from 22803.
std::string ncclVersionString(int code);

std::vector<MediumStatus> evaluateMedia(const Topology& topo, const BackendsBuilt& built);
const char* mediumStateName(MediumState s);  // "available", "unavailable", "not built"
nlohmann::json toJson(const std::vector<MediumStatus>& media);
// The topology as `tpscope topo --format json` writes it, with this build's version, NCCL's ("" when it
// does not load: null) and the media.
nlohmann::json topologyDocument(const Topology& topo, const std::vector<MediumStatus>& media,
                                const std::string& nccl_version);

// What `auto` picks for one call size, and from where.
struct AutoPick {
  uint64_t bytes = 0;                     // per GPU
  tpsBackend_t backend = tpsBackendAuto;  // tpsBackendAuto: nothing can run
  std::string algorithm;                  // p2p: "LL one-shot" | "one-shot" | "two-shot"; host: "kernel" |
                                          // "copy engines"; nccl: "NCCL's choice"; "-" when nothing runs
  std::string source;                     // "built-in default" | "tune file PATH, measured DATE"
  std::string wire = "exact";             // what a bfloat16 call travels as (wire.h's names); "-" when nothing runs
};

// `auto` for a set of GPUs, as `tpscope topo` shows it.
struct AutoSummary {
  std::string fingerprint;  // this box, as a tune file records it (detail::boxFingerprint)
  std::string note;         // why no tune file table applies ("no tune file at ..."); empty when one does
  std::string tune_file;    // "tune file PATH, measured DATE" when one does; empty otherwise
  std::vector<AutoPick> picks;
  std::string wire_policy = "exact";  // what the calls ask for (TPSCOPE_WIRE: "exact", "int8", "auto:0.01")
  std::string wire_note;              // auto without a wire table, or a TPSCOPE_WIRE refused: why; else empty
};

// The call sizes `tpscope topo` shows: 8 KiB (decode) to 1 GiB.
const std::vector<uint64_t>& autoSizeClasses();

// What `auto` picks per size class on `topo`, without a communicator: availability from `media` (the
// peer-access matrix decides p2p), the choice from the selector (selector.h) with `table` (may be null,
// already matched to this box) and `why_no_table` as the note; `host_copy_threshold` names the host path.
// `wire` (empty: exact) is the wire a call of that size on the picked backend asks for; the pick's
// algorithm is the one that carries it, and the pick's wire what that algorithm travels as (exact where the backend has
// no such wire).
AutoSummary autoPicks(const Topology& topo, const std::vector<MediumStatus>& media, const detail::AutoTable* table,
                      const std::string& why_no_table, size_t host_copy_threshold,
                      const std::function<detail::WireCode(uint64_t bytes, tpsBackend_t backend)>& wire = {});
nlohmann::json toJson(const AutoSummary& summary);

}  // namespace tpscope
