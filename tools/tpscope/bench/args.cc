// SPDX-License-Identifier: Apache-2.0
// bench/args.cc - size sweeps, type and backend names, device sets for `tpscope bench allreduce`.
#include "bench/args.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "allreduce/wire.h"
#include "bench/nccl_symm.h"
#include "cli.h"
#include "common/param.h"

namespace tpscope::cli {

std::vector<uint64_t> sizeSweep(const SweepSpec& spec) {
  if (spec.min_bytes == 0) throw UsageError("-b is 0: give the smallest size in bytes per GPU, like 8K");
  if (spec.min_bytes > spec.max_bytes)
    throw UsageError(
        fmt::format("-b {} is larger than -e {}: the sweep would be empty", spec.min_bytes, spec.max_bytes));
  if (spec.step_factor == 0) throw UsageError("-f is 0: give a factor of 2 or more, or -f 1 with -i BYTES");
  if (spec.step_factor == 1 && spec.step_bytes == 0) throw UsageError("-i is 0 with -f 1: the sweep would not advance");
  std::vector<uint64_t> sizes;
  for (uint64_t s = spec.min_bytes; s <= spec.max_bytes;) {
    if (sizes.size() == kMaxSweepSizes)
      throw UsageError(
          fmt::format("the sweep has more than {} sizes: raise -f or -i, or narrow -b/-e", kMaxSweepSizes));
    sizes.push_back(s);
    const bool multiply = spec.step_factor > 1;
    if (multiply ? s > UINT64_MAX / spec.step_factor : s > UINT64_MAX - spec.step_bytes) break;  // past 2^64
    s = multiply ? s * spec.step_factor : s + spec.step_bytes;
  }
  return sizes;
}

std::vector<size_t> sweepCounts(const std::vector<uint64_t>& sizes, tpsDataType_t dtype) {
  const size_t elem = tpsDataTypeSize(dtype);
  std::vector<size_t> counts;
  for (uint64_t s : sizes) {
    const size_t c = static_cast<size_t>(s / elem);
    if (c == 0)
      throw UsageError(
          fmt::format("size {} B is smaller than one {} element ({} B): raise -b", s, tpsDataTypeName(dtype), elem));
    if (counts.empty() || counts.back() != c) counts.push_back(c);
  }
  return counts;
}

std::vector<tpsDataType_t> parseDataTypes(const std::string& text) {
  struct Name {
    const char* name;
    tpsDataType_t type;
  };
  static const Name kNames[] = {{"float", tpsFloat32},     {"f32", tpsFloat32},  {"float32", tpsFloat32},
                                {"half", tpsFloat16},      {"f16", tpsFloat16},  {"float16", tpsFloat16},
                                {"bfloat16", tpsBfloat16}, {"bf16", tpsBfloat16}};
  if (text == "all") return {tpsFloat32, tpsFloat16, tpsBfloat16};
  for (const Name& n : kNames)
    if (text == n.name) return {n.type};
  throw UsageError("unknown datatype '" + text + "' for -d: give float, half, bfloat16 (or f32, f16, bf16), or all");
}

std::vector<tpsBackend_t> parseBackends(const std::string& text) {
  if (text == "all") return {tpsBackendHost, tpsBackendP2p, tpsBackendNccl};
  std::vector<tpsBackend_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::optional<tpsBackend_t> b;
    for (int i = 0; i < tpsNumBackends; ++i)
      if (item == tpsBackendName(static_cast<tpsBackend_t>(i))) b = static_cast<tpsBackend_t>(i);
    if (item == benchBackendName(kBenchNcclSymm)) b = kBenchNcclSymm;
    if (!b)
      throw UsageError("unknown backend '" + item +
                       "' in --backend: give host, p2p, nccl, auto or nccl-symm, comma-separated, or all");
    if (std::find(out.begin(), out.end(), *b) != out.end())
      throw UsageError("backend '" + item + "' appears twice in --backend");
    out.push_back(*b);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<tpsWire_t> parseWires(const std::string& text) {
  using detail::WireCode;
  std::vector<tpsWire_t> out;
  if (text == "all") {
    for (WireCode w : detail::allWires()) out.push_back(static_cast<tpsWire_t>(w));
    return out;
  }
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::optional<WireCode> w = detail::parseWireName(item);
    if (!w) {
      if (item.rfind("auto", 0) == 0)
        throw UsageError("--wire measures wires; '" + item +
                         "' is a policy over them: give it through TPSCOPE_WIRE without --wire, or list the wires");
      throw UsageError("unknown wire '" + item +
                       "' in --wire: give exact, bf16, int8, fp8, int4, comma-separated, or all");
    }
    if (std::find(out.begin(), out.end(), static_cast<tpsWire_t>(*w)) != out.end())
      throw UsageError("wire '" + item + "' appears twice in --wire");
    out.push_back(static_cast<tpsWire_t>(*w));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

uint64_t parseSizeFlag(const std::string& text, const std::string& flag) {
  std::optional<uint64_t> v = parseBytes(text);
  if (!v) throw UsageError("bad size '" + text + "' for " + flag + ": give bytes like 8192, 8K, 256M or 1G");
  return *v;
}

std::vector<int> resolveDevices(int ngpus, const std::string& list, int visible) {
  std::vector<int> devices;
  if (!list.empty()) {
    devices = parseDeviceList(list, "--devices", /*repeats=*/true);  // "0,0": ranks share GPU 0
  } else if (ngpus != 0) {
    if (ngpus > visible)
      throw UsageError(fmt::format("-g {} asks for {} GPUs; this machine shows {}", ngpus, ngpus, visible));
    for (int i = 0; i < ngpus; ++i) devices.push_back(i);
  } else {
    // Not a usage error: the command line is fine, the machine lacks GPUs.
    if (visible < 2) throw std::runtime_error(fmt::format("an AllReduce needs 2 GPUs; this machine shows {}", visible));
    for (int i = 0; i < std::min(visible, TPS_MAX_DEVICES); ++i) devices.push_back(i);
  }
  const int n = static_cast<int>(devices.size());
  if (n < 2 || n > TPS_MAX_DEVICES)
    throw UsageError(fmt::format("{} GPU{} given: an AllReduce spans 2 to {} GPUs (-g N or --devices 0,1)", n,
                                 n == 1 ? "" : "s", TPS_MAX_DEVICES));
  return devices;
}

tpsBackend_t ratioReference(const std::vector<tpsBackend_t>& backends) {
  if (std::find(backends.begin(), backends.end(), tpsBackendNccl) != backends.end()) return tpsBackendNccl;
  return backends.empty() ? tpsBackendNccl : backends.front();
}

}  // namespace tpscope::cli
