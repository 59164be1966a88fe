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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TPSCOPE_TPSCOPE_H_ */
