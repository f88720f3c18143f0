/*
 * nccl_abi.h — the small slice of NCCL's C ABI the shim interposes, declared
 * here from NCCL's public documentation rather than by including nccl.h:
 * the shim must build on machines without the NCCL/CUDA headers (CI has no
 * GPU), and it only needs handles as opaque pointers plus the enum values,
 * which are part of NCCL's stable ABI. Everything is passed through
 * untouched, so a newer NCCL with more enum values still works; only the
 * byte-size table below needs a new entry for a new dtype.
 */
#ifndef LAGGARD_NCCL_ABI_H
#define LAGGARD_NCCL_ABI_H

#include <stddef.h>

typedef struct lg_nccl_comm *ncclComm_t;    /* opaque */
typedef struct lg_cuda_stream *cudaStream_t; /* opaque */
typedef struct lg_nccl_config ncclConfig_t;  /* opaque: only passed through */

/* ncclUniqueId is 128 opaque bytes passed by value. */
#define LG_NCCL_UNIQUE_ID_BYTES 128
typedef struct {
	char internal[LG_NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef int ncclResult_t; /* 0 ncclSuccess … 7 ncclInProgress */
#define LG_NCCL_SUCCESS 0
#define LG_NCCL_INTERNAL_ERROR 3
#define LG_NCCL_INVALID_USAGE 5

/* ncclDataType_t values: ncclInt8 0, ncclUint8 1, ncclInt32 2, ncclUint32 3,
 * ncclInt64 4, ncclUint64 5, ncclFloat16 6, ncclFloat32 7, ncclFloat64 8,
 * ncclBfloat16 9, ncclFloat8e4m3 10, ncclFloat8e5m2 11. */
typedef int ncclDataType_t;
/* ncclRedOp_t: ncclSum 0, ncclProd 1, ncclMax 2, ncclMin 3, ncclAvg 4,
 * then dynamically created ops. */
typedef int ncclRedOp_t;

#define LG_NCCL_SPLIT_NOCOLOR (-1)

#endif
