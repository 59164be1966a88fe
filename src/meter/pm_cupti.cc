// SPDX-License-Identifier: Apache-2.0
// pm_cupti.cc - PM sampling through CUPTI (cuptiPmSampling* with the profiler host API), loaded at
// run time.
//
// libcupti is dlopened (TPSCOPE_CUPTI_LIBRARY, else $CUDA_HOME's, the toolkit's, the
// nvidia-cuda-cupti wheel's, else the loader's search), so the binary runs without it and says why
// PM is unavailable: no library, no rights (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: profiling restricted
// to admins), or another profiler or PM session on the device (one session per device).
//
// Per GPU: the host object (chip name + counter availability) turns the metric names into a config
// image; the device object samples every interval (GPU time trigger, keep-oldest hardware buffer) and
// decode() moves the completed records into a counter-data image, evaluates each record's metrics and
// reinitialises the image. Timestamps come back as CLOCK_REALTIME nanoseconds (CUPTI converts the GPU
// clock), so sourceNow() is CLOCK_REALTIME.
#include <dlfcn.h>
#include <time.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "meter/source.h"

#if __has_include(<cupti_pmsampling.h>) && __has_include(<cupti_profiler_host.h>)
#define TPSCOPE_HAVE_CUPTI_PM 1
#include <cuda_runtime_api.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_result.h>
#include <cupti_target.h>
#endif

namespace tpscope::detail {

#ifndef TPSCOPE_HAVE_CUPTI_PM

tpsResult_t openCuptiPmReaders(const MeterOptions&, const std::vector<MeterGpu>&,
                               std::vector<std::unique_ptr<PmReader>>*, std::string* reason) {
  *reason = "PM sampling is unavailable: tpscope was built without CUPTI's PM-sampling headers (CUDA 12.6+)";
  return tpsUnavailable;
}

std::vector<std::string> listCuptiPmMetrics(int, std::string* reason) {
  *reason = "built without CUPTI's PM-sampling headers";
  return {};
}

#else

namespace {

// Bytes the GPU sends ([0], PCIe TX) and receives ([1], PCIe RX), summed over the chip.
const char* const kMetrics[2] = {"pcie__write_bytes.sum", "pcie__read_bytes.sum"};
// 512 MiB: no overflow from 1 ms down to 2 us on H200; configuration takes ~0.3 s.
constexpr size_t kHardwareBuffer = size_t{512} << 20;

#define TPS_CUPTI_FUNCS(X)                     \
  X(cuptiGetResultString)                      \
  X(cuptiProfilerInitialize)                   \
  X(cuptiDeviceGetChipName)                    \
  X(cuptiProfilerHostInitialize)               \
  X(cuptiProfilerHostDeinitialize)             \
  X(cuptiProfilerHostConfigAddMetrics)         \
  X(cuptiProfilerHostGetConfigImageSize)       \
  X(cuptiProfilerHostGetConfigImage)           \
  X(cuptiProfilerHostGetBaseMetrics)           \
  X(cuptiProfilerHostEvaluateToGpuValues)      \
  X(cuptiPmSamplingEnable)                     \
  X(cuptiPmSamplingDisable)                    \
  X(cuptiPmSamplingSetConfig)                  \
  X(cuptiPmSamplingStart)                      \
  X(cuptiPmSamplingStop)                       \
  X(cuptiPmSamplingDecodeData)                 \
  X(cuptiPmSamplingGetCounterAvailability)     \
  X(cuptiPmSamplingGetCounterDataSize)         \
  X(cuptiPmSamplingCounterDataImageInitialize) \
  X(cuptiPmSamplingGetCounterDataInfo)         \
  X(cuptiPmSamplingCounterDataGetSampleInfo)

struct Cupti {
#define TPS_DECL(name) decltype(&::name) name = nullptr;
  TPS_CUPTI_FUNCS(TPS_DECL)
#undef TPS_DECL
  std::string path;
};

// A parameter struct zeroed with its size set, as every CUPTI profiler call takes.
template <typename T>
T params(size_t size) {
  T p{};
  p.structSize = size;
  return p;
}

std::string err(const Cupti& c, CUptiResult r) {
  const char* s = nullptr;
  if (c.cuptiGetResultString) c.cuptiGetResultString(r, &s);
  std::string out = s ? s : "CUPTI error " + std::to_string(static_cast<int>(r));
  if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
    out +=
        " (GPU profiling is restricted to admins: run as root, or load nvidia with "
        "NVreg_RestrictProfilingToAdminUsers=0)";
  if (r == CUPTI_ERROR_INVALID_OPERATION || r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ||
      r == CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED)
    out += " (another profiler or PM-sampling session may hold the device: one session per device)";
  return out;
}

std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* p = std::getenv("TPSCOPE_CUPTI_LIBRARY"); p && *p) return {p};
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* h = std::getenv(env); h && *h) {
      out.push_back(std::string(h) + "/extras/CUPTI/lib64/libcupti.so");
      out.push_back(std::string(h) + "/lib64/libcupti.so");
    }
  for (const char* p : {"/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib64/libcupti.so",
                        "/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so"})
    out.push_back(p);
  // The nvidia-cuda-cupti wheel in the system python (site-packages/nvidia/cuda_cupti/lib).
  for (const char* py : {"/usr/local/lib/python3.12/dist-packages", "/usr/lib/python3/dist-packages",
                         "/usr/local/lib/python3.12/site-packages"}) {
    out.push_back(std::string(py) + "/nvidia/cuda_cupti/lib/libcupti.so.13");
    out.push_back(std::string(py) + "/nvidia/cuda_cupti/lib/libcupti.so.12");
    out.push_back(std::string(py) + "/nvidia/cu13/lib/libcupti.so.13");
  }
  out.push_back("libcupti.so");
  out.push_back("libcupti.so.13");
  out.push_back("libcupti.so.12");
  return out;
}

// Loaded and initialised once per process; nullptr with the reason when not available.
const Cupti* loadCupti(std::string* reason) {
  static std::string why;
  static const Cupti* api = []() -> const Cupti* {
    void* h = nullptr;
    std::string tried, path;
    for (const std::string& p : candidates()) {
      h = dlopen(p.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (h) {
        path = p;
        break;
      }
      if (tried.size() < 200) tried += (tried.empty() ? "" : ", ") + p;
    }
    if (!h) {
      why = "libcupti not found (tried " + tried +
            "): install the CUDA toolkit's CUPTI, pip install nvidia-cuda-cupti, or set CUDA_HOME / "
            "TPSCOPE_CUPTI_LIBRARY";
      return nullptr;
    }
    auto* c = new Cupti;
    c->path = path;
#define TPS_LOAD(name)                                                                 \
  c->name = reinterpret_cast<decltype(c->name)>(dlsym(h, #name));                      \
  if (!c->name) {                                                                      \
    why = path + " has no " #name ": PM sampling needs CUPTI from CUDA 12.6 or later"; \
    delete c;                                                                          \
    return nullptr;                                                                    \
  }
    TPS_CUPTI_FUNCS(TPS_LOAD)
#undef TPS_LOAD
    auto p = params<CUpti_Profiler_Initialize_Params>(CUpti_Profiler_Initialize_Params_STRUCT_SIZE);
    if (CUptiResult r = c->cuptiProfilerInitialize(&p); r != CUPTI_SUCCESS) {
      why = "cuptiProfilerInitialize: " + err(*c, r);
      delete c;
      return nullptr;
    }
    return c;
  }();
  if (!api) *reason = why;
  return api;
}

// The chip name and counter availability of a device, and a host object for PM sampling.
struct Host {
  const Cupti* c = nullptr;
  CUpti_Profiler_Host_Object* obj = nullptr;
  std::string chip;
  std::vector<uint8_t> availability;
  ~Host() {
    if (obj) {
      auto p = params<CUpti_Profiler_Host_Deinitialize_Params>(CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE);
      p.pHostObject = obj;
      c->cuptiProfilerHostDeinitialize(&p);
    }
  }
  bool init(const Cupti* api, int device, std::string* reason) {
    c = api;
    auto cn = params<CUpti_Device_GetChipName_Params>(CUpti_Device_GetChipName_Params_STRUCT_SIZE);
    cn.deviceIndex = static_cast<size_t>(device);
    if (CUptiResult r = c->cuptiDeviceGetChipName(&cn); r != CUPTI_SUCCESS) {
      *reason = "cuptiDeviceGetChipName: " + err(*c, r);
      return false;
    }
    chip = cn.pChipName ? cn.pChipName : "";
    auto ca = params<CUpti_PmSampling_GetCounterAvailability_Params>(
        CUpti_PmSampling_GetCounterAvailability_Params_STRUCT_SIZE);
    ca.deviceIndex = static_cast<size_t>(device);
    if (CUptiResult r = c->cuptiPmSamplingGetCounterAvailability(&ca); r != CUPTI_SUCCESS) {
      *reason = "cuptiPmSamplingGetCounterAvailability: " + err(*c, r);
      return false;
    }
    availability.assign(ca.counterAvailabilityImageSize, 0);
    ca.pCounterAvailabilityImage = availability.data();
    if (CUptiResult r = c->cuptiPmSamplingGetCounterAvailability(&ca); r != CUPTI_SUCCESS) {
      *reason = "cuptiPmSamplingGetCounterAvailability: " + err(*c, r);
      return false;
    }
    auto hi = params<CUpti_Profiler_Host_Initialize_Params>(CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE);
    hi.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING;
    hi.pChipName = chip.c_str();
    hi.pCounterAvailabilityImage = availability.data();
    if (CUptiResult r = c->cuptiProfilerHostInitialize(&hi); r != CUPTI_SUCCESS) {
      *reason = "cuptiProfilerHostInitialize (" + chip + "): " + err(*c, r);
      return false;
    }
    obj = hi.pHostObject;
    return true;
  }
};

class CuptiPmReader : public PmReader {
 public:
  CuptiPmReader(const Cupti* c, int device, int64_t interval_us, int64_t decode_ms)
      : c_(c), device_(device), interval_us_(interval_us), decode_ms_(decode_ms) {}
  ~CuptiPmReader() override {
    stop();
    if (obj_) {
      auto p = params<CUpti_PmSampling_Disable_Params>(CUpti_PmSampling_Disable_Params_STRUCT_SIZE);
      p.pPmSamplingObject = obj_;
      c_->cuptiPmSamplingDisable(&p);
    }
  }

  int64_t sourceNow() const override {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  }

  // Everything up to SetConfig (which takes ~0.3 s with the 512 MiB buffer): errors surface at
  // Meter::start with the reason.
  bool configure(std::string* reason) {
    if (!host_.init(c_, device_, reason)) return false;
    auto am =
        params<CUpti_Profiler_Host_ConfigAddMetrics_Params>(CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE);
    am.pHostObject = host_.obj;
    am.ppMetricNames = const_cast<const char**>(kMetrics);
    am.numMetrics = 2;
    if (CUptiResult r = c_->cuptiProfilerHostConfigAddMetrics(&am); r != CUPTI_SUCCESS) {
      *reason = std::string("cuptiProfilerHostConfigAddMetrics(") + kMetrics[0] + ", " + kMetrics[1] + ") on " +
                host_.chip + ": " + err(*c_, r);
      return false;
    }
    auto cs = params<CUpti_Profiler_Host_GetConfigImageSize_Params>(
        CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE);
    cs.pHostObject = host_.obj;
    if (CUptiResult r = c_->cuptiProfilerHostGetConfigImageSize(&cs); r != CUPTI_SUCCESS) {
      *reason = "cuptiProfilerHostGetConfigImageSize: " + err(*c_, r);
      return false;
    }
    config_.assign(cs.configImageSize, 0);
    auto ci = params<CUpti_Profiler_Host_GetConfigImage_Params>(CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE);
    ci.pHostObject = host_.obj;
    ci.configImageSize = config_.size();
    ci.pConfigImage = config_.data();
    if (CUptiResult r = c_->cuptiProfilerHostGetConfigImage(&ci); r != CUPTI_SUCCESS) {
      *reason = "cuptiProfilerHostGetConfigImage: " + err(*c_, r);
      return false;
    }
    auto en = params<CUpti_PmSampling_Enable_Params>(CUpti_PmSampling_Enable_Params_STRUCT_SIZE);
    en.deviceIndex = static_cast<size_t>(device_);
    CUptiResult r = c_->cuptiPmSamplingEnable(&en);
    if (r != CUPTI_SUCCESS && r != CUPTI_ERROR_INSUFFICIENT_PRIVILEGES && r != CUPTI_ERROR_INVALID_OPERATION) {
      // Some drivers want the device's context to exist: make the primary one, then try again.
      cudaSetDevice(device_);
      cudaFree(nullptr);
      r = c_->cuptiPmSamplingEnable(&en);
    }
    if (r != CUPTI_SUCCESS) {
      *reason = "cuptiPmSamplingEnable: " + err(*c_, r);
      return false;
    }
    obj_ = en.pPmSamplingObject;
    auto sc = params<CUpti_PmSampling_SetConfig_Params>(CUpti_PmSampling_SetConfig_Params_STRUCT_SIZE);
    sc.pPmSamplingObject = obj_;
    sc.configSize = config_.size();
    sc.pConfig = config_.data();
    sc.hardwareBufferSize = kHardwareBuffer;
    sc.samplingInterval = static_cast<uint64_t>(interval_us_) * 1000;
    sc.triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
    sc.hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;
    if (CUptiResult r2 = c_->cuptiPmSamplingSetConfig(&sc); r2 != CUPTI_SUCCESS) {
      *reason = "cuptiPmSamplingSetConfig (" + std::to_string(interval_us_) + " us): " + err(*c_, r2);
      return false;
    }
    // A counter-data image holding 4 decode periods of records; a fuller buffer decodes again.
    auto ds =
        params<CUpti_PmSampling_GetCounterDataSize_Params>(CUpti_PmSampling_GetCounterDataSize_Params_STRUCT_SIZE);
    ds.pPmSamplingObject = obj_;
    ds.pMetricNames = const_cast<const char**>(kMetrics);
    ds.numMetrics = 2;
    ds.maxSamples = static_cast<uint32_t>(std::max<int64_t>(1000, 4 * decode_ms_ * 1000 / interval_us_));
    if (CUptiResult r2 = c_->cuptiPmSamplingGetCounterDataSize(&ds); r2 != CUPTI_SUCCESS) {
      *reason = "cuptiPmSamplingGetCounterDataSize: " + err(*c_, r2);
      return false;
    }
    data_.assign(ds.counterDataSize, 0);
    return initData(reason);
  }

  bool start(std::string* reason) override {
    auto p = params<CUpti_PmSampling_Start_Params>(CUpti_PmSampling_Start_Params_STRUCT_SIZE);
    p.pPmSamplingObject = obj_;
    if (CUptiResult r = c_->cuptiPmSamplingStart(&p); r != CUPTI_SUCCESS) {
      *reason = "cuptiPmSamplingStart: " + err(*c_, r);
      return false;
    }
    running_ = true;
    return true;
  }

  void decode(PmBatch* out) override {
    if (dead_) return;
    for (int round = 0; round < 64; ++round) {
      auto dd = params<CUpti_PmSampling_DecodeData_Params>(CUpti_PmSampling_DecodeData_Params_STRUCT_SIZE);
      dd.pPmSamplingObject = obj_;
      dd.pCounterDataImage = data_.data();
      dd.counterDataImageSize = data_.size();
      CUptiResult r = c_->cuptiPmSamplingDecodeData(&dd);
      if (r == CUPTI_ERROR_OUT_OF_MEMORY || dd.overflow) {
        collect(out);  // what was decoded before the overflow is good
        out->overflow = true;
        dead_ = true;
        return;
      }
      if (r != CUPTI_SUCCESS) {
        out->error = "cuptiPmSamplingDecodeData: " + err(*c_, r);
        dead_ = true;
        return;
      }
      if (!collect(out)) {
        dead_ = true;
        return;
      }
      std::string why;
      if (!initData(&why)) {
        out->error = why;
        dead_ = true;
        return;
      }
      if (dd.decodeStopReason != CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL) return;
    }
  }

  void stop() override {
    if (!running_) return;
    running_ = false;
    auto p = params<CUpti_PmSampling_Stop_Params>(CUpti_PmSampling_Stop_Params_STRUCT_SIZE);
    p.pPmSamplingObject = obj_;
    c_->cuptiPmSamplingStop(&p);
  }

 private:
  bool initData(std::string* reason) {
    auto ip = params<CUpti_PmSampling_CounterDataImage_Initialize_Params>(
        CUpti_PmSampling_CounterDataImage_Initialize_Params_STRUCT_SIZE);
    ip.pPmSamplingObject = obj_;
    ip.counterDataSize = data_.size();
    ip.pCounterData = data_.data();
    if (CUptiResult r = c_->cuptiPmSamplingCounterDataImageInitialize(&ip); r != CUPTI_SUCCESS) {
      *reason = "cuptiPmSamplingCounterDataImageInitialize: " + err(*c_, r);
      return false;
    }
    return true;
  }

  // Appends the completed records of the counter-data image.
  bool collect(PmBatch* out) {
    auto info =
        params<CUpti_PmSampling_GetCounterDataInfo_Params>(CUpti_PmSampling_GetCounterDataInfo_Params_STRUCT_SIZE);
    info.pCounterDataImage = data_.data();
    info.counterDataImageSize = data_.size();
    if (CUptiResult r = c_->cuptiPmSamplingGetCounterDataInfo(&info); r != CUPTI_SUCCESS) {
      out->error = "cuptiPmSamplingGetCounterDataInfo: " + err(*c_, r);
      return false;
    }
    for (size_t i = 0; i < info.numCompletedSamples; ++i) {
      auto si = params<CUpti_PmSampling_CounterData_GetSampleInfo_Params>(
          CUpti_PmSampling_CounterData_GetSampleInfo_Params_STRUCT_SIZE);
      si.pPmSamplingObject = obj_;
      si.pCounterDataImage = data_.data();
      si.counterDataImageSize = data_.size();
      si.sampleIndex = i;
      if (CUptiResult r = c_->cuptiPmSamplingCounterDataGetSampleInfo(&si); r != CUPTI_SUCCESS) {
        out->error = "cuptiPmSamplingCounterDataGetSampleInfo: " + err(*c_, r);
        return false;
      }
      double values[2] = {0, 0};
      auto ev = params<CUpti_Profiler_Host_EvaluateToGpuValues_Params>(
          CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE);
      ev.pHostObject = host_.obj;
      ev.pCounterDataImage = data_.data();
      ev.counterDataImageSize = data_.size();
      ev.rangeIndex = i;
      ev.ppMetricNames = const_cast<const char**>(kMetrics);
      ev.numMetrics = 2;
      ev.pMetricValues = values;
      if (CUptiResult r = c_->cuptiProfilerHostEvaluateToGpuValues(&ev); r != CUPTI_SUCCESS) {
        out->error = "cuptiProfilerHostEvaluateToGpuValues: " + err(*c_, r);
        return false;
      }
      out->records.push_back(
          {static_cast<int64_t>(si.startTimestamp), static_cast<int64_t>(si.endTimestamp), {values[0], values[1]}});
    }
    return true;
  }

  const Cupti* c_;
  int device_;
  int64_t interval_us_, decode_ms_;
  Host host_;
  CUpti_PmSampling_Object* obj_ = nullptr;
  std::vector<uint8_t> config_, data_;
  bool running_ = false, dead_ = false;
};

}  // namespace

tpsResult_t openCuptiPmReaders(const MeterOptions& options, const std::vector<MeterGpu>& gpus,
                               std::vector<std::unique_ptr<PmReader>>* out, std::string* reason) {
  // The CUDA driver initialised (no context yet): CUPTI's device queries need it.
  int count = 0;
  (void)cudaGetDeviceCount(&count);
  std::string why;
  const Cupti* c = loadCupti(&why);
  if (!c) {
    *reason = "PM sampling is unavailable: " + why;
    return tpsUnavailable;
  }
  for (const MeterGpu& g : gpus) {
    auto r = std::make_unique<CuptiPmReader>(c, g.index, options.pm_interval_us, options.pm_decode_ms);
    if (!r->configure(&why)) {
      *reason = "PM sampling on GPU " + std::to_string(g.index) + " is unavailable: " + why;
      out->clear();
      return tpsUnavailable;
    }
    out->push_back(std::move(r));
  }
  return tpsSuccess;
}

// Every counter metric PM sampling offers on CUDA device `device` (its chip), for --list-pm-metrics.
std::vector<std::string> listCuptiPmMetrics(int device, std::string* reason) {
  int count = 0;
  (void)cudaGetDeviceCount(&count);
  const Cupti* c = loadCupti(reason);
  if (!c) return {};
  Host host;
  if (!host.init(c, device, reason)) return {};
  std::vector<std::string> out;
  for (CUpti_MetricType t : {CUPTI_METRIC_TYPE_COUNTER, CUPTI_METRIC_TYPE_RATIO, CUPTI_METRIC_TYPE_THROUGHPUT}) {
    auto p = params<CUpti_Profiler_Host_GetBaseMetrics_Params>(CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE);
    p.pHostObject = host.obj;
    p.metricType = t;
    if (CUptiResult r = c->cuptiProfilerHostGetBaseMetrics(&p); r != CUPTI_SUCCESS) {
      *reason = "cuptiProfilerHostGetBaseMetrics: " + err(*c, r);
      return out;
    }
    for (size_t i = 0; i < p.numMetrics; ++i) out.push_back(p.ppMetricNames[i]);
  }
  out.insert(out.begin(), "# chip " + host.chip + ", " + c->path);
  return out;
}

#endif

}  // namespace tpscope::detail
