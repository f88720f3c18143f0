/*
 * liblaggard_nccl.so — an LD_PRELOAD shim over NCCL's top-level API
 * (Greyhound §4.2 "Monitor": intercept communication calls and log their
 * types and timestamps to shared memory; §4.3: CUDA events around calls
 * and a trap that hangs training for validation).
 *
 * Rules (docs/design ARCHITECTURE rule 7): never block, never fail, never
 * change what NCCL returns. Anything that goes wrong inside the shim turns
 * the recording off and keeps forwarding.
 *
 * Environment:
 *   LAGGARD_SHM_DIR            ring directory (default /dev/shm)
 *   LAGGARD_NCCL_RING_SLOTS    ring capacity, a power of two (default 16384)
 *   LAGGARD_NCCL_DISABLE=1     forward only
 *   LAGGARD_NCCL_CUDA_EVENTS=1 device brackets via libcudart (GPU hosts)
 *   LAGGARD_JOB | TORCHELASTIC_RUN_ID, RANK, WORLD_SIZE, LOCAL_RANK
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "nccl_abi.h"
#include "record.h"

#define LG_EXPORT __attribute__((visibility("default")))
#define LG_LIKELY(x) __builtin_expect(!!(x), 1)
#define LG_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define LG_NOINLINE __attribute__((noinline))

/* ---------- clocks, env ---------- */

static inline int64_t lg_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int lg_env_int(const char *name, int def)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	char *end;
	long x = strtol(v, &end, 10);
	if (*end || x < -1 || x > 0x7fffffff)
		return def;
	return (int)x;
}

static uint64_t lg_mix(uint64_t x)
{ /* splitmix64 finaliser: ids are hashes, spread them */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static uint64_t lg_hash_bytes(const void *p, size_t n, uint64_t seed)
{ /* FNV-1a 64 then mixed; equal bytes → equal id on every rank */
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return lg_mix(h);
}

/* ---------- the ring ---------- */

static lg_ring_header *g_ring;    /* NULL: not recording */
static lg_record *g_slots;
static uint64_t g_mask;
static size_t g_map_len;
static int g_state;               /* 0 not tried, 1 trying, 2 done */
static int g_cuda_wanted;
static pid_t g_pid;
static int g_ring_fd = -1;       /* held open with flock(LOCK_SH): liveness */
static void *g_ring_mem;          /* the mapping (it keeps the lock's file open too) */

static uint64_t lg_proc_start(pid_t pid)
{ /* field 22 of /proc/<pid>/stat, after the parenthesised comm */
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	p++;
	for (int field = 2; field < 22 && p; field++) {
		p = strchr(p + 1, ' ');
	}
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

static void lg_copy_env(char *dst, size_t n, const char *a, const char *b)
{
	const char *v = getenv(a);
	if ((!v || !*v) && b)
		v = getenv(b);
	if (v)
		strncpy(dst, v, n - 1);
}

static void lg_ring_create(void)
{
	const char *off = getenv("LAGGARD_NCCL_DISABLE");
	if (off && *off && strcmp(off, "0") != 0)
		return;
	const char *dir = getenv("LAGGARD_SHM_DIR");
	if (!dir || !*dir)
		dir = "/dev/shm";
	long slots = lg_env_int("LAGGARD_NCCL_RING_SLOTS", 16384);
	if (slots < 8 || slots > (1 << 24) || (slots & (slots - 1)))
		slots = 16384;
	g_pid = getpid();
	int64_t born = lg_now();
	char path[4096];
	int fd = -1;
	/* <pid>.<creation ns>: unique, so a reused pid never meets (or
	 * unlinks) another process's ring, live or not */
	for (int try = 0; try < 8 && fd < 0; try++) {
		if (snprintf(path, sizeof path, "%s/%s%d.%llx", dir, LG_RING_PREFIX, (int)g_pid,
			     (unsigned long long)(born + try)) >= (int)sizeof path)
			return;
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0 && errno != EEXIST)
			return; /* missing dir, no permission: just forward */
	}
	if (fd < 0)
		return;
	/* the lock says "alive" for as long as this process (not a forked
	 * child: see lg_atfork_child) lives; taken before the magic, so the
	 * agent never sees a ready ring without it. Never wait for it. */
	if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
		close(fd);
		unlink(path);
		return;
	}
	size_t len = LG_RING_HEADER_SIZE + (size_t)slots * LG_RING_RECORD_SIZE;
	if (ftruncate(fd, (off_t)len) != 0) {
		close(fd);
		unlink(path);
		return;
	}
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		close(fd);
		unlink(path);
		return;
	}
	g_ring_fd = fd;
	g_ring_mem = m;
	lg_ring_header *h = m;
	h->version = LG_RING_VERSION;
	h->record_size = LG_RING_RECORD_SIZE;
	h->capacity = (uint64_t)slots;
	h->header_size = LG_RING_HEADER_SIZE;
	h->pid = (uint32_t)g_pid;
	h->start_ns = born;
	h->proc_start = lg_proc_start(g_pid);
	h->rank = lg_env_int("RANK", -1);
	h->world = lg_env_int("WORLD_SIZE", -1);
	h->local_rank = lg_env_int("LOCAL_RANK", -1);
	h->flags = g_cuda_wanted ? LG_HDR_CUDA_EVENTS : 0;
	lg_copy_env(h->job, sizeof h->job, "LAGGARD_JOB", "TORCHELASTIC_RUN_ID");
	gethostname(h->host, sizeof h->host - 1);
	g_slots = (lg_record *)((char *)m + LG_RING_HEADER_SIZE);
	g_mask = (uint64_t)slots - 1;
	g_map_len = len;
	/* the reader ignores a file until its magic is there */
	__atomic_store_n(&h->magic, LG_RING_MAGIC, __ATOMIC_RELEASE);
	__atomic_store_n(&g_ring, h, __ATOMIC_RELEASE);
}

static void lg_cuda_init(void);

/* lg_ring returns the ring, creating it on the first intercepted call so
 * processes that load the shim but never call NCCL leave no file. */
static inline lg_ring_header *lg_ring(void)
{
	lg_ring_header *h = __atomic_load_n(&g_ring, __ATOMIC_ACQUIRE);
	if (LG_LIKELY(h != NULL))
		return h;
	int st = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);
	if (st == 2)
		return NULL;
	int zero = 0;
	if (st == 0 && __atomic_compare_exchange_n(&g_state, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		const char *ev = getenv("LAGGARD_NCCL_CUDA_EVENTS");
		g_cuda_wanted = ev && strcmp(ev, "1") == 0;
		lg_ring_create();
		if (g_cuda_wanted && g_ring)
			lg_cuda_init();
		__atomic_store_n(&g_state, 2, __ATOMIC_RELEASE);
		return __atomic_load_n(&g_ring, __ATOMIC_ACQUIRE);
	}
	return NULL; /* another thread is creating it: skip this record */
}

static void lg_atfork_child(void);

__attribute__((constructor)) static void lg_init(void)
{
	pthread_atfork(NULL, NULL, lg_atfork_child);
}

static __thread uint32_t t_tid;

static inline uint32_t lg_tid(void)
{
	if (LG_UNLIKELY(t_tid == 0))
		t_tid = (uint32_t)syscall(SYS_gettid);
	return t_tid;
}

/* lg_publish copies r into the next free slot, or counts a drop. */
static void lg_publish(lg_ring_header *h, const lg_record *r)
{
	uint64_t w = __atomic_load_n(&h->write_index, __ATOMIC_RELAXED);
	for (;;) {
		uint64_t rd = __atomic_load_n(&h->read_index, __ATOMIC_ACQUIRE);
		if (w - rd > g_mask) { /* full: never wait (arch rule 7) */
			__atomic_fetch_add(&h->dropped, 1, __ATOMIC_RELAXED);
			return;
		}
		if (__atomic_compare_exchange_n(&h->write_index, &w, w + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			break;
	}
	lg_record *s = &g_slots[w & g_mask];
	memcpy((char *)s + 8, (const char *)r + 8, sizeof *r - 8);
	__atomic_store_n(&s->ticket, w + 1, __ATOMIC_RELEASE);
}

/* ---------- communicators: id, size, rank, per-comm sequence ---------- */

#define LG_COMMS 4096 /* open addressing, never resized */
#define LG_PROBE 64   /* probe bound: a full neighbourhood costs ≤ 64 loads */
#define LG_TOMB ((uintptr_t)1) /* a destroyed comm's slot: probes go on past it */

typedef struct {
	uintptr_t key;   /* comm pointer; 0 empty, LG_TOMB freed */
	uint64_t id;
	int64_t seq;     /* next call number */
	int64_t splits;  /* ncclCommSplit calls on this comm */
	int32_t nranks;
	int32_t rank;
	int32_t announced;
} lg_comm;

static lg_comm g_comms[LG_COMMS];

/* Send/Recv numbering (B1): one counter per (comm, direction, peer), so
 * send k from A to B is recv k at B from A, and point-to-point calls never
 * shift the collective numbering of the comm. */
#define LG_P2P 65536

typedef struct {
	uintptr_t key;  /* tag: hash of (comm, direction, peer); 0 empty, LG_TOMB freed */
	uintptr_t comm; /* the comm pointer, for lg_comm_free */
	int64_t seq;    /* next number */
} lg_p2p;

static lg_p2p g_p2p[LG_P2P];

/* A forked child (e.g. a data-loader worker) must not write into its
 * parent's ring: it starts over with its own pid. */
static void lg_atfork_child(void)
{
	g_ring = NULL;
	g_slots = NULL;
	g_state = 0;
	t_tid = 0;
	/* the child's ring must announce the communicators it inherited */
	for (int i = 0; i < LG_COMMS; i++)
		g_comms[i].announced = 0;
	/* The parent's lock must not stay held by the child: a flock belongs
	 * to the open file, which both our copy of the fd and our copy of the
	 * mapping keep alive — so a long-lived child (a data-loader worker)
	 * would make a dead parent look alive. Drop both; the parent's own
	 * fd and mapping keep its lock, and the child makes its own ring. */
	if (g_ring_mem)
		munmap(g_ring_mem, g_map_len);
	g_ring_mem = NULL;
	if (g_ring_fd >= 0)
		close(g_ring_fd);
	g_ring_fd = -1;
}


/* lg_claim finds key's slot in an open-addressing table of keys (stride
 * bytes apart), or claims an empty or freed one; at most LG_PROBE probes
 * (R8: a table full of destroyed comms must not cost µs per call). NULL:
 * no room nearby. */
static uintptr_t *lg_claim(void *base, size_t stride, uint64_t mask, uintptr_t k, uint64_t h, int *fresh)
{
	for (int round = 0; round < 2; round++) {
		uintptr_t *tomb = NULL, *empty = NULL;
		uint64_t i = h & mask;
		for (int n = 0; n < LG_PROBE; n++, i = (i + 1) & mask) {
			uintptr_t *key = (uintptr_t *)((char *)base + i * stride);
			uintptr_t cur = __atomic_load_n(key, __ATOMIC_ACQUIRE);
			if (cur == k)
				return key;
			if (cur == LG_TOMB && !tomb)
				tomb = key;
			if (cur == 0) {
				empty = key;
				break; /* end of the chain: k is not further on */
			}
		}
		uintptr_t *slot = tomb ? tomb : empty;
		if (!slot)
			return NULL;
		uintptr_t want = tomb ? LG_TOMB : 0;
		if (__atomic_compare_exchange_n(slot, &want, k, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			if (fresh)
				*fresh = 1;
			return slot;
		}
		if (want == k)
			return slot;
		/* another thread took it for another key: look again */
	}
	return NULL;
}

/* lg_comm_slot finds or claims comm's entry; NULL when there is no room. */
static lg_comm *lg_comm_slot(ncclComm_t comm, int *fresh)
{
	uintptr_t k = (uintptr_t)comm;
	if (k <= LG_TOMB)
		return NULL;
	return (lg_comm *)lg_claim(g_comms, sizeof g_comms[0], LG_COMMS - 1, k, lg_mix(k), fresh);
}

/* lg_comm_find is lg_comm_slot without claiming. */
static lg_comm *lg_comm_find(ncclComm_t comm)
{
	uintptr_t k = (uintptr_t)comm;
	if (k <= LG_TOMB)
		return NULL;
	uint64_t i = lg_mix(k) & (LG_COMMS - 1);
	for (int n = 0; n < LG_PROBE; n++, i = (i + 1) & (LG_COMMS - 1)) {
		uintptr_t cur = __atomic_load_n(&g_comms[i].key, __ATOMIC_ACQUIRE);
		if (cur == k)
			return &g_comms[i];
		if (cur == 0)
			break;
	}
	return NULL;
}

/* lg_p2p_seq returns the next number of a Send (recv = 0) to or Recv
 * (recv = 1) from peer on comm, or -1 when the table has no room. The key
 * is a 64-bit hash of (comm, direction, peer): a collision would need two
 * live pairs among ~2^32 to meet. */
static int64_t lg_p2p_seq(lg_comm *c, ncclComm_t comm, int peer, int recv)
{
	if (!c || peer < 0)
		return -1;
	uint64_t dp = ((uint64_t)(uint32_t)peer << 1) | (uint64_t)(recv & 1);
	uint64_t h = lg_mix((uint64_t)(uintptr_t)comm ^ lg_mix(dp + 0x9e3779b97f4a7c15ULL));
	uintptr_t tag = (uintptr_t)(h | 2); /* never 0 (empty) or 1 (freed) */
	int fresh = 0;
	lg_p2p *e = (lg_p2p *)lg_claim(g_p2p, sizeof g_p2p[0], LG_P2P - 1, tag, h >> 16, &fresh);
	if (!e)
		return -1;
	if (fresh)
		__atomic_store_n(&e->comm, (uintptr_t)comm, __ATOMIC_RELAXED);
	return __atomic_fetch_add(&e->seq, 1, __ATOMIC_RELAXED);
}

/* lg_comm_free releases comm's entries on destroy (R8). Destroying a comm
 * while another thread still calls on it is the caller's bug already. */
static void lg_comm_free(ncclComm_t comm)
{
	lg_comm *c = lg_comm_find(comm);
	if (!c)
		return;
	c->id = 0;
	__atomic_store_n(&c->seq, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&c->splits, 0, __ATOMIC_RELAXED);
	c->nranks = 0;
	c->rank = -1;
	__atomic_store_n(&c->announced, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&c->key, LG_TOMB, __ATOMIC_RELEASE);
	/* destroy is rare: a scan of the P2P table is fine here */
	for (size_t i = 0; i < LG_P2P; i++) {
		lg_p2p *e = &g_p2p[i];
		uintptr_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
		if (k > LG_TOMB && __atomic_load_n(&e->comm, __ATOMIC_RELAXED) == (uintptr_t)comm) {
			__atomic_store_n(&e->seq, 0, __ATOMIC_RELAXED);
			__atomic_store_n(&e->comm, 0, __ATOMIC_RELAXED);
			__atomic_store_n(&e->key, LG_TOMB, __ATOMIC_RELEASE);
		}
	}
}

typedef ncclResult_t (*lg_count_fn)(ncclComm_t, int *);
static void *lg_real(void **cache, const char *name);
static void *c_commcount, *c_userrank;

static void lg_emit_comm(lg_ring_header *h, uint16_t op, lg_comm *c, uint64_t parent, int color, int key,
			 int64_t t0, int64_t t1, ncclResult_t res, uint8_t flags)
{
	lg_record r = {0};
	r.op = op;
	r.dtype = 255;
	r.flags = flags;
	r.comm_id = c->id;
	r.comm_rank = c->rank;
	r.nranks = c->nranks;
	r.peer = -1;
	r.root = -1;
	r.redop = -1;
	r.seq = -1;
	r.aux = parent;
	r.color = color;
	r.key = key;
	r.enter_ns = t0;
	r.return_ns = t1;
	r.result = res;
	r.tid = lg_tid();
	lg_publish(h, &r);
}

/* lg_comm_known fills size and rank from NCCL when the init record could
 * not (non-blocking init, a comm created before the shim saw it). */
static void lg_comm_query(lg_comm *c, ncclComm_t comm)
{
	lg_count_fn cnt = (lg_count_fn)lg_real(&c_commcount, "ncclCommCount");
	lg_count_fn usr = (lg_count_fn)lg_real(&c_userrank, "ncclCommUserRank");
	int n = 0, r = -1;
	if (cnt && cnt(comm, &n) == LG_NCCL_SUCCESS && usr && usr(comm, &r) == LG_NCCL_SUCCESS && n > 0) {
		c->nranks = n;
		c->rank = r;
	}
}

/* lg_comm_for_call returns the entry a call on comm numbers itself in,
 * announcing the communicator first if its init was never recorded. */
static lg_comm *lg_comm_for_call(lg_ring_header *h, ncclComm_t comm)
{
	int fresh = 0;
	lg_comm *c = lg_comm_slot(comm, &fresh);
	if (!c)
		return NULL;
	if (LG_UNLIKELY(!__atomic_load_n(&c->announced, __ATOMIC_ACQUIRE))) {
		if (fresh)
			c->id = lg_mix((uint64_t)(uintptr_t)comm ^ ((uint64_t)g_pid << 32));
		if (c->nranks <= 0)
			lg_comm_query(c, comm);
		if (c->nranks > 0) {
			int zero = 0;
			if (__atomic_compare_exchange_n(&c->announced, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				lg_emit_comm(h, LG_OP_COMM_INIT, c, 0, 0, 0, lg_now(), lg_now(), 0, LG_REC_LAZY);
		}
	}
	return c;
}

/* lg_comm_register records a new communicator (init or split). */
static void lg_comm_register(lg_ring_header *h, ncclComm_t comm, uint64_t id, int nranks, int rank, uint16_t op,
			     uint64_t parent, int color, int key, int64_t t0, int64_t t1, ncclResult_t res)
{
	int fresh = 0;
	lg_comm *c = lg_comm_slot(comm, &fresh);
	if (!c)
		return;
	/* a pointer NCCL reuses after destroy starts a new communicator */
	c->id = id;
	__atomic_store_n(&c->seq, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&c->splits, 0, __ATOMIC_RELAXED);
	c->nranks = nranks;
	c->rank = rank;
	if (nranks <= 0)
		lg_comm_query(c, comm); /* non-blocking init may not know yet */
	if (c->nranks > 0) {
		__atomic_store_n(&c->announced, 1, __ATOMIC_RELEASE);
		lg_emit_comm(h, op, c, parent, color, key, t0, t1, res, 0);
	} else {
		__atomic_store_n(&c->announced, 0, __ATOMIC_RELEASE);
	}
}

/* ---------- forwarding ---------- */

static void *lg_real(void **cache, const char *name)
{
	void *f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
	if (LG_LIKELY(f != NULL))
		return f;
	f = dlsym(RTLD_NEXT, name);
	if (!f) {
		/* NCCL dlopen'ed RTLD_LOCAL after us is not "next" */
		void *lib = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
		if (!lib)
			lib = dlopen("libnccl.so", RTLD_LAZY | RTLD_NOLOAD);
		if (lib)
			f = dlsym(lib, name);
	}
	if (f)
		__atomic_store_n(cache, f, __ATOMIC_RELEASE);
	return f;
}

/* Calls NCCL makes to its own exported API (ncclBcast → ncclBroadcast)
 * pass through the shim unrecorded. */
static __thread int t_depth;
static __thread int t_group;

static const uint8_t lg_dtype_size[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

static inline uint64_t lg_bytes(size_t count, ncclDataType_t dt)
{
	if (dt < 0 || (size_t)dt >= sizeof lg_dtype_size)
		return 0;
	return (uint64_t)count * lg_dtype_size[dt];
}

/* ---------- pause trap (Greyhound §4.3 lightweight suspension) ---------- */

/* lg_trap holds the calling thread while generation gen stays armed, at
 * most pause_timeout_ms; a generation that timed out never traps again
 * (B3: an agent that died while armed costs one timeout, not one per
 * call). gen is odd (armed); the agent releases it by storing gen + 1. */
static LG_NOINLINE void lg_trap(lg_ring_header *h, uint32_t gen)
{
	if (__atomic_load_n(&h->pause_expired, __ATOMIC_ACQUIRE) == gen)
		return;
	int64_t t0 = lg_now();
	uint32_t tmo = __atomic_load_n(&h->pause_timeout_ms, __ATOMIC_ACQUIRE);
	int64_t limit = (int64_t)(tmo ? tmo : 60000) * 1000000LL;
	struct timespec nap = {0, 200000}; /* 200 µs: quick release, little CPU */
	while (__atomic_load_n(&h->pause, __ATOMIC_ACQUIRE) == gen) {
		if (lg_now() - t0 >= limit) {
			__atomic_store_n(&h->pause_expired, gen, __ATOMIC_RELEASE);
			break;
		}
		nanosleep(&nap, NULL);
	}
	__atomic_fetch_add(&h->trapped, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->trapped_ns, (uint64_t)(lg_now() - t0), __ATOMIC_RELAXED);
}

/* ---------- CUDA events (optional, GPU hosts only) ---------- */

#include "cuda_events.inc"

/* ---------- the call bracket ---------- */

typedef struct {
	lg_ring_header *h;
	lg_record r;
	lg_comm *c;
	int cuda;
	void *ev[2];
} lg_call;

static inline int lg_begin(lg_call *k, uint16_t op, ncclComm_t comm, size_t count, ncclDataType_t dt, int peer,
			   int root, ncclRedOp_t redop, cudaStream_t stream)
{
	if (t_depth++ > 0)
		return 0;
	lg_ring_header *h = lg_ring();
	if (!h)
		return 0;
	uint32_t gen = __atomic_load_n(&h->pause, __ATOMIC_RELAXED);
	if (LG_UNLIKELY(gen & 1) && t_group == 0)
		lg_trap(h, gen);
	lg_comm *c = lg_comm_for_call(h, comm);
	k->h = h;
	k->c = c;
	lg_record *r = &k->r;
	memset(r, 0, sizeof *r);
	r->op = op;
	r->dtype = (dt >= 0 && dt < 255) ? (uint8_t)dt : 255;
	r->flags = t_group > 0 ? LG_REC_GROUPED : 0;
	r->count = count;
	r->bytes = lg_bytes(count, dt);
	r->peer = peer;
	r->root = root;
	r->redop = redop;
	r->stream = (uint64_t)(uintptr_t)stream;
	r->tid = lg_tid();
	if (c) {
		r->comm_id = c->id;
		r->comm_rank = c->rank;
		r->nranks = c->nranks;
		/* collectives on the comm's counter; Send/Recv on their
		 * directed pair's (B1), so (comm, seq) names one collective
		 * instance on every member even when P2P is interleaved */
		if (LG_UNLIKELY(op == LG_OP_SEND || op == LG_OP_RECV))
			r->seq = lg_p2p_seq(c, comm, peer, op == LG_OP_RECV);
		else
			r->seq = __atomic_fetch_add(&c->seq, 1, __ATOMIC_RELAXED);
	} else {
		r->comm_id = 0;
		r->comm_rank = -1;
		r->seq = -1;
	}
	k->cuda = 0;
	if (LG_UNLIKELY(g_cuda_on) && t_group == 0)
		k->cuda = lg_cuda_before(k->ev, stream);
	r->enter_ns = lg_now();
	return 1;
}

static inline void lg_end(lg_call *k, int active, ncclResult_t res)
{
	t_depth--;
	if (!active)
		return;
	k->r.return_ns = lg_now();
	k->r.result = res;
	if (LG_UNLIKELY(k->cuda)) {
		lg_cuda_after(k->h, &k->r, k->ev, (cudaStream_t)(uintptr_t)k->r.stream);
		return;
	}
	if (LG_UNLIKELY(g_cuda_on))
		lg_cuda_poll(k->h);
	lg_publish(k->h, &k->r);
}

#define LG_FORWARD(name, type, ...)                                       \
	static void *real_##name;                                         \
	type f = (type)lg_real(&real_##name, #name);                      \
	if (LG_UNLIKELY(!f))                                              \
		return LG_NCCL_INTERNAL_ERROR; /* NCCL is not loaded */   \
	(void)0

/* ---------- the interposed API ---------- */

typedef ncclResult_t (*fn_allreduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
LG_EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t dt, ncclRedOp_t op,
				     ncclComm_t comm, cudaStream_t stream)
{
	LG_FORWARD(ncclAllReduce, fn_allreduce);
	lg_call k;
	int a = lg_begin(&k, LG_OP_ALLREDUCE, comm, count, dt, -1, -1, op, stream);
	ncclResult_t res = f(s, r, count, dt, op, comm, stream);
	lg_end(&k, a, res);
	return res;
}

typedef ncclResult_t (*fn_allgather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
LG_EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t sendcount, ncclDataType_t dt, ncclComm_t comm,
				     cudaStream_t stream)
{
	LG_FORWARD(ncclAllGather, fn_allgather);
	lg_call k;
	int a = lg_begin(&k, LG_OP_ALLGATHER, comm, sendcount, dt, -1, -1, -1, stream);
	ncclResult_t res = f(s, r, sendcount, dt, comm, stream);
	lg_end(&k, a, res);
	return res;
}

typedef ncclResult_t (*fn_reducescatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
					 cudaStream_t);
LG_EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t recvcount, ncclDataType_t dt, ncclRedOp_t op,
					 ncclComm_t comm, cudaStream_t stream)
{
	LG_FORWARD(ncclReduceScatter, fn_reducescatter);
	lg_call k;
	int a = lg_begin(&k, LG_OP_REDUCESCATTER, comm, recvcount, dt, -1, -1, op, stream);
	ncclResult_t res = f(s, r, recvcount, dt, op, comm, stream);
	lg_end(&k, a, res);
	return res;
}

typedef ncclResult_t (*fn_broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
LG_EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t count, ncclDataType_t dt, int root,
				     ncclComm_t comm, cudaStream_t stream)
{
	LG_FORWARD(ncclBroadcast, fn_broadcast);
	lg_call k;
	int a = lg_begin(&k, LG_OP_BROADCAST, comm, count, dt, -1, root, -1, stream);
	ncclResult_t res = f(s, r, count, dt, root, comm, stream);
	lg_end(&k, a, res);
	return res;
}

typedef ncclResult_t (*fn_bcast)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
LG_EXPORT ncclResult_t ncclBcast(void *buf, size_t count, ncclDataType_t dt, int root, ncclComm_t comm,
				 cudaStream_t stream)
{
	LG_FORWARD(ncclBcast, fn_bcast);
	lg_call k;
	int a = lg_begin(&k, LG_OP_BROADCAST, comm, count, dt, -1, root, -1, stream);
	ncclResult_t res = f(buf, count, dt, root, comm, stream);
	lg_end(&k, a, res);
	return res;
}

typedef ncclResult_t (*fn_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
				  cudaStream_t);
LG_EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t count, ncclDataType_t dt, ncclRedOp_t op, int root,
				  ncclComm_t comm, cudaStream_t stream)
{
	LG_FORWARD(ncclReduce, fn_reduce);
	lg_call k;
	int a = lg_begin(&k, LG_OP_REDUCE, comm, count, dt, -1, root, op, stream);
	ncclResult_t res = f(s, r, count, dt, op, root, comm, stream);
	lg_end(&k, a, res);
	return res;
}

typedef ncclResult_t (*fn_send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
LG_EXPORT ncclResult_t ncclSend(const void *s, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
				cudaStream_t stream)
{
	LG_FORWARD(ncclSend, fn_send);
	lg_call k;
	int a = lg_begin(&k, LG_OP_SEND, comm, count, dt, peer, -1, -1, stream);
	ncclResult_t res = f(s, count, dt, peer, comm, stream);
	lg_end(&k, a, res);
	return res;
}

typedef ncclResult_t (*fn_recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
LG_EXPORT ncclResult_t ncclRecv(void *r, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
				cudaStream_t stream)
{
	LG_FORWARD(ncclRecv, fn_recv);
	lg_call k;
	int a = lg_begin(&k, LG_OP_RECV, comm, count, dt, peer, -1, -1, stream);
	ncclResult_t res = f(r, count, dt, peer, comm, stream);
	lg_end(&k, a, res);
	return res;
}

#ifdef LAGGARD_NCCL_ALLTOALL
/* Off by default: exporting a symbol the installed NCCL lacks would make
 * feature probes (dlsym) believe it exists. Build with
 * -DLAGGARD_NCCL_ALLTOALL for an NCCL that has it. */
typedef ncclResult_t (*fn_alltoall)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
LG_EXPORT ncclResult_t ncclAllToAll(const void *s, void *r, size_t count, ncclDataType_t dt, ncclComm_t comm,
				    cudaStream_t stream)
{
	LG_FORWARD(ncclAllToAll, fn_alltoall);
	lg_call k;
	int a = lg_begin(&k, LG_OP_ALLTOALL, comm, count, dt, -1, -1, -1, stream);
	ncclResult_t res = f(s, r, count, dt, comm, stream);
	lg_end(&k, a, res);
	return res;
}
#endif

typedef ncclResult_t (*fn_void)(void);
LG_EXPORT ncclResult_t ncclGroupStart(void)
{
	LG_FORWARD(ncclGroupStart, fn_void);
	if (t_depth == 0 && t_group == 0) {
		lg_ring_header *h = lg_ring();
		uint32_t gen = h ? __atomic_load_n(&h->pause, __ATOMIC_RELAXED) : 0;
		if (LG_UNLIKELY(gen & 1))
			lg_trap(h, gen);
	}
	ncclResult_t res = f();
	if (t_depth == 0)
		t_group++;
	return res;
}

LG_EXPORT ncclResult_t ncclGroupEnd(void)
{
	LG_FORWARD(ncclGroupEnd, fn_void);
	if (t_depth == 0 && t_group > 0)
		t_group--;
	t_depth++;
	ncclResult_t res = f();
	t_depth--;
	return res;
}

typedef ncclResult_t (*fn_initrank)(ncclComm_t *, int, ncclUniqueId, int);
LG_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	LG_FORWARD(ncclCommInitRank, fn_initrank);
	int top = t_depth++ == 0;
	int64_t t0 = lg_now();
	ncclResult_t res = f(comm, nranks, id, rank);
	int64_t t1 = lg_now();
	t_depth--;
	lg_ring_header *h = top ? lg_ring() : NULL;
	if (h && comm && *comm)
		lg_comm_register(h, *comm, lg_hash_bytes(id.internal, sizeof id.internal, 0), nranks, rank,
				 LG_OP_COMM_INIT, 0, 0, 0, t0, t1, res);
	return res;
}

typedef ncclResult_t (*fn_initrankconfig)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
LG_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
					      ncclConfig_t *config)
{
	LG_FORWARD(ncclCommInitRankConfig, fn_initrankconfig);
	int top = t_depth++ == 0;
	int64_t t0 = lg_now();
	ncclResult_t res = f(comm, nranks, id, rank, config);
	int64_t t1 = lg_now();
	t_depth--;
	lg_ring_header *h = top ? lg_ring() : NULL;
	if (h && comm && *comm)
		lg_comm_register(h, *comm, lg_hash_bytes(id.internal, sizeof id.internal, 0), nranks, rank,
				 LG_OP_COMM_INIT, 0, 0, 0, t0, t1, res);
	return res;
}

typedef ncclResult_t (*fn_initall)(ncclComm_t *, int, const int *);
LG_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
	LG_FORWARD(ncclCommInitAll, fn_initall);
	static int64_t calls;
	int top = t_depth++ == 0;
	int64_t t0 = lg_now();
	ncclResult_t res = f(comms, ndev, devlist);
	int64_t t1 = lg_now();
	t_depth--;
	lg_ring_header *h = top ? lg_ring() : NULL;
	if (h && comms && res == LG_NCCL_SUCCESS) {
		/* one communicator of ndev ranks, all in this process */
		uint64_t n = (uint64_t)__atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
		uint64_t id = lg_mix(((uint64_t)g_pid << 32) ^ lg_mix(n + 0x9e3779b97f4a7c15ULL) ^ h->proc_start);
		for (int i = 0; i < ndev; i++)
			if (comms[i])
				lg_comm_register(h, comms[i], id, ndev, i, LG_OP_COMM_INIT_ALL, 0, 0, 0, t0, t1, res);
	}
	return res;
}

typedef ncclResult_t (*fn_split)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);
LG_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
	LG_FORWARD(ncclCommSplit, fn_split);
	int top = t_depth++ == 0;
	lg_ring_header *h = top ? lg_ring() : NULL;
	/* every member splits the parent collectively, in the same order,
	 * so (parent id, split number, colour) names the child on all ranks */
	lg_comm *p = h ? lg_comm_for_call(h, comm) : NULL;
	int64_t nsplit = p ? __atomic_fetch_add(&p->splits, 1, __ATOMIC_RELAXED) : 0;
	int64_t t0 = lg_now();
	ncclResult_t res = f(comm, color, key, newcomm, config);
	int64_t t1 = lg_now();
	t_depth--;
	if (h && p && newcomm && *newcomm && color != LG_NCCL_SPLIT_NOCOLOR) {
		uint64_t mix[3] = {p->id, (uint64_t)nsplit, (uint64_t)(int64_t)color};
		lg_comm_register(h, *newcomm, lg_hash_bytes(mix, sizeof mix, 0x5a), 0, -1, LG_OP_COMM_SPLIT, p->id, color,
				 key, t0, t1, res);
	}
	return res;
}

typedef ncclResult_t (*fn_destroy)(ncclComm_t);
static ncclResult_t lg_destroy(fn_destroy f, ncclComm_t comm)
{
	int top = t_depth++ == 0;
	lg_ring_header *h = top ? lg_ring() : NULL;
	lg_comm *c = top ? lg_comm_find(comm) : NULL;
	int64_t t0 = lg_now();
	ncclResult_t res = f(comm);
	int64_t t1 = lg_now();
	t_depth--;
	if (h && c && c->announced)
		lg_emit_comm(h, LG_OP_COMM_DESTROY, c, 0, 0, 0, t0, t1, res, 0);
	if (c)
		lg_comm_free(comm);
	return res;
}

LG_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	LG_FORWARD(ncclCommDestroy, fn_destroy);
	return lg_destroy(f, comm);
}

LG_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	LG_FORWARD(ncclCommAbort, fn_destroy);
	return lg_destroy(f, comm);
}
