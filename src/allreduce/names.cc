// SPDX-License-Identifier: Apache-2.0
// names.cc - printable names and sizes for the C API's enums.
#include <cstring>

#include "allreduce/registry.h"
#include "tpscope/tpscope.h"

// One line per name: the switches read as tables.
// clang-format off

extern "C" const char* tpsBackendName(tpsBackend_t b) {
  switch (b) {
    case tpsBackendAuto: return "auto";
    case tpsBackendHost: return "host";
    case tpsBackendP2p: return "p2p";
    case tpsBackendNccl: return "nccl";
    default: return "unknown";
  }
}

// clang-format on

// Paths are the registry's algorithms (allreduce/registry.h): tpsPath_t names the first ones.
extern "C" int tpsGetPathCount(void) { return static_cast<int>(tpscope::detail::algorithms().size()); }

extern "C" const char* tpsGetPathName(int path) {
  const tpscope::detail::AlgorithmInfo* a = tpscope::detail::algorithmOf(path);
  return a ? a->name : nullptr;
}

extern "C" int tpsGetPathByName(const char* name) { return name == nullptr ? -1 : tpscope::detail::pathByName(name); }

extern "C" const char* tpsPathName(tpsPath_t p) {
  // A C caller may pass any int; read it as one before it is a tpsPath_t in C++.
  static_assert(sizeof(p) == sizeof(int), "a C enum is an int");
  int v = 0;
  std::memcpy(&v, &p, sizeof(v));
  const char* name = tpsGetPathName(v);
  return name ? name : "unknown";
}

// clang-format off

extern "C" const char* tpsDataTypeName(tpsDataType_t t) {
  switch (t) {
    case tpsFloat32: return "float";
    case tpsFloat16: return "half";
    case tpsBfloat16: return "bfloat16";
    default: return "unknown";
  }
}

extern "C" size_t tpsDataTypeSize(tpsDataType_t t) {
  switch (t) {
    case tpsFloat32: return 4;
    case tpsFloat16:
    case tpsBfloat16: return 2;
    default: return 0;
  }
}

extern "C" int tpsSizeClassOf(size_t bytes) {
  const size_t limits[TPS_NUM_SIZE_CLASSES - 1] = {64u << 10, 1u << 20, 16u << 20, 256u << 20};
  for (int c = 0; c < TPS_NUM_SIZE_CLASSES - 1; ++c)
    if (bytes <= limits[c]) return c;
  return TPS_NUM_SIZE_CLASSES - 1;
}

extern "C" const char* tpsSizeClassName(int c) {
  static const char* kNames[TPS_NUM_SIZE_CLASSES] = {"<=64KiB", "<=1MiB", "<=16MiB", "<=256MiB", ">256MiB"};
  return c >= 0 && c < TPS_NUM_SIZE_CLASSES ? kNames[c] : "unknown";
}
// clang-format on
