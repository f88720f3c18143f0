/*
 * record.h — the one format spec of the NCCL shim's shared-memory ring.
 *
 * Mirrored byte for byte by docs/format/ncclshim-ring.md and parsed by the
 * Go reader internal/agent/nccl (record.go); change all three together and
 * bump LG_RING_VERSION.
 *
 * One ring per process: a regular file <dir>/laggard-nccl.<pid>.<hex ns>
 * (dir is $LAGGARD_SHM_DIR or /dev/shm; the creation time makes the name
 * unique, so a reused pid never meets an old file), mapped MAP_SHARED by
 * the trainer (the producer, any number of threads) and the node agent
 * (the one consumer). The producer holds flock(LOCK_SH) on the file for
 * its lifetime: the agent tells a live producer from a dead one with a
 * non-blocking LOCK_EX attempt, which works across PID namespaces.
 * All integers are little-endian (the shim only builds for x86-64 and
 * aarch64 Linux), naturally aligned.
 *
 *   [0, 4096)                          header (lg_ring_header)
 *   [4096 + i*128, 4096 + (i+1)*128)   slot i, i in [0, capacity)
 *
 * Protocol (Greyhound §4.2: calls logged to shared memory, never blocking
 * the trainer; arch rule 7):
 *   producer: w = write_index; if w - read_index >= capacity → dropped++,
 *             give up (never wait); else CAS write_index w → w+1 (retry on
 *             contention: lock-free), fill slot w % capacity, then
 *             store-release slot.ticket = w + 1.
 *   consumer: for r = read_index: a slot whose ticket == r + 1 is
 *             complete; copy it, then store-release read_index = r + 1 so
 *             the producer may reuse the slot. A slot not complete is
 *             never skipped while the producer lives (a stalled writer
 *             could still be copying: skipping would let the slot be
 *             reused under it and tear a record); once the producer's
 *             flock is gone, incomplete slots are counted as lost.
 *   pause:    the agent arms generation g (odd) by storing pause = g and
 *             releases it by storing g + 1. A call outside a group that
 *             sees an odd pause not equal to pause_expired waits while
 *             pause == g, at most pause_timeout_ms; on timeout it stores
 *             pause_expired = g, so a dead agent costs one timeout, not
 *             one per call.
 * Reservation is a CAS, not a fetch-add, because a fetch-add past a full
 * ring would hand out a ticket whose slot is still unread: that hole could
 * not be told apart from a write in progress.
 */
#ifndef LAGGARD_NCCLSHIM_RECORD_H
#define LAGGARD_NCCLSHIM_RECORD_H

#include <stdint.h>

#define LG_RING_MAGIC 0x31474E49524C474CULL /* "LGLRING1" little-endian */
#define LG_RING_VERSION 2u /* 2: P2P seq per direction, pause generations, flock */
#define LG_RING_HEADER_SIZE 4096u
#define LG_RING_RECORD_SIZE 128u
#define LG_RING_PREFIX "laggard-nccl."
#define LG_JOB_LEN 128
#define LG_HOST_LEN 64

/* Header flags. */
#define LG_HDR_CUDA_EVENTS 0x1u /* device brackets are being measured */

typedef struct lg_ring_header {
	uint64_t magic;            /*   0 LG_RING_MAGIC, stored last (release) */
	uint32_t version;          /*   8 LG_RING_VERSION */
	uint32_t record_size;      /*  12 LG_RING_RECORD_SIZE */
	uint64_t capacity;         /*  16 slots, a power of two */
	uint32_t header_size;      /*  24 LG_RING_HEADER_SIZE */
	uint32_t pid;              /*  28 producer pid */
	uint64_t write_index;      /*  32 next ticket (producer, CAS) */
	uint64_t read_index;       /*  40 next ticket to read (consumer) */
	uint64_t dropped;          /*  48 records lost because the ring was full */
	uint32_t pause;            /*  56 agent: generation; odd = armed, even = released */
	uint32_t pause_timeout_ms; /*  60 agent: bound on one trap (0 = 60000) */
	uint64_t trapped;          /*  64 calls that waited in the trap */
	uint64_t trapped_ns;       /*  72 total time they waited */
	int64_t start_ns;          /*  80 ring creation, CLOCK_REALTIME */
	uint64_t proc_start;       /*  88 /proc/<pid>/stat starttime: pid reuse */
	int32_t rank;              /*  96 $RANK, -1 unknown */
	int32_t world;             /* 100 $WORLD_SIZE, -1 unknown */
	int32_t local_rank;        /* 104 $LOCAL_RANK, -1 unknown */
	uint32_t flags;            /* 108 LG_HDR_* */
	char job[LG_JOB_LEN];      /* 112 $LAGGARD_JOB or $TORCHELASTIC_RUN_ID, NUL-padded */
	char host[LG_HOST_LEN];    /* 240 gethostname, NUL-padded */
	uint32_t pause_expired;    /* 304 shim: last armed generation whose trap timed out */
	uint32_t reserved0;        /* 308 zero */
	uint8_t reserved[LG_RING_HEADER_SIZE - 312]; /* 312 zero */
} lg_ring_header;

/* Record kinds (lg_record.op). 1..9 equal collective.Op in Go. */
enum lg_op {
	LG_OP_ALLREDUCE = 1,
	LG_OP_ALLGATHER = 2,
	LG_OP_REDUCESCATTER = 3,
	LG_OP_BROADCAST = 4,
	LG_OP_REDUCE = 5,
	LG_OP_ALLTOALL = 6,
	LG_OP_SEND = 7,
	LG_OP_RECV = 8,
	/* Communicator lifecycle: comm_id, comm_rank, nranks; aux = parent id
	 * (split) ; color/key for split. */
	LG_OP_COMM_INIT = 64,    /* ncclCommInitRank / InitRankConfig */
	LG_OP_COMM_INIT_ALL = 65,/* ncclCommInitAll, one record per device */
	LG_OP_COMM_SPLIT = 66,   /* ncclCommSplit */
	LG_OP_COMM_DESTROY = 67, /* ncclCommDestroy / ncclCommAbort */
};

/* Record flags. */
#define LG_REC_GROUPED 0x1u /* issued between ncclGroupStart/End */
#define LG_REC_DEVICE 0x2u  /* dev_start_ns/dev_end_ns are set */
#define LG_REC_LAZY 0x4u    /* comm record made at first use (init not seen) */

typedef struct lg_record {
	uint64_t ticket;      /*   0 ring ticket + 1, stored last (release) */
	uint16_t op;          /*   8 enum lg_op */
	uint8_t dtype;        /*  10 ncclDataType_t value, 255 none */
	uint8_t flags;        /*  11 LG_REC_* */
	int32_t comm_rank;    /*  12 rank inside the communicator, -1 unknown */
	uint64_t comm_id;     /*  16 communicator id (hash, see ncclshim.c) */
	int32_t nranks;       /*  24 communicator size, 0 unknown */
	int32_t peer;         /*  28 Send/Recv peer (comm rank), -1 none */
	int64_t seq;          /*  32 collectives: call number on comm_id, from 0;
	                       *     Send/Recv: number on the directed pair
	                       *     (comm_id, src, dst), from 0; -1 none */
	uint64_t count;       /*  40 elements */
	uint64_t bytes;       /*  48 count * sizeof(dtype) */
	uint64_t stream;      /*  56 cudaStream_t value */
	int64_t enter_ns;     /*  64 CLOCK_REALTIME at entry */
	int64_t return_ns;    /*  72 CLOCK_REALTIME at return */
	int64_t dev_start_ns; /*  80 device bracket on the host clock, 0 unknown */
	int64_t dev_end_ns;   /*  88 */
	int32_t root;         /*  96 Broadcast/Reduce root (comm rank), -1 none */
	int32_t redop;        /* 100 ncclRedOp_t value, -1 none */
	uint64_t aux;         /* 104 split: parent comm id */
	int32_t result;       /* 112 ncclResult_t NCCL returned */
	int32_t color;        /* 116 split colour */
	int32_t key;          /* 120 split key */
	uint32_t tid;         /* 124 producer thread id */
} lg_record;

#if defined(__cplusplus)
#define LG_STATIC_ASSERT static_assert
#else
#define LG_STATIC_ASSERT _Static_assert
#endif
#include <stddef.h>
LG_STATIC_ASSERT(sizeof(lg_ring_header) == LG_RING_HEADER_SIZE, "header size");
LG_STATIC_ASSERT(offsetof(lg_ring_header, write_index) == 32, "write_index");
LG_STATIC_ASSERT(offsetof(lg_ring_header, read_index) == 40, "read_index");
LG_STATIC_ASSERT(offsetof(lg_ring_header, pause) == 56, "pause");
LG_STATIC_ASSERT(offsetof(lg_ring_header, rank) == 96, "rank");
LG_STATIC_ASSERT(offsetof(lg_ring_header, job) == 112, "job");
LG_STATIC_ASSERT(offsetof(lg_ring_header, host) == 240, "host");
LG_STATIC_ASSERT(offsetof(lg_ring_header, pause_expired) == 304, "pause_expired");
LG_STATIC_ASSERT(offsetof(lg_ring_header, reserved) == 312, "reserved");
LG_STATIC_ASSERT(sizeof(lg_record) == LG_RING_RECORD_SIZE, "record size");
LG_STATIC_ASSERT(offsetof(lg_record, comm_id) == 16, "comm_id");
LG_STATIC_ASSERT(offsetof(lg_record, seq) == 32, "seq");
LG_STATIC_ASSERT(offsetof(lg_record, enter_ns) == 64, "enter_ns");
LG_STATIC_ASSERT(offsetof(lg_record, root) == 96, "root");
LG_STATIC_ASSERT(offsetof(lg_record, aux) == 104, "aux");
LG_STATIC_ASSERT(offsetof(lg_record, tid) == 124, "tid");

#endif
