// tpscope's AllReduce behind ggml-cuda's communication interface: see tpscope-comm.h.
//
// One tpsComm_t spans the backends' devices; each call reduces the N tensors with one tpsAllReduce on
// the backends' own streams, so it orders with the graph work before and after it and is captured with
// it where the streams are being captured. Tensors tpscope does not take (types other than f32, f16
// and bf16, uneven or non-contiguous tensors) go back to the caller, which hands them to llama.cpp's own
// path. tpscope's waits for peers are bounded (its spin timeout): a peer that never arrives ends the
// kernel with tpsTimeout, which the next call reports as a llama.cpp error instead of hanging.

#include "tpscope-comm.h"

#include "ggml-impl.h"
#include "ggml.h"

#include <tpscope/tpscope.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

struct ggml_cuda_tpscope {
    tpsComm_t comm      = nullptr;
    int       n_devices = 0;
    int       devices[TPS_MAX_DEVICES] = {};
    // Which fallbacks were already said in the log (one bit per reason), so each is said once.
    std::atomic<unsigned> said{0};
};

namespace {

enum fallback_reason : unsigned {
    FALLBACK_TYPE       = 1u << 0,
    FALLBACK_SHAPE      = 1u << 1,
    FALLBACK_LAYOUT     = 1u << 2,
    FALLBACK_REFUSED    = 1u << 3,
};

bool tpscope_requested() {
    const char * env = getenv("GGML_CUDA_ALLREDUCE");
    return env != nullptr && strcmp(env, "tpscope") == 0;
}

std::string tpscope_backend_choice() {
    const char * env = getenv("TPSCOPE_ALLREDUCE");
    return env != nullptr && env[0] != '\0' ? std::string("TPSCOPE_ALLREDUCE=") + env : std::string("auto");
}

// What the calls' bytes travel as: the dtype's own (exact, tpscope's default) unless TPSCOPE_WIRE names a
// compressed wire, which tpscope reads itself because the communicator's config leaves the wire at 0.
std::string tpscope_wire_choice() {
    const char * env = getenv("TPSCOPE_WIRE");
    return env != nullptr && env[0] != '\0' ? std::string("TPSCOPE_WIRE=") + env : std::string("exact wire");
}

// The wire a communicator resolved (tpsCommGetConfig), as TPSCOPE_WIRE names it.
std::string wire_name(const tpsConfig_t & c) {
    switch (c.wire) {
        case tpsWireExact: return "exact";
        case tpsWireBf16:  return "bf16";
        case tpsWireInt8:  return "int8";
        case tpsWireFp8:   return "fp8";
        case tpsWireInt4:  return "int4";
        case tpsWireAuto: {
            char budget[32];
            snprintf(budget, sizeof budget, "auto:%g", (double) c.wire_error_budget);
            return budget;
        }
        default:           return "unknown";
    }
}

bool to_tps_type(ggml_type type, tpsDataType_t * out) {
    switch (type) {
        case GGML_TYPE_F32:  *out = tpsFloat32;  return true;
        case GGML_TYPE_F16:  *out = tpsFloat16;  return true;
        case GGML_TYPE_BF16: *out = tpsBfloat16; return true;
        default:             return false;
    }
}

// Says a fallback once per reason; every later call with the same reason falls back silently.
bool decline(ggml_cuda_tpscope * ctx, fallback_reason reason, const std::string & why) {
    if ((ctx->said.fetch_or(reason) & reason) == 0) {
        GGML_LOG_INFO("%s: tpscope AllReduce: %s; such tensors use llama.cpp's own AllReduce (said once)\n",
                      __func__, why.c_str());
    }
    return false;
}

}  // namespace

void ggml_cuda_tpscope_log_devices(int device_count) {
    if (!tpscope_requested()) {
        return;
    }
    if (device_count < 2) {
        // A warning, so it shows at llama.cpp's default verbosity: what was asked for does not happen.
        GGML_LOG_WARN("%s: GGML_CUDA_ALLREDUCE=tpscope (tpscope %s): %d CUDA device, so no AllReduce runs and "
                      "llama.cpp computes as it does on one GPU\n",
                      __func__, tpsGetVersion(), device_count);
    } else {
        GGML_LOG_INFO("%s: GGML_CUDA_ALLREDUCE=tpscope (tpscope %s, %s, %s): tensor-parallel splits reduce with "
                      "tpscope\n",
                      __func__, tpsGetVersion(), tpscope_backend_choice().c_str(), tpscope_wire_choice().c_str());
    }
}

ggml_cuda_tpscope * ggml_cuda_tpscope_init(const int * devices, size_t n_devices) {
    if (n_devices < 2 || n_devices > TPS_MAX_DEVICES) {
        GGML_LOG_WARN("%s: tpscope AllReduce takes 2 to %d devices, not %zu\n", __func__, TPS_MAX_DEVICES, n_devices);
        return nullptr;
    }
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) {
        (void) cudaGetLastError();
        current = -1;
    }
    tpsConfig_t config;
    // Every field at its default: backend auto (TPSCOPE_ALLREDUCE when set, else tpscope's choice per size)
    // and wire 0 (TPSCOPE_WIRE when set, else exact), so both variables reach the communicator as they are.
    tpsConfigInit(&config);
    tpsComm_t         comm = nullptr;
    const tpsResult_t rc   = tpsCommCreate(&comm, (int) n_devices, devices, &config);
    if (current >= 0) {
        (void) cudaSetDevice(current);
    }
    if (rc != tpsSuccess) {
        GGML_LOG_WARN("%s: tpscope communicator over %zu devices failed (%s)\n", __func__, n_devices,
                      tpsGetErrorString(rc));
        return nullptr;
    }
    auto * ctx      = new ggml_cuda_tpscope;
    ctx->comm       = comm;
    ctx->n_devices  = (int) n_devices;
    std::string ids;
    for (size_t i = 0; i < n_devices; ++i) {
        ctx->devices[i] = devices[i];
        ids += (i ? "," : "") + std::to_string(devices[i]);
    }
    tpsConfig_t resolved = config;
    (void) tpsCommGetConfig(comm, &resolved);  // the wire the communicator took (TPSCOPE_WIRE, or exact)
    GGML_LOG_INFO("%s: tpscope AllReduce (tpscope %s, %s, wire %s) over CUDA devices %s\n", __func__,
                  tpsGetVersion(), tpscope_backend_choice().c_str(), wire_name(resolved).c_str(), ids.c_str());
    return ctx;
}

void ggml_cuda_tpscope_free(ggml_cuda_tpscope * ctx) {
    if (ctx == nullptr) {
        return;
    }
    // The backends synchronise their streams before they are freed; tpsCommDestroy waits for nothing.
    (void) tpsCommDestroy(ctx->comm);
    delete ctx;
}

bool ggml_cuda_tpscope_allreduce(ggml_cuda_tpscope * ctx, ggml_tensor ** tensors, CUstream_st * const * streams) {
    const int n = ctx->n_devices;
    GGML_ASSERT(tensors[0] != nullptr);
    const int64_t   ne   = ggml_nelements(tensors[0]);
    const ggml_type type = tensors[0]->type;

    tpsDataType_t dtype;
    if (!to_tps_type(type, &dtype)) {
        return decline(ctx, FALLBACK_TYPE, std::string("tensors of type ") + ggml_type_name(type) +
                                               " (tpscope reduces f32, f16 and bf16)");
    }
    if (ne == 0) {
        return true;  // nothing to sum (a graph with no outputs)
    }
    for (int i = 0; i < n; ++i) {
        if (tensors[i] == nullptr || ggml_nelements(tensors[i]) != ne || tensors[i]->type != type) {
            return decline(ctx, FALLBACK_SHAPE, "tensors that differ between devices");
        }
        if (!ggml_is_contiguously_allocated(tensors[i])) {
            return decline(ctx, FALLBACK_LAYOUT, "tensors that are not contiguously allocated");
        }
    }

    // An earlier call that ended without its peers (tpsTimeout) makes the communicator refuse every
    // later call: say so as llama.cpp's error rather than reduce with stale data.
    tpsResult_t async_error = tpsSuccess;
    if (tpsCommGetAsyncError(ctx->comm, &async_error) != tpsSuccess || async_error != tpsSuccess) {
        GGML_ABORT("tpscope AllReduce: an earlier reduction failed on the GPU (%s): a peer GPU did not arrive "
                   "within tpscope's spin timeout",
                   tpsGetErrorString(async_error));
    }

    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) {
        GGML_ABORT("tpscope AllReduce: cudaGetDevice failed: %s", cudaGetErrorString(cudaGetLastError()));
    }
    void * bufs[TPS_MAX_DEVICES];
    for (int i = 0; i < n; ++i) {
        bufs[i] = tensors[i]->data;
        // A tensor this device did not compute holds no partial: it contributes zeros (as in the NCCL path).
        if ((tensors[i]->flags & GGML_TENSOR_FLAG_COMPUTE) == 0) {
            cudaError_t err = cudaSetDevice(ctx->devices[i]);
            if (err == cudaSuccess) {
                err = cudaMemsetAsync(bufs[i], 0, ggml_nbytes(tensors[i]), streams[i]);
            }
            if (err != cudaSuccess) {
                GGML_ABORT("tpscope AllReduce: zeroing an uncomputed partial on device %d failed: %s",
                           ctx->devices[i], cudaGetErrorString(err));
            }
        }
    }
    const tpsResult_t rc = tpsAllReduce(ctx->comm, bufs, (size_t) ne, dtype, streams);
    (void) cudaSetDevice(current);
    switch (rc) {
        case tpsSuccess:
            return true;
        case tpsInvalidArgument:
        case tpsUnavailable:
            // Refused before anything was enqueued (tpscope's contract): llama.cpp's path takes it.
            return decline(ctx, FALLBACK_REFUSED, std::string("tpscope refused a call (") + tpsGetErrorString(rc) +
                                                      ", see tpscope's log line above)");
        default:
            GGML_ABORT("tpscope AllReduce of %" PRId64 " %s elements failed: %s", ne, ggml_type_name(type),
                       tpsGetErrorString(rc));
    }
}
