/*
 * rank_main.c — one "rank" of a multi-process job for the Go reader's test
 * (internal/agent/nccl native_test.go): joins the communicator named by
 * $LGTEST_UID (same id on every process), makes LGTEST_CALLS AllReduces,
 * splits into two halves by rank parity and makes LGTEST_CALLS/2
 * AllGathers there, a Send/Recv pair inside a group, then exits (or
 * sleeps LGTEST_LINGER_MS first, so the reader sees a live producer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "nccl_api.h"

int main(void)
{
	ncclUniqueId id;
	if (lg_uid_from_env("LGTEST_UID", &id) != 0) {
		fprintf(stderr, "rank_main: LGTEST_UID missing or not 256 hex digits\n");
		return 2;
	}
	int world = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
	int rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
	int calls = atoi(getenv("LGTEST_CALLS") ? getenv("LGTEST_CALLS") : "10");
	ncclComm_t comm, half;
	if (ncclCommInitRank(&comm, world, id, rank) != 0)
		return 3;
	for (int i = 0; i < calls; i++)
		ncclAllReduce(NULL, NULL, 1 << 20, 7 /* float32 */, 0, comm, NULL);
	if (ncclCommSplit(comm, rank % 2, rank, &half, NULL) != 0)
		return 4;
	for (int i = 0; i < calls / 2; i++)
		ncclAllGather(NULL, NULL, 4096, 9 /* bfloat16 */, half, NULL);
	ncclGroupStart();
	ncclSend(NULL, 256, 4, (rank + 1) % world, comm, NULL);
	ncclRecv(NULL, 256, 4, (rank + world - 1) % world, comm, NULL);
	ncclGroupEnd();
	const char *l = getenv("LGTEST_LINGER_MS");
	if (l)
		usleep((useconds_t)atoi(l) * 1000);
	ncclCommDestroy(half);
	ncclCommDestroy(comm);
	return 0;
}
