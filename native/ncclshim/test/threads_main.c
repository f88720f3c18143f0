/*
 * threads_main.c — a multi-threaded producer for the Go reader's race
 * test (internal/agent/nccl native_test.go): LGTEST_THREADS threads each
 * make LGTEST_CALLS AllReduces on one comm. Every record carries redundant
 * fields — count = thread << 24 | i, stream = ~count, bytes = 4·count — so
 * the reader can tell a torn record from an intact one.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "nccl_api.h"

static ncclComm_t g_comm;
static int g_calls;

static void *worker(void *arg)
{
	uint64_t t = (uint64_t)(uintptr_t)arg;
	for (uint64_t i = 0; i < (uint64_t)g_calls; i++) {
		uint64_t v = t << 24 | i;
		ncclAllReduce(NULL, NULL, v, 7 /* float32 */, 0, g_comm, (void *)(uintptr_t)~v);
	}
	return NULL;
}

int main(void)
{
	int n = atoi(getenv("LGTEST_THREADS") ? getenv("LGTEST_THREADS") : "4");
	g_calls = atoi(getenv("LGTEST_CALLS") ? getenv("LGTEST_CALLS") : "10000");
	ncclUniqueId id = {{0}};
	if (ncclCommInitRank(&g_comm, 1, id, 0) != 0)
		return 3;
	pthread_t th[64];
	if (n > 64)
		n = 64;
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	ncclCommDestroy(g_comm);
	return 0;
}
