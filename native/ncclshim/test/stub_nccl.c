/*
 * stub_nccl.c — a stand-in libnccl.so for the shim's tests on machines
 * without a GPU (CI). It implements the interposed symbols trivially, with
 * the same C signatures as NCCL (declared in ../nccl_abi.h): collectives
 * sleep LGSTUB_SLEEP_US microseconds (default 0) and succeed; a Send of
 * exactly 777 elements fails with ncclInvalidArgument (4) so the tests can
 * check the shim passes NCCL's result through untouched.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../nccl_abi.h"

struct lg_nccl_comm {
	int nranks, rank;
	unsigned char id[LG_NCCL_UNIQUE_ID_BYTES];
};

static int sleep_us = -1;

static void work(void)
{
	if (sleep_us < 0) {
		const char *v = getenv("LGSTUB_SLEEP_US");
		sleep_us = v ? atoi(v) : 0;
	}
	if (sleep_us > 0)
		usleep((useconds_t)sleep_us);
}

static ncclComm_t mk(int nranks, int rank)
{
	ncclComm_t c = calloc(1, sizeof *c);
	c->nranks = nranks;
	c->rank = rank;
	return c;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	for (int i = 0; i < LG_NCCL_UNIQUE_ID_BYTES; i++)
		id->internal[i] = (char)rand();
	return 0;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	if (nranks < 1 || rank < 0 || rank >= nranks)
		return 4;
	*comm = mk(nranks, rank);
	memcpy((*comm)->id, id.internal, sizeof id.internal);
	return 0;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg)
{
	(void)cfg;
	return ncclCommInitRank(comm, nranks, id, rank);
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
	(void)devlist;
	for (int i = 0; i < ndev; i++)
		comms[i] = mk(ndev, i);
	return 0;
}

/* Split: members with the same colour form a communicator; the stub cannot
 * see the other ranks, so it takes the size from LGSTUB_SPLIT_SIZE and the
 * rank from the key. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *cfg)
{
	(void)cfg;
	if (color == LG_NCCL_SPLIT_NOCOLOR) {
		*newcomm = NULL;
		return 0;
	}
	const char *v = getenv("LGSTUB_SPLIT_SIZE");
	int n = v ? atoi(v) : comm->nranks;
	*newcomm = mk(n, key % n);
	return 0;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	*count = comm->nranks;
	return 0;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	*rank = comm->rank;
	return 0;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	free(comm);
	return 0;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	free(comm);
	return 0;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
			   cudaStream_t st)
{
	(void)s, (void)r, (void)n, (void)dt, (void)op, (void)c, (void)st;
	work();
	return 0;
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st)
{
	(void)s, (void)r, (void)n, (void)dt, (void)c, (void)st;
	work();
	return 0;
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
			       cudaStream_t st)
{
	(void)s, (void)r, (void)n, (void)dt, (void)op, (void)c, (void)st;
	work();
	return 0;
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t dt, int root, ncclComm_t c,
			   cudaStream_t st)
{
	(void)s, (void)r, (void)n, (void)dt, (void)root, (void)c, (void)st;
	work();
	return 0;
}

/* Like NCCL, the legacy in-place broadcast calls the exported
 * ncclBroadcast: through the PLT, so the shim sees a nested call. */
ncclResult_t ncclBcast(void *buf, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st)
{
	return ncclBroadcast(buf, buf, n, dt, root, c, st);
}

ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t c,
			cudaStream_t st)
{
	(void)s, (void)r, (void)n, (void)dt, (void)op, (void)root, (void)c, (void)st;
	work();
	return 0;
}

ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st)
{
	(void)s, (void)dt, (void)peer, (void)c, (void)st;
	if (n == 777)
		return 4;
	work();
	return 0;
}

ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st)
{
	(void)r, (void)n, (void)dt, (void)peer, (void)c, (void)st;
	work();
	return 0;
}

ncclResult_t ncclAllToAll(const void *s, void *r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st)
{
	(void)s, (void)r, (void)n, (void)dt, (void)c, (void)st;
	work();
	return 0;
}

ncclResult_t ncclGroupStart(void) { return 0; }
ncclResult_t ncclGroupEnd(void) { return 0; }
