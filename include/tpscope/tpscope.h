/* SPDX-License-Identifier: Apache-2.0
 *
 * tpscope: tensor-parallel AllReduce and interconnect measurement for the GPUs of one host.
 *
 * This header is the C API. Every function returns a tpsResult_t; tpsGetErrorString() turns one into
 * text. The conventions follow NCCL: no function calls exit(), and a function that returns an error
 * has changed nothing the caller can see unless its comment says otherwise.
 */
#ifndef TPSCOPE_TPSCOPE_H_
#define TPSCOPE_TPSCOPE_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Values are stable: they appear in logs and JSON records. */
typedef enum {
  tpsSuccess = 0,
  tpsCudaError = 1,       /* a CUDA runtime call failed; the log has the call, the error name and file:line */
  tpsSystemError = 2,     /* an operating-system call failed (memory, files, threads) */
  tpsInternalError = 3,   /* a bug in tpscope */
  tpsInvalidArgument = 4, /* an argument is wrong (null pointer, bad count, unknown dtype, ...) */
  tpsInvalidUsage = 5,    /* the arguments are fine but the call is not allowed now */
  tpsTimeout = 6,         /* a bounded wait expired (for example a peer GPU that never arrived) */
  tpsUnavailable = 7,     /* the feature or hardware is not available on this build or box */
  tpsNcclError = 8,       /* an NCCL call failed */
  tpsNumResults = 9
} tpsResult_t;

/* A static, human-readable string for a status code ("invalid argument"). Never NULL. */
const char* tpsGetErrorString(tpsResult_t result);

/* The library version as "MAJOR.MINOR.PATCH" and the git revision it was built from. Never NULL. */
const char* tpsGetVersion(void);
const char* tpsGetGitRevision(void);

/* ---- AllReduce ------------------------------------------------------------------------------- */

#include <stddef.h>

/* cudaStream_t without pulling the CUDA headers into C users' builds. */
struct CUstream_st;
typedef struct CUstream_st* tpsStream_t;

#define TPS_MAX_DEVICES 8

/* Element types. Sums are computed in float and rounded once to the element type. */
typedef enum { tpsFloat32 = 0, tpsFloat16 = 1, tpsBfloat16 = 2, tpsNumDataTypes = 3 } tpsDataType_t;

/* Backends. tpsBackendAuto takes TPSCOPE_ALLREDUCE (host|p2p|nccl|auto) when set, else chooses per call by
 * size: the backend the tune file's "auto" table names (measured on this box by `tpscope bench allreduce
 * --tune`; TPSCOPE_TUNE_FILE, default ~/.cache/tpscope/tune.json), else p2p where every pair of GPUs has
 * peer access, else NCCL where every pair has peer access, else host. `tpscope topo` shows the choice. */
typedef enum {
  tpsBackendAuto = 0,
  tpsBackendHost = 1, /* staged through pinned host memory: works on any box */
  tpsBackendP2p = 2,  /* direct loads/stores between GPUs over NVLink or PCIe P2P */
  tpsBackendNccl = 3, /* NCCL communicators over the same devices */
  tpsNumBackends = 4
} tpsBackend_t;

/* The path that carried a call: a backend and its algorithm. */
typedef enum {
  tpsPathHostKernel = 0,     /* host backend, one kernel per GPU: mapped host memory, in-kernel flags */
  tpsPathHostCopyEngine = 1, /* host backend, copy engines: chunked D2H and H2D, then an add kernel */
  tpsPathP2pOneShot = 2,     /* p2p backend, each GPU reads every peer */
  tpsPathP2pTwoShot = 3,     /* p2p backend, reduce-scatter then all-gather */
  tpsPathNccl = 4,           /* ncclAllReduce */
  tpsNumPaths = 5
} tpsPath_t;

/* Message size classes for statistics, by bytes per GPU: <= 64 KiB (decode), <= 1 MiB, <= 16 MiB,
 * <= 256 MiB, larger. */
#define TPS_NUM_SIZE_CLASSES 5

/* Communicator configuration. Initialise with tpsConfigInit(); a field left at 0 takes its default
 * (environment variable first, then the value measured for this box, then a built-in default). */
typedef struct {
  tpsBackend_t backend;
  size_t host_copy_threshold;  /* bytes per GPU at or above which the host backend uses copy engines */
  size_t host_chunk_bytes;     /* copy-engine chunk size */
  int host_blocks;             /* blocks per GPU of the host kernel path */
  unsigned spin_timeout_ms;    /* bounded wait for a peer inside kernels; on expiry: tpsTimeout */
} tpsConfig_t;

/* Fills *config with zeros and tpsBackendAuto: every field takes its default. */
tpsResult_t tpsConfigInit(tpsConfig_t* config);

/* An AllReduce communicator over N devices of this process (opaque, like ncclComm_t). */
typedef struct tpsComm* tpsComm_t;

/* Creates a communicator over devices[0..ndev-1] (CUDA ordinals, distinct, 2 <= ndev <= 8). Allocates
 * every buffer it will need (pinned host staging, device scratch, NCCL communicators) so that failures
 * happen here, not mid-run. config may be NULL for defaults. Not thread-safe with other calls on the
 * same communicator. Errors: tpsInvalidArgument (bad ndev, duplicate or missing device, bad config),
 * tpsUnavailable (the selected backend cannot run on these GPUs), tpsCudaError, tpsNcclError. */
tpsResult_t tpsCommCreate(tpsComm_t* comm, int ndev, const int* devices, const tpsConfig_t* config);

/* ---- One rank per process (NCCL's shape) ----------------------------------------------------
 * Engines that run one process per GPU make one communicator per process: one process calls
 * tpsGetUniqueId and passes the id to the others any way it likes (a pipe, a file, torch.distributed's
 * broadcast); every process then calls tpsCommInitRank with the same id and nranks, its own rank and its
 * own GPU. The processes must run on one host (the id names a Unix socket in the abstract namespace, so
 * they must share a network namespace too). The communicator's calls below then take arrays of one
 * element: this rank's buffer and stream (bufs[0], streams[0]); the peers' buffers are not passed.
 * Statistics (tpsCommGetStats: ndev 1, devices[0] this rank's GPU) and asynchronous errors are this
 * rank's. The backends work as in one process: p2p exchanges CUDA IPC handles of its receive buffers and
 * flags, host shares its staging area through POSIX shared memory each process maps and registers, and
 * nccl runs ncclCommInitRank. A rank that dies or stops calling leaves the others' calls with tpsTimeout
 * (tpsCommGetAsyncError) after spin_timeout_ms, never a hang. Push channels are not offered here. */

#define TPS_UNIQUE_ID_BYTES 128
/* Opaque: copy all TPS_UNIQUE_ID_BYTES bytes to the other ranks. */
typedef struct {
  char internal[TPS_UNIQUE_ID_BYTES];
} tpsUniqueId;

/* A fresh id for one communicator. Any process of the host may make it (usually rank 0's, or a launcher
 * before it starts the ranks). Errors: tpsInvalidArgument for NULL. */
tpsResult_t tpsGetUniqueId(tpsUniqueId* id);

/* Joins the communicator of `id` as rank `rank` of `nranks` (2 <= nranks <= 8) on CUDA device `device`
 * of this process, and allocates every buffer it needs, as tpsCommCreate does. Collective: every rank
 * calls it with the same id, nranks and config (backend and tuning must agree, or the ranks' calls will
 * not meet); it returns once all have joined and exchanged their handles, or fails on every rank alike.
 * The wait for the others is bounded by TPSCOPE_BOOTSTRAP_TIMEOUT_MS (default 30000). Ranks on one GPU
 * are refused (tpsInvalidArgument) unless TPSCOPE_TEST_SHARED_DEVICES=1, as in tpsCommCreate; their
 * processes then time-slice the GPU, so a peer's kernel may wait a whole time slice for the other's.
 * An id serves one communicator: join with a fresh one each time.
 * Errors: tpsInvalidArgument (NULL comm, nranks or rank out of range, a device that does not exist,
 * bytes that are not an id, ranks disagreeing on nranks, one rank number taken by two processes, ranks
 * sharing a GPU), tpsInvalidUsage (this process already joined with this id, or another process is
 * rank 0 of it), tpsTimeout (a rank did not join in time), tpsUnavailable (the chosen backend cannot
 * run on these GPUs, on some rank), tpsSystemError, tpsCudaError, tpsNcclError. On error *comm is NULL. */
tpsResult_t tpsCommInitRank(tpsComm_t* comm, int nranks, tpsUniqueId id, int rank, int device,
                            const tpsConfig_t* config);

/* The number of ranks (N for tpsCommCreate, nranks for tpsCommInitRank) and this communicator's first
 * rank (0 for tpsCommCreate). tpsInvalidArgument for NULL. */
tpsResult_t tpsCommCount(tpsComm_t comm, int* nranks);
tpsResult_t tpsCommUserRank(tpsComm_t comm, int* rank);

/* Waits for nothing: the caller synchronises its streams first. Frees everything. NULL is accepted. */
tpsResult_t tpsCommDestroy(tpsComm_t comm);

/* In-place sum: after the call completes on streams[i], bufs[i] on devices[i] holds the element-wise sum
 * of all N input buffers, bit-identical on every GPU. count elements of dtype each. For a communicator
 * from tpsCommInitRank, bufs and streams hold one element, this rank's, and every rank makes the call.
 * Asynchronous: enqueued on streams[i] (one per device, on that device; legacy default streams are
 * refused) and capturable into a CUDA graph when every stream is being captured. Returns once all work
 * is enqueued. Bad arguments enqueue nothing: tpsInvalidArgument for NULL bufs or streams, count 0,
 * an unknown dtype, a buffer that is not device memory of its GPU; tpsInvalidUsage after an earlier
 * asynchronous error (see tpsCommGetAsyncError). */
tpsResult_t tpsAllReduce(tpsComm_t comm, void* const* bufs, size_t count, tpsDataType_t dtype,
                         const tpsStream_t* streams);

/* Like tpsAllReduce with the backend forced for this call (tpsBackendAuto = the communicator's choice).
 * tpsUnavailable when the communicator was not created with that backend's resources. */
tpsResult_t tpsAllReduceWith(tpsComm_t comm, tpsBackend_t backend, void* const* bufs, size_t count,
                             tpsDataType_t dtype, const tpsStream_t* streams);

/* The reduction fused with what follows it in a transformer layer, for `rows` rows of `width`
 * elements (count = rows x width) per GPU:
 *   sum = the sum over GPUs of partial (as tpsAllReduce computes it);
 *   residual_out[i] = residual_in[i] + sum, rounded to dtype;
 *   normed[i] = residual_out[i] * rsqrt(mean over the row of residual_out^2 + eps) * weight[i],
 * bit-identical on every GPU. weight NULL: the add alone (normed unused). partial's contents after
 * the call are unspecified, and residual_out may be partial itself (a caller then swaps the two
 * buffers' roles). One kernel where the chosen backend has it (p2p; bf16; a message its LL one-shot
 * takes; rows <= its LL blocks; width a multiple of 4 within one block's reach; with a weight,
 * residual_out apart from residual_in: the add alone may update the residual in place); otherwise
 * tpsUnavailable with nothing enqueued, and the caller runs the reduction, the add and the norm itself. Arguments as tpsAllReduceWith, plus tpsInvalidArgument
 * for a NULL residual (or weight / normed) pointer or a non-positive eps. */
tpsResult_t tpsAllReduceAddRmsNorm(tpsComm_t comm, tpsBackend_t backend, void* const* partial,
                                   const void* const* residual_in, void* const* residual_out,
                                   const void* const* weight, void* const* normed, size_t rows, size_t width,
                                   float eps, tpsDataType_t dtype, const tpsStream_t* streams);

/* ---- Pushed reductions: the producing kernel sends, the reduction only waits and sums ---------
 * At decode sizes a reduction's cost is its kernel boundary: the kernel that makes the partial ends,
 * the reduction's kernel starts, sends, waits for the peers. A caller that writes its own producing
 * kernel (a projection) can instead send each finished 8-byte word of the partial to the peers from
 * that kernel, as it is computed, through a push channel; the reduction it then enqueues
 * (tpsAllReducePushedAddRmsNorm) only polls for the peers' words in its own memory and sums. The
 * lines and sequence numbers are those of the p2p backend's LL one-shot, so pushed and ordinary calls
 * may alternate on one communicator.
 *
 * Sending word w (elements 4i..4i+3 of row `row`, w = row x width / 4 + i), from a kernel that has
 * waited for the work before it on its stream (the sequence numbers are the previous call's writes):
 *   seq  = counters[row] + 1                      (64-bit load from device memory, past L1)
 *   line = {d.x, (u32)seq, d.y, (u32)seq}         (d: the word's 8 bytes as two u32)
 *   for every rank q != rank: one 16-byte volatile store of line to
 *        (uint4*)lines[q] + ((seq & 1) x nranks + rank) x lines_per_sender + w
 * One store carries the data and the sequence number together, so the receiver knows a line is whole
 * and of this call when both flags read seq. tpscope's own kernels do it with pushWord
 * (src/allreduce/push.cuh). */

/* The device-side address book of one GPU's pushes, passed by value to the producing kernel. */
typedef struct {
  void* lines[TPS_MAX_DEVICES];        /* each rank's receive lines (device memory of that rank) */
  const unsigned long long* counters;  /* this rank's sequence number per row (device memory) */
  unsigned long long lines_per_sender; /* lines per (slot, sender) */
  int rank;                            /* this GPU's position in the communicator */
  int nranks;
  int max_rows;                 /* rows per pushed call */
  int max_width;                /* elements per row (bf16), a multiple of 4 */
  unsigned long long max_words; /* 8-byte words per pushed call: rows x width / 4 at most */
} tpsPushChannel_t;

/* The push channel of the GPU at position `rank`: tpsUnavailable when the communicator has no p2p
 * backend (or the channel is switched off with TPSCOPE_P2P_PUSH=0), tpsInvalidArgument for a NULL
 * pointer or a rank outside 0..N-1. */
tpsResult_t tpsCommGetPushChannel(tpsComm_t comm, int rank, tpsPushChannel_t* channel);

/* As tpsAllReduceAddRmsNorm on the p2p backend, for a call whose partials every GPU has already sent
 * through its push channel (above), word w = row x width / 4 + i holding elements 4i..4i+3 of row `row`, each word of
 * every row exactly once, from a kernel enqueued on streams[i] before this call with nothing of this
 * communicator between them. partial[i] must hold the same values (the GPU's own part is read from it).
 * bf16 only; rows <= max_rows, width a multiple of 4 <= max_width; residual_out may be residual_in (the
 * residual updated in place) or partial. Arguments as tpsAllReduceAddRmsNorm; tpsUnavailable when the
 * communicator has no push channel. A GPU whose peer never pushes reports tpsTimeout as any p2p call. */
tpsResult_t tpsAllReducePushedAddRmsNorm(tpsComm_t comm, void* const* partial, const void* const* residual_in,
                                         void* const* residual_out, const void* const* weight, void* const* normed,
                                         size_t rows, size_t width, float eps, tpsDataType_t dtype,
                                         const tpsStream_t* streams);

/* Errors that happen after a call returned: tpsTimeout when a kernel gave up waiting for a peer within
 * spin_timeout_ms. Once set the communicator refuses further calls; destroy it. Reads host memory only
 * (no synchronisation); call it after synchronising the streams to see everything enqueued so far. */
tpsResult_t tpsCommGetAsyncError(tpsComm_t comm, tpsResult_t* async_error);

/* Per-communicator statistics: what was enqueued, by path and size class. tx/rx are the payload bytes
 * each GPU sent and received over the path's medium (host memory over PCIe for the host paths, peer
 * links for p2p, NCCL's ring estimate 2(N-1)/N x size for nccl); link-level counters add protocol
 * overhead on top of these (see `tpscope meter`). */
typedef struct {
  unsigned long long calls;
  unsigned long long payload_bytes; /* sum of count x element size */
  unsigned long long tx_bytes[TPS_MAX_DEVICES];
  unsigned long long rx_bytes[TPS_MAX_DEVICES];
} tpsStatsCell_t;

typedef struct {
  int ndev;
  int devices[TPS_MAX_DEVICES];
  tpsStatsCell_t cells[tpsNumPaths][TPS_NUM_SIZE_CLASSES];
} tpsStats_t;

tpsResult_t tpsCommGetStats(tpsComm_t comm, tpsStats_t* stats);
tpsResult_t tpsCommResetStats(tpsComm_t comm);

/* Names for printing: "host", "host-kernel", "bf16", "<=64KiB". Never NULL. */
const char* tpsBackendName(tpsBackend_t backend);
const char* tpsPathName(tpsPath_t path);
const char* tpsDataTypeName(tpsDataType_t dtype);
const char* tpsSizeClassName(int size_class);
/* The size class of a message of `bytes` per GPU, and the element size of dtype (0 if unknown). */
int tpsSizeClassOf(size_t bytes);
size_t tpsDataTypeSize(tpsDataType_t dtype);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TPSCOPE_TPSCOPE_H_ */
