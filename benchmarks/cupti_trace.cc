// SPDX-License-Identifier: Apache-2.0
// cupti_trace - a timeline of every copy and kernel a CUDA program runs, for where a call's time goes when
// no Nsight Systems is at hand: a CUDA injection library (the driver loads it into the program when
// CUDA_INJECTION64_PATH names it) that records CUPTI's memcpy and kernel activity and writes one JSON
// object a line to TPSCOPE_TRACE_OUT (default cupti_trace.jsonl) at exit:
//   {"kind":"memcpy","dir":"DtoH","bytes":N,"start_ns":T0,"end_ns":T1,"device":0,"stream":S}
//   {"kind":"kernel","name":"...","start_ns":T0,"end_ns":T1,"device":0,"stream":S}
// Timestamps are the GPU's, in ns, comparable within one run.
//
//   CUDA_INJECTION64_PATH=build/lib/libtpscope_cupti_trace.so TPSCOPE_TRACE_OUT=t.jsonl tpscope bench ...
//   scripts/trace_summary.py t.jsonl
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

std::mutex g_mu;
std::vector<std::string> g_lines;

const char* copyKind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    default: return "other";
  }
}

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8u << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI bufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  char line[512];
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      std::snprintf(line, sizeof(line),
                    "{\"kind\":\"memcpy\",\"dir\":\"%s\",\"bytes\":%llu,\"start_ns\":%llu,\"end_ns\":%llu,"
                    "\"device\":%u,\"stream\":%u}",
                    copyKind(m->copyKind), static_cast<unsigned long long>(m->bytes),
                    static_cast<unsigned long long>(m->start), static_cast<unsigned long long>(m->end), m->deviceId,
                    m->streamId);
      g_lines.emplace_back(line);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      std::snprintf(line, sizeof(line),
                    "{\"kind\":\"kernel\",\"name\":\"%.200s\",\"start_ns\":%llu,\"end_ns\":%llu,\"device\":%u,"
                    "\"stream\":%u}",
                    k->name ? k->name : "?", static_cast<unsigned long long>(k->start),
                    static_cast<unsigned long long>(k->end), k->deviceId, k->streamId);
      g_lines.emplace_back(line);
    }
  }
  std::free(buffer);
}

void writeOut() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("TPSCOPE_TRACE_OUT");
  std::FILE* f = std::fopen(path ? path : "cupti_trace.jsonl", "w");
  if (f == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mu);
  for (const std::string& l : g_lines) std::fprintf(f, "%s\n", l.c_str());
  std::fclose(f);
}

}  // namespace

// The driver calls this once, when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted) != CUPTI_SUCCESS) return 0;
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  std::atexit(writeOut);
  return 1;
}
