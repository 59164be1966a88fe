/* SPDX-License-Identifier: Apache-2.0
 *
 * tpscope: tensor-parallel AllReduce and interconnect measurement for the GPUs of one host.
 *
 * This header is the C API. Every function returns a tpsResult_t; tpsGetErrorString() turns one into
 * text. The conventions follow NCCL: no function calls exit(), and a function that returns an error
 * has changed nothing the caller can see unless its comment says otherwise.
 *
 * Threads. The functions without a communicator (names, sizes, version, tpsConfigInit) may be called
 * from any thread at any time. A communicator belongs to one thread at a time: tpsCommCreate,
 * tpsCommDestroy and the calls that enqueue work (tpsAllReduce, tpsAllReduceWith, tpsAllReduceWire,
 * tpsAllReduceAddRmsNorm) must not run concurrently with each other on the same communicator, as with
 * an ncclComm_t; the caller serialises them (one thread, or its own lock). Three calls may run from any
 * other thread while that happens: tpsCommGetAsyncError (an atomic read), tpsCommGetStats and
 * tpsCommResetStats (under the communicator's own lock). Different communicators are independent.
 *
 * Paths. A path is the algorithm one backend ran for a call (host kernel, host copy engines, p2p LL
 * one-shot, p2p one-shot, p2p two-shot, NCCL, and those added since); statistics and reports count calls
 * and bytes per path. Paths are numbered 0 .. tpsGetPathCount() - 1: tpsPath_t names the first
 * tpsNumPaths, whose numbers never change; later ones are read by number and name (tpsGetPathName,
 * tpsCommGetPathStats), so a library that adds an algorithm keeps this ABI. The physical route those
 * bytes take (PCIe to host memory, NVLink or PCIe peer links) is the path's medium, never called a path.
 */
#ifndef TPSCOPE_TPSCOPE_H_
#define TPSCOPE_TPSCOPE_H_

#include <stddef.h> /* size_t; outside extern "C": a C++ compiler's own headers hold C++ */

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

/* The library version as "MAJOR.MINOR.PATCH", and the git revision it was built from: 12 hex digits of
 * the commit, with "-dirty" appended when tracked files differed from it, or "unknown" when it was not
 * built from a git checkout. Both static; never NULL. */
const char* tpsGetVersion(void);
const char* tpsGetGitRevision(void);

/* ---- AllReduce ------------------------------------------------------------------------------- */

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

/* The path that carried a call: a backend and its algorithm (values stable, as the status codes). */
typedef enum {
  tpsPathHostKernel = 0,     /* host backend, one kernel per GPU: mapped host memory, in-kernel flags */
  tpsPathHostCopyEngine = 1, /* host backend, copy engines: chunked D2H and H2D, then an add kernel */
  tpsPathP2pOneShot = 2,     /* p2p backend, each GPU reads every peer after one flag exchange */
  tpsPathP2pTwoShot = 3,     /* p2p backend, reduce-scatter then all-gather */
  tpsPathNccl = 4,           /* ncclAllReduce */
  tpsPathP2pLL = 5,          /* p2p backend, LL one-shot: each 8 bytes travel with their own flag, no
                                flag exchange (decode sizes up to TPS_P2P_LL_MAX_BYTES); the fused
                                calls (tpsAllReduceAddRmsNorm) run on it */
  tpsNumPaths = 6
} tpsPath_t;

/* The p2p backend's LL one-shot takes a call of at most this many bytes per GPU that is whole 8-byte
 * words with every buffer 8-byte aligned; such a call is also the only one tpsAllReduceAddRmsNorm
 * fuses, for at most TPS_FUSED_MAX_ROWS rows. */
#define TPS_P2P_LL_MAX_BYTES 262144
#define TPS_FUSED_MAX_ROWS 64

/* Message size classes for statistics, by bytes per GPU: <= 64 KiB (decode), <= 1 MiB, <= 16 MiB,
 * <= 256 MiB, larger. */
#define TPS_NUM_SIZE_CLASSES 5

/* The most uids a configuration may name besides the process's own (tpsConfig_t.peer_uids). */
#define TPS_MAX_PEER_UIDS 8

/* Wires: what a call's bytes travel as between the ranks. tpsWireExact, the dtype's own bytes, is the
 * default and the only wire a communicator uses unless the user names another (tpsConfig_t.wire, or
 * TPSCOPE_WIRE) or gives tpsWireAuto an error budget; a call may also name its own (tpsAllReduceWire). A
 * compressed wire encodes each rank's message in blocks of 64 values with one float scale each (bf16:
 * float32 messages rounded to bfloat16, no scale); every rank adds the same decoded payloads, its own
 * included as its peers decode it, in rank order in float, so every rank still holds the same bits. NaN
 * and +-Inf travel as codes of their own and come out of the sum as on the exact wire. The host backend
 * carries every wire, on both of its paths; the p2p backend on its two-shot (calls above its one-shot's
 * sizes), where each slice's owner sends the sum encoded once more, and every rank, the owner included,
 * keeps the decoded sum. Where the chosen algorithm has no such wire (p2p below the two-shot's sizes,
 * NCCL, bf16 for a 16-bit dtype) the call runs exact. The path in the statistics names the wire a call
 * used ("host-copy+int8", "p2p-twoshot+int8"). */
typedef enum {
  tpsWireExact = 0, /* the dtype's bytes: what every other wire is measured against */
  tpsWireBf16 = 1,  /* float32 calls as bfloat16 (half the bytes) */
  tpsWireInt8 = 2,  /* 8-bit integers and a scale per 64 values: 1.0625 bytes a value */
  tpsWireFp8 = 3,   /* fp8 e4m3 and a scale per 64 values: 1.0625 bytes a value */
  tpsWireInt4 = 4,  /* 4-bit integers and a scale per 64 values: 0.5625 bytes a value */
  tpsWireAuto = 5,  /* per call size, the fastest wire whose relative RMS error `bench allreduce --tune`
                       measured on this box is within wire_error_budget; exact where none is, or where
                       the tune file has no wire table for this box */
  tpsNumWires = 6
} tpsWire_t;

/* Communicator configuration. Initialise with tpsConfigInit(); a field left at 0 takes its default
 * (environment variable first, then the value measured for this box, then a built-in default). */
typedef struct {
  tpsBackend_t backend;
  size_t host_copy_threshold; /* bytes per GPU at or above which the host backend uses copy engines */
  size_t host_chunk_bytes;    /* copy-engine chunk size */
  int host_blocks;            /* blocks per GPU of the host kernel path */
  unsigned spin_timeout_ms;   /* bounded wait for a peer: a call whose peers have not all arrived within
                                 this many ms of this rank's arrival gives up and reports tpsTimeout
                                 (tpsCommGetAsyncError). Every path keeps it: the kernels, the host
                                 backend's copy engines, and calls across processes; a call that runs in
                                 pieces (large host or p2p calls) waits it out once, not once per piece,
                                 and then ends within its own copy time */
  int shared_devices;         /* nonzero: a GPU may appear more than once in devices, its ranks then
                                 sharing it (for running the N-rank code paths of host and p2p on fewer
                                 GPUs, as tests do, and for watching the calls cross one GPU's PCIe link;
                                 never for timing them: the ranks time-slice the GPU). Each rank's kernel grids are
                                 then cut so that the grids of the ranks on one GPU fit on it together.
                                 NCCL takes one rank per GPU: auto goes on without it,
                                 and backend nccl is tpsUnavailable. Give each rank its own
                                 stream (or graph): one CUDA graph holding the calls of ranks
                                 that share a GPU may run them one after the other, and each
                                 waits for the others until the spin timeout. */
  /* Rank-per-process communicators (tpsCommInitRank) only; tpsCommCreate ignores both fields. The users
   * whose processes may be the other ranks besides this process's own (its effective uid): rank 0
   * refuses a connection from a process of any other user, and every other rank refuses a rank 0 of any
   * other user before it sends anything (tpsCommInitRank has the rule). num_peer_uids 0, the default:
   * only processes of this process's user. Each rank names the uids of those ranks it must accept that
   * run as other users; root is no exception (name uid 0 to accept it). A plain array, not a pointer,
   * so the struct stays a value that tpsCommGetConfig returns and records copy. Backends may still
   * refuse ranks of other users: the host backend's shared memory is readable by its own user only. */
  int num_peer_uids;                         /* 0..TPS_MAX_PEER_UIDS, else tpsInvalidArgument */
  unsigned int peer_uids[TPS_MAX_PEER_UIDS]; /* [0, num_peer_uids) are read */
  /* The wire (above). 0, tpsWireExact: TPSCOPE_WIRE when set (exact, bf16, int8, fp8, int4 or
   * auto:BUDGET), else exact. Every rank of a communicator must give the same wire. */
  tpsWire_t wire;
  float wire_error_budget; /* tpsWireAuto: the relative RMS error per call allowed, in (0, 1) */
  int reserved[14];        /* zero (tpsConfigInit): room for later options, so the struct keeps its size */
} tpsConfig_t;

/* Fills *config with zeros and tpsBackendAuto: every field takes its default (no peer_uids, the exact wire). */
tpsResult_t tpsConfigInit(tpsConfig_t* config);

/* An AllReduce communicator over N devices of this process (opaque, like ncclComm_t). */
typedef struct tpsComm* tpsComm_t;

/* Creates a communicator over devices[0..ndev-1] (CUDA ordinals, distinct unless
 * config->shared_devices, 2 <= ndev <= 8). Allocates every buffer it will need (pinned host staging,
 * device scratch, NCCL communicators) so that failures happen here, not mid-run. config may be NULL for
 * defaults. Before the p2p backend is used (forced, or set up by auto), one small AllReduce per p2p
 * algorithm over the peer mappings is checked bit for bit against a sum computed on the host (a few
 * milliseconds): where peer writes do not arrive intact, p2p is refused for this communicator, with one
 * line in the log: forced, tpsUnavailable; under auto, the communicator goes on without it. Not
 * thread-safe with other calls on the same communicator. Errors: tpsInvalidArgument (bad ndev,
 * duplicate or missing device, bad config), tpsUnavailable (the selected backend cannot run on these
 * GPUs), tpsCudaError, tpsNcclError. */
tpsResult_t tpsCommCreate(tpsComm_t* comm, int ndev, const int* devices, const tpsConfig_t* config);

/* ---- One rank per process (NCCL's shape) ----------------------------------------------------
 * Engines that run one process per GPU make one communicator per process: one process calls
 * tpsGetUniqueId and passes the id to the others over a channel no other user can read (tpsGetUniqueId
 * says why); every process then calls tpsCommInitRank with the same id and nranks, its own rank and its
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
 * before it starts the ranks). The id holds a 128-bit secret from getrandom(), with which each rank
 * proves to rank 0 that it was given the id, and, drawn apart from it, the name of rank 0's socket,
 * which every user of the host can read (/proc/net/unix) and which tells nothing of the secret. Treat
 * the id as a secret: pass it only over channels other users cannot read (a pipe, inheritance across
 * fork, a file of mode 0600, a store only the job's own processes reach), never on a command line
 * (/proc/PID/cmdline is world-readable) or in a world-readable file. Errors: tpsInvalidArgument for
 * NULL, tpsSystemError when the system gives no random bytes (no weaker id is made in their place). */
tpsResult_t tpsGetUniqueId(tpsUniqueId* id);

/* Joins the communicator of `id` as rank `rank` of `nranks` (2 <= nranks <= 8) on CUDA device `device`
 * of this process, and allocates every buffer it needs, as tpsCommCreate does. Collective: every rank
 * calls it with the same id, nranks and config (backend and tuning must agree, or the ranks' calls will
 * not meet); it returns once all have joined and exchanged their handles, or fails on every rank alike.
 * The wait for the others is bounded by TPSCOPE_BOOTSTRAP_TIMEOUT_MS (default 30000). Ranks on one GPU
 * are refused (tpsInvalidArgument) unless config->shared_devices, as in tpsCommCreate (the grids are
 * then cut by the most ranks any one GPU carries, across processes); their processes time-slice the
 * GPU, so a peer's kernel may wait a whole time slice for the other's. tpsCommGetConfig, the
 * statistics (this rank's GPU in devices[0], ndev 1) and tpsCommGetAsyncError work as for tpsCommCreate,
 * and so does the p2p self-check, whose verdict the ranks agree on (p2p is kept or refused on all).
 * An id serves one communicator: join with a fresh one each time.
 * Who may join. Rank 0 accepts a connection only from a process whose user (as the kernel records it,
 * SO_PEERCRED) is rank 0's own effective uid or one of config->peer_uids, and only once its hello
 * proves the id's secret (compared in constant time), whole within one second of connecting. Every
 * other rank checks rank 0's user the same way, against its own uid and config->peer_uids, before it
 * sends the secret. A refused connection (another user, no proof of the secret, bytes that are no
 * hello, a hello that does not come in time) is logged at WARN with its pid and uid, closed, and never
 * counts as a rank: the real ranks still join. Past 16 connections waiting for their hello at once,
 * rank 0 first reads every hello that has come, then refuses the oldest connection of the process that
 * holds the most of them and tells it to connect again, which a rank does until its timeout: a flood of
 * silent or slow connections, from any number of processes, never pushes a rank out of the join. The
 * refusal a connection is sent says what kind it is and names no process or user (rank 0's log does).
 * What a connection sends, a proven rank's exchanges included, costs rank 0 bounded memory and time.
 * Errors: tpsInvalidArgument (NULL comm, nranks or rank out of range, a device that does not exist,
 * bytes that are not an id, num_peer_uids out of range, ranks disagreeing on nranks, one rank number
 * taken by two processes, ranks sharing a GPU), tpsInvalidUsage (this process already joined with this
 * id; another process listens on the id's socket: another rank 0 of it, or, seen from another rank, a
 * process of a user this rank does not accept, which was sent nothing; rank 0 refused this rank's user),
 * tpsTimeout (a rank did not join in time), tpsUnavailable (the chosen backend cannot run on these
 * GPUs, on some rank), tpsSystemError, tpsCudaError, tpsNcclError. On error *comm is NULL. */
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
tpsResult_t tpsAllReduceWith(tpsComm_t comm, tpsBackend_t backend, void* const* bufs, size_t count, tpsDataType_t dtype,
                             const tpsStream_t* streams);

/* Like tpsAllReduceWith with the wire (tpsWire_t) chosen for this call. tpsWireAuto: the communicator's
 * wire, whatever it is (its config's, TPSCOPE_WIRE's, or auto's pick under its budget), as
 * tpsAllReduceWith runs it; a call has no error budget of its own. tpsWireExact: the dtype's own bytes
 * whatever the communicator's wire, so the result is the exact sum, the bits a communicator on the exact
 * wire gives (what a gather or broadcast made of a sum over zeros needs: each value back unchanged). A
 * compressed wire runs as it does when a config names it, on a communicator of any wire: the host
 * backend and the p2p two-shot carry it, and a call whose algorithm has no such wire (p2p below the
 * two-shot's sizes, NCCL, bf16 for a 16-bit dtype) runs exact. Every rank must pass the same wire for the same call (in
 * one process one call serves every rank; across processes, ranks on different wires do not meet: tpsTimeout, or a
 * wrong sum). The statistics count the call under the path that ran it: "host-kernel" for an exact call on the host
 * kernel path, "host-kernel+int8" for int8. Errors as tpsAllReduceWith, plus tpsInvalidArgument, with
 * nothing enqueued, for a wire outside tpsWire_t. */
tpsResult_t tpsAllReduceWire(tpsComm_t comm, tpsBackend_t backend, tpsWire_t wire, void* const* bufs, size_t count,
                             tpsDataType_t dtype, const tpsStream_t* streams);

/* The reduction fused with what follows it in a transformer layer, for `rows` rows of `width`
 * elements (count = rows x width) per GPU:
 *   sum = the sum over GPUs of partial (as tpsAllReduce computes it);
 *   residual_out[i] = residual_in[i] + sum, rounded to dtype;
 *   normed[i] = residual_out[i] * rsqrt(mean over the row of residual_out^2 + eps) * weight[i],
 * bit-identical on every GPU. weight NULL: the add alone (normed unused). partial's contents after
 * the call are unspecified, and residual_out may be partial itself (a caller then swaps the two
 * buffers' roles). One kernel where the chosen backend has it, which is when all of these hold: the p2p
 * backend; bf16; rows x width x 2 <= TPS_P2P_LL_MAX_BYTES with every buffer 8-byte aligned (the LL
 * one-shot's call); rows <= TPS_FUSED_MAX_ROWS; width a multiple of 4; with a weight, residual_out
 * apart from residual_in (the add alone may update the residual in place). Otherwise tpsUnavailable
 * with nothing enqueued, and the caller runs the reduction, the add and the norm itself. Counted in the
 * statistics under tpsPathP2pLL. Arguments as tpsAllReduceWith, plus tpsInvalidArgument for a NULL
 * residual (or weight / normed) pointer or a non-positive eps. */
tpsResult_t tpsAllReduceAddRmsNorm(tpsComm_t comm, tpsBackend_t backend, void* const* partial,
                                   const void* const* residual_in, void* const* residual_out, const void* const* weight,
                                   void* const* normed, size_t rows, size_t width, float eps, tpsDataType_t dtype,
                                   const tpsStream_t* streams);

/* The configuration the communicator runs with, every field resolved: backend as requested (after
 * TPSCOPE_ALLREDUCE; tpsBackendAuto: chosen per call), the host tunables and spin_timeout_ms after the
 * tune file, the environment and the caller's config (ranks sharing a GPU cut host_blocks), and
 * shared_devices, num_peer_uids and peer_uids as given. Records carry it, so that two runs can be
 * compared setting by setting. Any thread. tpsInvalidArgument for a NULL comm or config. */
tpsResult_t tpsCommGetConfig(tpsComm_t comm, tpsConfig_t* config);

/* Errors that happen after a call returned: tpsTimeout when a kernel gave up waiting for a peer within
 * spin_timeout_ms. Once set the communicator refuses further calls; destroy it. Reads host memory only
 * (no synchronisation, an atomic load: any thread may call it); call it after synchronising the streams
 * to see everything enqueued so far. tpsInvalidArgument for a NULL comm or async_error. */
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

/* Copies the communicator's statistics since its creation or the last tpsCommResetStats into *stats:
 * cells[path][size class] for every call that was enqueued (a call is counted when it is enqueued, so a
 * call captured into a CUDA graph counts once, however often the graph is replayed; a refused call is
 * not counted). ndev and devices[] are the communicator's. Only the tpsNumPaths paths of tpsPath_t are
 * here: tpsCommGetPathStats reads every path. Any thread (under the communicator's lock).
 * tpsInvalidArgument for a NULL comm or stats. */
tpsResult_t tpsCommGetStats(tpsComm_t comm, tpsStats_t* stats);
/* The statistics of one path, 0 <= path < tpsGetPathCount(): cells[size class] for
 * TPS_NUM_SIZE_CLASSES classes, counted as tpsCommGetStats counts them. Any thread.
 * tpsInvalidArgument for a NULL comm or cells, or a path out of range. */
tpsResult_t tpsCommGetPathStats(tpsComm_t comm, int path, tpsStatsCell_t* cells);
/* Sets every cell of the statistics to zero (ndev and devices[] stay). Any thread. tpsInvalidArgument
 * for a NULL comm. */
tpsResult_t tpsCommResetStats(tpsComm_t comm);

/* Names for printing: "host", "host-kernel" (p2p paths: "p2p-ll", "p2p-oneshot", "p2p-twoshot"), "bf16",
 * "<=64KiB". Never NULL ("unknown" outside the range). */
const char* tpsBackendName(tpsBackend_t backend);
const char* tpsPathName(tpsPath_t path);
/* How many paths this library has (tpsNumPaths or more), a path's name (NULL outside
 * 0..tpsGetPathCount()-1), and the path of a name (-1 for none). Any thread. */
int tpsGetPathCount(void);
const char* tpsGetPathName(int path);
int tpsGetPathByName(const char* name);
const char* tpsDataTypeName(tpsDataType_t dtype);
const char* tpsSizeClassName(int size_class);
/* The size class of a message of `bytes` per GPU, and the element size of dtype (0 if unknown). */
int tpsSizeClassOf(size_t bytes);
size_t tpsDataTypeSize(tpsDataType_t dtype);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TPSCOPE_TPSCOPE_H_ */
