/*
 * test_shim.c — the shim's C tests, run with LD_PRELOAD=liblaggard_nccl.so
 * over the stub libnccl.so (see run_tests.sh). Each case is one process:
 *   ./test_shim CASE      exit 0 on success, messages on stderr
 * The program reads its own ring back through record.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../record.h"
#include "nccl_api.h"

static int failures;
#define CHECK(cond, ...)                                                         \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                            \
			fprintf(stderr, "\n");                                   \
			failures++;                                              \
		}                                                                \
	} while (0)

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef struct {
	lg_ring_header *h;
	lg_record *slots;
	size_t len;
} ring;

/* ring_path finds pid's ring, <dir>/laggard-nccl.<pid>.<hex>. */
static int ring_path(pid_t pid, char *path, size_t n)
{
	const char *dir = getenv("LAGGARD_SHM_DIR");
	dir = dir ? dir : "/dev/shm";
	char pre[64];
	snprintf(pre, sizeof pre, "%s%d.", LG_RING_PREFIX, (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	struct dirent *e;
	int found = -1;
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, pre, strlen(pre)) == 0) {
			snprintf(path, n, "%s/%s", dir, e->d_name);
			found = 0;
		}
	closedir(d);
	return found;
}

/* ring_locked: 1 while the producer holds its flock (alive), 0 when a
 * LOCK_EX would succeed (dead), -1 no ring. */
static int ring_locked(pid_t pid)
{
	char path[4096];
	if (ring_path(pid, path, sizeof path) != 0)
		return -1;
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	int locked = flock(fd, LOCK_EX | LOCK_NB) != 0;
	close(fd);
	return locked;
}

static int ring_open(ring *r, pid_t pid)
{
	char path[4096];
	if (ring_path(pid, path, sizeof path) != 0) {
		errno = ENOENT;
		return -1;
	}
	int fd = open(path, O_RDWR);
	if (fd < 0)
		return -1;
	struct stat st;
	fstat(fd, &st);
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -1;
	r->h = m;
	r->slots = (lg_record *)((char *)m + LG_RING_HEADER_SIZE);
	r->len = (size_t)st.st_size;
	return 0;
}

/* drain copies every complete record from read_index on into out. */
static size_t drain(ring *r, lg_record *out, size_t max)
{
	size_t n = 0;
	uint64_t rd = __atomic_load_n(&r->h->read_index, __ATOMIC_RELAXED);
	for (; n < max; rd++) {
		lg_record *s = &r->slots[rd & (r->h->capacity - 1)];
		if (__atomic_load_n(&s->ticket, __ATOMIC_ACQUIRE) != rd + 1)
			break;
		out[n++] = *s;
		__atomic_store_n(&r->h->read_index, rd + 1, __ATOMIC_RELEASE);
	}
	return n;
}

static ncclUniqueId fixed_id(int salt)
{
	ncclUniqueId id;
	for (int i = 0; i < LG_NCCL_UNIQUE_ID_BYTES; i++)
		id.internal[i] = (char)(i * 7 + salt);
	return id;
}

/* ---- cases ---- */

static int t_basic(void)
{
	ncclComm_t c;
	int64_t t0 = now_ns();
	CHECK(ncclCommInitRank(&c, 4, fixed_id(1), 2) == 0, "init");
	void *stream = (void *)0x1234;
	CHECK(ncclAllReduce(NULL, NULL, 1000, 7, 0, c, stream) == 0, "allreduce");
	CHECK(ncclAllGather(NULL, NULL, 10, 8, c, NULL) == 0, "allgather");
	CHECK(ncclReduceScatter(NULL, NULL, 3, 6, 2, c, NULL) == 0, "reducescatter");
	CHECK(ncclBroadcast(NULL, NULL, 5, 0, 1, c, NULL) == 0, "broadcast");
	CHECK(ncclReduce(NULL, NULL, 5, 9, 4, 3, c, NULL) == 0, "reduce");
	CHECK(ncclBcast(NULL, 16, 1, 0, c, NULL) == 0, "bcast");
	ncclGroupStart();
	CHECK(ncclSend(NULL, 8, 4, 3, c, NULL) == 0, "send");
	CHECK(ncclRecv(NULL, 8, 4, 1, c, NULL) == 0, "recv");
	ncclGroupEnd();
	/* NCCL's own error passes through untouched */
	CHECK(ncclSend(NULL, 777, 4, 3, c, NULL) == 4, "send 777 must return the stub's 4");
	ncclCommDestroy(c);
	int64_t t1 = now_ns();

	ring r;
	if (ring_open(&r, getpid()) != 0) {
		fprintf(stderr, "no ring: %s\n", strerror(errno));
		return 1;
	}
	CHECK(r.h->magic == LG_RING_MAGIC, "magic %llx", (unsigned long long)r.h->magic);
	CHECK(r.h->version == LG_RING_VERSION && r.h->record_size == 128 && r.h->header_size == 4096, "header");
	CHECK(r.h->pid == (uint32_t)getpid(), "pid");
	CHECK(r.h->rank == 2 && r.h->world == 4 && r.h->local_rank == 0, "rank/world/local %d %d %d", r.h->rank,
	      r.h->world, r.h->local_rank);
	CHECK(strcmp(r.h->job, "job-basic") == 0, "job %s", r.h->job);
	CHECK(r.h->host[0] != 0, "host");
	CHECK(r.h->proc_start != 0, "proc_start");
	lg_record rec[64];
	size_t n = drain(&r, rec, 64);
	CHECK(n == 11, "records %zu, want 11 (init, 9 calls, destroy)", n);
	if (n != 11)
		return 1;
	CHECK(rec[0].op == LG_OP_COMM_INIT && rec[0].nranks == 4 && rec[0].comm_rank == 2 && rec[0].seq == -1,
	      "init record op=%d n=%d r=%d", rec[0].op, rec[0].nranks, rec[0].comm_rank);
	uint64_t id = rec[0].comm_id;
	CHECK(id != 0, "comm id");
	static const struct {
		int op, dtype, peer, root, grouped;
		uint64_t count, bytes;
		int64_t seq; /* Send/Recv: on their directed pair's counter */
	} want[] = {
		{LG_OP_ALLREDUCE, 7, -1, -1, 0, 1000, 4000, 0}, {LG_OP_ALLGATHER, 8, -1, -1, 0, 10, 80, 1},
		{LG_OP_REDUCESCATTER, 6, -1, -1, 0, 3, 6, 2},   {LG_OP_BROADCAST, 0, -1, 1, 0, 5, 5, 3},
		{LG_OP_REDUCE, 9, -1, 3, 0, 5, 10, 4},          {LG_OP_BROADCAST, 1, -1, 0, 0, 16, 16, 5},
		{LG_OP_SEND, 4, 3, -1, 1, 8, 64, 0},            {LG_OP_RECV, 4, 1, -1, 1, 8, 64, 0},
		{LG_OP_SEND, 4, 3, -1, 0, 777, 777 * 8, 1},
	};
	for (int i = 0; i < 9; i++) {
		lg_record *x = &rec[i + 1];
		CHECK(x->ticket == (uint64_t)i + 2, "ticket %d", i);
		CHECK(x->op == want[i].op, "call %d op %d want %d", i, x->op, want[i].op);
		CHECK(x->dtype == want[i].dtype, "call %d dtype %d", i, x->dtype);
		CHECK(x->count == want[i].count && x->bytes == want[i].bytes, "call %d count %llu bytes %llu", i,
		      (unsigned long long)x->count, (unsigned long long)x->bytes);
		CHECK(x->peer == want[i].peer && x->root == want[i].root, "call %d peer %d root %d", i, x->peer, x->root);
		CHECK(!!(x->flags & LG_REC_GROUPED) == want[i].grouped, "call %d grouped", i);
		CHECK(x->seq == want[i].seq, "call %d seq %lld want %lld", i, (long long)x->seq, (long long)want[i].seq);
		CHECK(x->comm_id == id && x->comm_rank == 2 && x->nranks == 4, "call %d comm", i);
		CHECK(x->enter_ns >= t0 && x->enter_ns <= x->return_ns && x->return_ns <= t1, "call %d times", i);
		CHECK(x->dev_start_ns == 0 && x->dev_end_ns == 0, "no device times without CUDA");
		CHECK(x->tid != 0, "tid");
	}
	CHECK(rec[1].stream == 0x1234 && rec[1].redop == 0, "stream/redop");
	CHECK(rec[9].result == 4, "result recorded %d", rec[9].result);
	CHECK(rec[10].op == LG_OP_COMM_DESTROY && rec[10].comm_id == id, "destroy");
	CHECK(r.h->dropped == 0, "dropped %llu", (unsigned long long)r.h->dropped);
	return failures;
}

/* Two "ranks" in one process join the same unique id and split it: the
 * children with equal colour get equal ids, different colours differ,
 * and a second split of the same parent gets a new id. */
static int t_split(void)
{
	ncclComm_t a, b, a1, b1, a2, b2, bx;
	ncclUniqueId id = fixed_id(3);
	ncclCommInitRank(&a, 2, id, 0);
	ncclCommInitRank(&b, 2, id, 1);
	ncclCommSplit(a, 5, 0, &a1, NULL);
	ncclCommSplit(b, 5, 1, &b1, NULL);
	ncclCommSplit(a, 5, 0, &a2, NULL);
	ncclCommSplit(b, 6, 1, &b2, NULL);
	ncclCommSplit(b, LG_NCCL_SPLIT_NOCOLOR, 1, &bx, NULL);
	CHECK(bx == NULL, "nocolor gives no comm");
	ncclAllReduce(NULL, NULL, 1, 7, 0, a1, NULL);
	ncclAllReduce(NULL, NULL, 1, 7, 0, a1, NULL);
	ncclAllReduce(NULL, NULL, 1, 7, 0, b1, NULL);
	ring r;
	if (ring_open(&r, getpid()) != 0)
		return 1;
	lg_record rec[64];
	size_t n = drain(&r, rec, 64);
	CHECK(n == 9, "records %zu want 9", n);
	if (n != 9)
		return 1;
	CHECK(rec[0].comm_id == rec[1].comm_id, "same unique id, same comm id");
	uint64_t parent = rec[0].comm_id;
	for (int i = 2; i < 6; i++)
		CHECK(rec[i].op == LG_OP_COMM_SPLIT && rec[i].aux == parent, "split %d parent", i);
	CHECK(rec[2].comm_id == rec[3].comm_id, "a1 == b1");
	CHECK(rec[4].comm_id != rec[2].comm_id, "second split differs");
	CHECK(rec[5].comm_id != rec[4].comm_id && rec[5].comm_id != rec[2].comm_id, "other colour differs");
	CHECK(rec[2].color == 5 && rec[5].color == 6, "colours");
	CHECK(rec[6].seq == 0 && rec[7].seq == 1 && rec[8].seq == 0, "per-comm seq %lld %lld %lld",
	      (long long)rec[6].seq, (long long)rec[7].seq, (long long)rec[8].seq);
	CHECK(rec[6].comm_id == rec[2].comm_id && rec[8].comm_id == rec[2].comm_id, "calls on split comm");
	CHECK(rec[6].nranks == 2, "split size from ncclCommCount: %d", rec[6].nranks);
	return failures;
}

/* No reader, a 64-slot ring: the first 64 records land, the rest are
 * counted as dropped, and every call still succeeds. */
static int t_full(void)
{
	ncclComm_t c;
	ncclCommInitRank(&c, 1, fixed_id(4), 0);
	for (int i = 0; i < 1000; i++)
		CHECK(ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL) == 0, "call %d", i);
	ring r;
	if (ring_open(&r, getpid()) != 0)
		return 1;
	CHECK(r.h->capacity == 64, "capacity %llu", (unsigned long long)r.h->capacity);
	CHECK(r.h->write_index == 64, "write_index %llu", (unsigned long long)r.h->write_index);
	CHECK(r.h->dropped == 1001 - 64, "dropped %llu want %d", (unsigned long long)r.h->dropped, 1001 - 64);
	/* a reader frees room: calls land again, seq keeps counting */
	lg_record rec[64];
	CHECK(drain(&r, rec, 64) == 64, "drain");
	ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL);
	CHECK(drain(&r, rec, 64) == 1 && rec[0].seq == 1000, "after drain seq %lld", (long long)rec[0].seq);
	return failures;
}

/* Threads hammer a small ring while a reader drains it: nothing is lost
 * that is not counted, nothing is read twice, seqs are unique. */
#define NTHREADS 6
#define PERTHREAD 20000
static ncclComm_t g_shared;
static volatile int g_done;

/* Every record carries redundant fields (count = thread << 24 | i, stream
 * = ~count, bytes = 4·count): a record torn between two writers fails
 * tornfree() (review N2). */
static int tornfree(const lg_record *x)
{
	return x->bytes == x->count * 4 && x->stream == ~x->count && x->dtype == 7;
}

static void *worker(void *arg)
{
	ncclComm_t own = ((ncclComm_t *)arg)[0];
	uint64_t t = (uint64_t)(uintptr_t)((ncclComm_t *)arg)[1];
	for (uint64_t i = 0; i < PERTHREAD; i++) {
		uint64_t v = t << 24 | i;
		ncclAllReduce(NULL, NULL, v, 7, 0, g_shared, (void *)(uintptr_t)~v);
		ncclAllGather(NULL, NULL, v, 7, own, (void *)(uintptr_t)~v);
	}
	return NULL;
}

static int t_threads(void)
{
	ncclComm_t own[NTHREADS];
	ncclCommInitRank(&g_shared, 1, fixed_id(5), 0);
	for (int i = 0; i < NTHREADS; i++)
		ncclCommInitRank(&own[i], 1, fixed_id(10 + i), 0);
	ring r;
	if (ring_open(&r, getpid()) != 0)
		return 1;
	pthread_t th[NTHREADS];
	ncclComm_t args[NTHREADS][2];
	for (int i = 0; i < NTHREADS; i++) {
		args[i][0] = own[i];
		args[i][1] = (ncclComm_t)(uintptr_t)(i + 1);
		pthread_create(&th[i], NULL, worker, args[i]);
	}
	size_t torn = 0;
	size_t total = NTHREADS * PERTHREAD;
	uint8_t *seen = calloc(total, 1);
	size_t got = 0, comm_recs = 0, own_recs = 0;
	lg_record buf[256];
	int joined = 0, done[NTHREADS] = {0};
	for (;;) {
		size_t n = drain(&r, buf, 256);
		for (size_t i = 0; i < n; i++) {
			if (buf[i].op == LG_OP_COMM_INIT) {
				comm_recs++;
				continue;
			}
			if (!tornfree(&buf[i]) && torn++ < 5)
				CHECK(0, "torn record: count %llx stream %llx bytes %llx",
				      (unsigned long long)buf[i].count, (unsigned long long)buf[i].stream,
				      (unsigned long long)buf[i].bytes);
			if (buf[i].op == LG_OP_ALLGATHER) {
				own_recs++;
				continue;
			}
			got++;
			if (buf[i].seq < 0 || (size_t)buf[i].seq >= total || seen[buf[i].seq]++)
				CHECK(0, "bad or repeated seq %lld", (long long)buf[i].seq);
		}
		if (n == 0) {
			if (joined)
				break;
			if (__atomic_load_n(&r.h->write_index, __ATOMIC_ACQUIRE) ==
			    __atomic_load_n(&r.h->read_index, __ATOMIC_ACQUIRE)) {
				int alive = 0;
				for (int i = 0; i < NTHREADS; i++) {
					if (!done[i] && pthread_tryjoin_np(th[i], NULL) == 0)
						done[i] = 1;
					alive += !done[i];
				}
				if (!alive)
					joined = 1;
			}
			sched_yield();
		}
	}
	uint64_t dropped = r.h->dropped;
	CHECK(comm_recs == NTHREADS + 1, "comm records %zu", comm_recs);
	CHECK(got + own_recs + dropped == 2 * total, "read %zu + %zu, dropped %llu, want %zu", got, own_recs,
	      (unsigned long long)dropped, 2 * total);
	CHECK(r.h->write_index == r.h->read_index, "all read");
	fprintf(stderr, "threads: %zu records read, %llu dropped\n", got + own_recs, (unsigned long long)dropped);
	free(seen);
	return failures;
}

/* The pause trap holds the next call until the flag clears. */
static ring g_pr;
static void *unpause(void *arg)
{
	usleep((useconds_t)(intptr_t)arg * 1000);
	__atomic_store_n(&g_pr.h->pause, 2, __ATOMIC_RELEASE); /* release generation 1 */
	return NULL;
}

static int t_pause(void)
{
	ncclComm_t c;
	ncclCommInitRank(&c, 1, fixed_id(6), 0);
	if (ring_open(&g_pr, getpid()) != 0)
		return 1;
	/* held until cleared after 150 ms */
	g_pr.h->pause_timeout_ms = 5000;
	__atomic_store_n(&g_pr.h->pause, 1, __ATOMIC_RELEASE); /* arm generation 1 */
	pthread_t th;
	pthread_create(&th, NULL, unpause, (void *)(intptr_t)150);
	int64_t t0 = now_ns();
	CHECK(ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL) == 0, "call");
	int64_t held = now_ns() - t0;
	pthread_join(th, NULL);
	CHECK(held >= 140000000 && held < 2000000000, "held %lld ns, want ~150 ms", (long long)held);
	CHECK(g_pr.h->trapped == 1, "trapped %llu", (unsigned long long)g_pr.h->trapped);
	CHECK(g_pr.h->trapped_ns >= 140000000, "trapped_ns %llu", (unsigned long long)g_pr.h->trapped_ns);
	/* unpaused: no delay */
	t0 = now_ns();
	ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL);
	CHECK(now_ns() - t0 < 50000000, "unpaused call was slow");
	/* never cleared (the agent died): the timeout releases it, once */
	g_pr.h->pause_timeout_ms = 100;
	__atomic_store_n(&g_pr.h->pause, 3, __ATOMIC_RELEASE); /* arm generation 3 */
	t0 = now_ns();
	CHECK(ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL) == 0, "call");
	held = now_ns() - t0;
	CHECK(held >= 95000000 && held < 2000000000, "timeout hold %lld ns, want ~100 ms", (long long)held);
	CHECK(g_pr.h->trapped == 2, "trapped %llu", (unsigned long long)g_pr.h->trapped);
	CHECK(g_pr.h->pause_expired == 3, "pause_expired %u", g_pr.h->pause_expired);
	/* B3: the stale generation must not hold any later call */
	t0 = now_ns();
	for (int i = 0; i < 5; i++)
		ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL);
	ncclGroupStart();
	ncclGroupEnd();
	CHECK(now_ns() - t0 < 50000000, "an expired generation trapped again: %lld ns", (long long)(now_ns() - t0));
	CHECK(g_pr.h->trapped == 2, "trapped %llu after expiry", (unsigned long long)g_pr.h->trapped);
	/* a new generation traps again */
	__atomic_store_n(&g_pr.h->pause, 5, __ATOMIC_RELEASE);
	t0 = now_ns();
	ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL);
	CHECK(now_ns() - t0 >= 95000000, "generation 5 did not trap");
	lg_record rec[16];
	size_t n = drain(&g_pr, rec, 16);
	CHECK(n == 10, "records %zu", n);
	return failures;
}

/* The ring directory is missing: every call still works and returns
 * NCCL's result; no file appears anywhere. */
static int t_nodir(void)
{
	ncclComm_t c;
	CHECK(ncclCommInitRank(&c, 2, fixed_id(7), 1) == 0, "init");
	CHECK(ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL) == 0, "allreduce");
	CHECK(ncclSend(NULL, 777, 4, 0, c, NULL) == 4, "send error passes through");
	CHECK(ncclCommDestroy(c) == 0, "destroy");
	ring r;
	CHECK(ring_open(&r, getpid()) != 0, "no ring expected");
	return failures;
}

/* A forked child writes its own ring, not the parent's. */
static int t_fork(void)
{
	ncclComm_t c;
	ncclCommInitRank(&c, 1, fixed_id(8), 0);
	ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL);
	pid_t child = fork();
	if (child == 0) {
		ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL);
		_exit(0);
	}
	int st;
	waitpid(child, &st, 0);
	ring p, k;
	CHECK(ring_open(&p, getpid()) == 0, "parent ring");
	CHECK(ring_open(&k, child) == 0, "child ring");
	if (failures)
		return failures;
	CHECK(p.h->write_index == 2, "parent records %llu", (unsigned long long)p.h->write_index);
	CHECK(k.h->write_index == 2 && k.h->pid == (uint32_t)child, "child records %llu",
	      (unsigned long long)k.h->write_index);
	lg_record rec[4];
	CHECK(drain(&k, rec, 4) == 2 && rec[0].op == LG_OP_COMM_INIT && (rec[0].flags & LG_REC_LAZY), "child announces the inherited comm lazily");
	/* B4: liveness is the flock; the child's exit (and its closing the
	 * inherited fd) must not release the parent's */
	CHECK(ring_locked(getpid()) == 1, "parent ring not locked while the parent lives");
	CHECK(ring_locked(child) == 0, "dead child's ring still locked");
	return failures;
}

/* B4: a child that outlives its parent must not keep the parent's ring
 * locked (it inherited the fd and the mapping). */
static int t_orphan(void)
{
	int pfd[2], rdy[2];
	if (pipe(pfd) != 0 || pipe(rdy) != 0)
		return 1;
	pid_t a = fork();
	if (a == 0) {
		ncclComm_t c;
		ncclCommInitRank(&c, 1, fixed_id(12), 0);
		ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL);
		pid_t b = fork();
		if (b == 0) {
			/* fork() returned here, so the shim's at-fork child handler
			 * has run: tell the parent before it exits, or the check
			 * below could run before this process let go of the lock. */
			close(pfd[1]);
			(void)!write(rdy[1], "r", 1);
			char x;
			(void)!read(pfd[0], &x, 1); /* live until the test is done */
			_exit(0);
		}
		char r;
		(void)!read(rdy[0], &r, 1);
		_exit(0);
	}
	close(rdy[1]);
	close(rdy[0]);
	int st;
	waitpid(a, &st, 0);
	CHECK(ring_locked(a) == 0, "dead parent's ring still locked by its live child");
	close(pfd[1]);
	close(pfd[0]);
	return failures;
}

/* B1: Send/Recv are numbered per directed pair; they never shift the
 * collective numbering of the comm. */
static int t_p2p(void)
{
	ncclComm_t c;
	ncclCommInitRank(&c, 4, fixed_id(11), 0);
	ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL); /* AR 0 */
	ncclSend(NULL, 1, 7, 1, c, NULL);            /* send→1 0 */
	ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL); /* AR 1 */
	ncclGroupStart();
	ncclRecv(NULL, 1, 7, 1, c, NULL);            /* recv←1 0 */
	ncclSend(NULL, 1, 7, 1, c, NULL);            /* send→1 1 */
	ncclSend(NULL, 1, 7, 2, c, NULL);            /* send→2 0 */
	ncclGroupEnd();
	ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL); /* AR 2 */
	ncclCommDestroy(c);
	ring r;
	if (ring_open(&r, getpid()) != 0)
		return 1;
	lg_record rec[16];
	size_t n = drain(&r, rec, 16);
	CHECK(n == 9, "records %zu", n);
	if (n != 9)
		return 1;
	static const int64_t seq[] = {0, 0, 1, 0, 1, 0, 2};
	static const int op[] = {LG_OP_ALLREDUCE, LG_OP_SEND, LG_OP_ALLREDUCE, LG_OP_RECV, LG_OP_SEND, LG_OP_SEND, LG_OP_ALLREDUCE};
	for (int i = 0; i < 7; i++)
		CHECK(rec[i + 1].op == op[i] && rec[i + 1].seq == seq[i], "call %d op %d seq %lld want %lld", i,
		      rec[i + 1].op, (long long)rec[i + 1].seq, (long long)seq[i]);
	return failures;
}

/* R8: destroyed comms free their table entries: after many create/destroy
 * cycles a new comm still gets an id and numbers its calls. */
static int t_churn(void)
{
	/* keep every destroyed comm's memory so NCCL (the stub) hands out
	 * 20000 distinct pointers, as a long job's reconfigurations would */
	static ncclComm_t dead[20000];
	static void *hold[20000];
	for (int i = 0; i < 20000; i++) {
		ncclCommInitRank(&dead[i], 2, fixed_id(i & 0x7f), 0);
		ncclSend(NULL, 1, 7, 1, dead[i], NULL);
		ncclCommDestroy(dead[i]);
		hold[i] = malloc(128 + 2 * sizeof(int)); /* occupy the freed block (stub comm size) */
	}
	CHECK(dead[0] != dead[1] && dead[1] != dead[2] && hold[0] != NULL, "comm pointers were reused: the case tests nothing");
	ring r;
	if (ring_open(&r, getpid()) != 0)
		return 1;
	__atomic_store_n(&r.h->read_index, __atomic_load_n(&r.h->write_index, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
	ncclComm_t c;
	ncclCommInitRank(&c, 2, fixed_id(200), 0);
	ncclAllReduce(NULL, NULL, 1, 7, 0, c, NULL);
	ncclSend(NULL, 1, 7, 1, c, NULL);
	lg_record rec[4];
	size_t n = drain(&r, rec, 4);
	CHECK(n == 3, "records %zu", n);
	CHECK(rec[1].comm_id != 0 && rec[1].seq == 0, "call after churn: id %llx seq %lld",
	      (unsigned long long)rec[1].comm_id, (long long)rec[1].seq);
	CHECK(rec[2].comm_id != 0 && rec[2].seq == 0, "send after churn: seq %lld", (long long)rec[2].seq);
	return failures;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(void);
	} cases[] = {{"basic", t_basic}, {"split", t_split}, {"full", t_full}, {"threads", t_threads},
		     {"pause", t_pause}, {"nodir", t_nodir}, {"fork", t_fork},    {"p2p", t_p2p},
		     {"churn", t_churn}, {"orphan", t_orphan}};
	if (argc != 2) {
		fprintf(stderr, "usage: test_shim CASE\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		if (strcmp(cases[i].name, argv[1]) == 0)
			return cases[i].fn() ? 1 : 0;
	fprintf(stderr, "unknown case %s\n", argv[1]);
	return 2;
}
