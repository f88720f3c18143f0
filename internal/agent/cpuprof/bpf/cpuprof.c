// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// Always-on CPU stack sampler (SysOM-AI §3.3, §4). One perf_event program,
// attached to a software cpu-clock event per online CPU:
//   - a sampling ratio decides whether a tick collects a stack (§5.1);
//   - the kernel stack comes from the kernel's own unwinder (bpf_get_stackid);
//   - the user stack is unwound here with Algorithm 1: frame pointers where a
//     per-(file, unwind row) marker says they are valid, DWARF CFI rows
//     (pre-processed by user space from .eh_frame, binary-searched here)
//     otherwise; markers are learned on first encounter with an atomic
//     insert so concurrent CPUs converge;
//   - CPython 3.11 frames are collected from the thread's PyThreadState;
//   - everything is aggregated in-kernel into one of two map generations
//     that user space swaps and drains every interval (§4).
// Types are declared by hand (x86-64 only) so no vmlinux.h is needed.

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_STACK_TRACE = 7,
	BPF_MAP_TYPE_LRU_HASH = 9,
};
#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC 1

#include <bpf/bpf_helpers.h>

#define MAX_FRAMES 64 // native user frames per stack
#define MAX_PY 32     // Python frames per stack
#define MAX_MAPS 1024 // executable mappings per tracked process (a torch process maps ~315)
#define MAP_SEARCH 11 // ceil(log2(MAX_MAPS)) + 1
#define ROW_SEARCH 24 // binary-search steps over a file's rows (16M rows)
#define MAX_THREADS 64
#define KSTACK_DEPTH 48

// Modes (Go: Mode).
#define MODE_HYBRID 0
#define MODE_FP 1
#define MODE_DWARF 2

// Unwind row CFA registers (ehframe contract §1b).
#define REG_RSP 0
#define REG_RBP 1
#define REG_UNDEFINED 2
#define REG_COMPLEX 3
#define ROW_NO_CFI 2 // ehframe.FlagNoCFI: a pc no FDE covers

#define MARK_FP 1
#define MARK_DWARF 2

// ustack.flags
#define UF_TRUNCATED 1
#define UF_COMPLEX 2
#define UF_NO_REGS 4

// Stats slots (Go: stat* constants).
enum {
	ST_TICKS,
	ST_SAMPLES,
	ST_DROP_COUNT,
	ST_DROP_USTACK,
	ST_KSTACK_ERR,
	ST_FP_FRAMES,
	ST_DWARF_FRAMES,
	ST_FALLBACK_FRAMES,
	ST_TRUNCATED,
	ST_MARK_FP,
	ST_MARK_DWARF,
	ST_PY_FRAMES,
	ST_PY_NOTHREAD,
	ST_NS,
	NUM_STATS,
};

struct user_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di,
		orig_ax, ip, cs, flags, sp, ss;
};

struct perf_ctx {
	struct user_regs regs;
	__u64 sample_period;
	__u64 addr;
};

struct task_struct;

struct config {
	__u32 threshold; // tick collects when prandom <= threshold
	__u32 mode;
	__u32 gen; // map generation written now (0 or 1)
	__u32 self_tgid; // the agent itself is not sampled
};

struct count_key {
	__u32 pid;
	__u32 tid;
	__u32 cpu;
	__s32 kstack; // stack id, or -errno when there is no kernel stack
	__u64 uhash;  // key of ustacks, 0 when there is no user stack
	char comm[16];
};

struct ustack {
	__u32 n;
	__u32 npy;
	__u32 flags;
	__u32 pad;
	__u64 pcs[MAX_FRAMES];
	__u64 py[MAX_PY]; // code object pointer | is_entry (bit 0)
};

struct mapping {
	__u64 start;
	__u64 end;
	__u64 bias; // ELF vaddr = runtime address - bias
	__u32 file; // index into files; 0: no unwind table
	__u32 pad;
};

struct proc {
	__u32 n;
	__u32 pad;
	struct mapping m[MAX_MAPS];
};

struct file_idx {
	__u32 first;
	__u32 count;
};

struct unwind_row {
	__u64 pc;
	__s32 cfa_off;
	__s16 rbp_off;
	__u8 cfa_reg;
	__u8 flags;
};

struct marker_key {
	__u32 file;
	__u32 pad;
	__u64 pc;
};

// CPython layout: offsets are filled by user space per version.
struct pyproc {
	__u64 runtime; // address of _PyRuntime
	__u32 rt_interp_head;
	__u32 interp_threads_head;
	__u32 ts_next;
	__u32 ts_native_tid;
	__u32 ts_cframe;
	__u32 cframe_current;
	__u32 frame_code;
	__u32 frame_previous;
	__u32 frame_is_entry;
	__u32 pad;
	// The process's pid namespace (nsfs dev, inode), 0 when it is the
	// agent's: CPython stores gettid() as seen in its own namespace, so
	// in a container the host tid never matches native_thread_id.
	__u64 ns_dev;
	__u64 ns_ino;
};

struct bpf_pidns_info {
	__u32 pid;
	__u32 tgid;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NUM_STATS);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

// Two generations of the aggregation maps: the program writes cfg.gen,
// user space drains the other (§4 in-kernel aggregation).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct count_key);
	__type(value, __u64);
} counts0 SEC(".maps"), counts1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct ustack);
} ustacks0 SEC(".maps"), ustacks1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, KSTACK_DEPTH * sizeof(__u64));
} kstacks0 SEC(".maps"), kstacks1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct proc);
} procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct file_idx);
} files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 22); // 64 MiB: libtorch_cpu.so alone compiles to 1.44M rows
	__type(key, __u32);
	__type(value, struct unwind_row);
} rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 17);
	__type(key, struct marker_key);
	__type(value, __u32);
} markers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct pyproc);
} pyprocs SEC(".maps");

// tid -> PyThreadState*, re-validated on every use.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u64);
} pythreads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ustack);
} scratch SEC(".maps");

static __always_inline void stat_add(__u32 slot, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(&stats, &slot);
	if (p)
		*p += v; // per-CPU slot: no atomics needed
}

static __always_inline int read_u64(__u64 addr, __u64 *out)
{
	return bpf_probe_read_user(out, sizeof(*out), (void *)addr);
}

static __always_inline __u64 mix(__u64 h, __u64 v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	h *= 0xff51afd7ed558ccdULL;
	return h ^ (h >> 33);
}

// The binary searches run as bpf_loop callbacks so the verifier checks
// their bodies once rather than once per unrolled step and call site.
struct msearch {
	struct proc *p;
	__u64 pc;
	__u32 lo, hi;
	__s32 found;
};

static long map_step(__u32 i, struct msearch *s)
{
	if (s->lo >= s->hi)
		return 1;
	__u32 mid = (s->lo + s->hi) / 2;
	struct mapping *m = &s->p->m[mid & (MAX_MAPS - 1)];
	if (s->pc < m->start) {
		s->hi = mid;
	} else if (s->pc >= m->end) {
		s->lo = mid + 1;
	} else {
		s->found = mid;
		return 1;
	}
	return 0;
}

static __noinline struct mapping *find_mapping(struct proc *p, __u64 pc)
{
	struct msearch s = { .p = p, .pc = pc, .hi = p->n, .found = -1 };
	if (s.hi > MAX_MAPS)
		s.hi = MAX_MAPS;
	bpf_loop(MAP_SEARCH, map_step, &s, 0);
	if (s.found < 0)
		return 0;
	return &p->m[s.found & (MAX_MAPS - 1)];
}

struct rsearch {
	__u64 vaddr;
	__u32 first, lo, hi;
	__u32 bad;
};

// row_step narrows [lo, hi) to the first row with pc > vaddr.
static long row_step(__u32 i, struct rsearch *s)
{
	if (s->lo >= s->hi)
		return 1;
	__u32 mid = (s->lo + s->hi) / 2;
	__u32 idx = s->first + mid;
	struct unwind_row *r = bpf_map_lookup_elem(&rows, &idx);
	if (!r) {
		s->bad = 1;
		return 1;
	}
	if (r->pc <= s->vaddr)
		s->lo = mid + 1;
	else
		s->hi = mid;
	return 0;
}

// find_row returns the last row with row.pc <= vaddr in the file's table.
static __noinline struct unwind_row *find_row(__u32 file, __u64 vaddr)
{
	struct file_idx *fi = bpf_map_lookup_elem(&files, &file);
	if (!fi || fi->count == 0)
		return 0;
	struct rsearch s = { .vaddr = vaddr, .first = fi->first, .hi = fi->count };
	bpf_loop(ROW_SEARCH, row_step, &s, 0);
	if (s.bad || s.lo == 0)
		return 0;
	__u32 idx = s.first + s.lo - 1;
	return bpf_map_lookup_elem(&rows, &idx);
}

struct uctx {
	struct ustack *st;
	struct proc *proc; // 0 for untracked processes
	__u64 pc, sp, fp;
	__u64 hash;
	__u32 mode;
	__u32 stop; // 1: clean end of stack, 2: truncated
};

// fp_step: caller's frame from the frame-pointer chain.
static __always_inline int fp_step(__u64 fp, __u64 sp, __u64 *npc, __u64 *nsp,
				   __u64 *nfp)
{
	if (fp == 0 || fp < sp || fp - sp > (8ULL << 20))
		return -1;
	if (read_u64(fp, nfp) || read_u64(fp + 8, npc))
		return -1;
	*nsp = fp + 16;
	return 0;
}

// dwarf_step: caller's frame from a CFI row. 1: end of stack.
static __always_inline int dwarf_step(struct unwind_row *r, __u64 sp, __u64 fp,
				      __u64 *npc, __u64 *nsp, __u64 *nfp)
{
	__u64 cfa;
	if (r->cfa_reg == REG_RSP)
		cfa = sp + (__s64)r->cfa_off;
	else if (r->cfa_reg == REG_RBP)
		cfa = fp + (__s64)r->cfa_off;
	else if (r->cfa_reg == REG_UNDEFINED)
		return 1;
	else
		return -1;
	if (read_u64(cfa - 8, npc))
		return -1;
	*nfp = fp;
	if (r->rbp_off != 0 && read_u64(cfa + (__s64)r->rbp_off, nfp))
		return -1;
	*nsp = cfa;
	return 0;
}

// valid_caller is ValidateCallerPC (§3.3): the return address lies in an
// executable mapping and the stack pointer grew.
static __always_inline int valid_caller(struct proc *p, __u64 npc, __u64 nsp,
					__u64 sp)
{
	if (nsp <= sp || npc == 0)
		return 0;
	return find_mapping(p, npc - 1) != 0;
}

static long unwind_step(__u32 i, struct uctx *c)
{
	struct ustack *st = c->st;
	__u64 pc = c->pc, sp = c->sp, fp = c->fp;
	__u64 npc = 0, nsp = 0, nfp = 0;
	if (pc == 0) {
		c->stop = 1;
		return 1;
	}
	st->pcs[i & (MAX_FRAMES - 1)] = pc;
	st->n = i + 1;
	c->hash = mix(c->hash, pc);

	// A caller frame's pc is a return address: look up the call itself.
	__u64 look = i == 0 ? pc : pc - 1;
	int method = MARK_FP;

	if (!c->proc || c->mode == MODE_FP) {
		if (fp_step(fp, sp, &npc, &nsp, &nfp)) {
			c->stop = 1; // FP chains end with a zero or bogus fp
			return 1;
		}
		goto next;
	}
	struct mapping *m = find_mapping(c->proc, look);
	if (!m) {
		c->stop = 2;
		return 1;
	}
	__u32 file = m->file;
	struct unwind_row *r = file ? find_row(file, look - m->bias) : 0;
	// Code no FDE covers (asm kernels, gaps, past the last FDE) is not
	// the end of the stack: treat it like a file without a table.
	if (r && (r->flags & ROW_NO_CFI))
		r = 0;

	if (c->mode == MODE_DWARF) {
		if (!r) {
			c->stop = 2;
			return 1;
		}
		int rc = dwarf_step(r, sp, fp, &npc, &nsp, &nfp);
		if (rc) {
			if (rc < 0 && r->cfa_reg == REG_COMPLEX)
				st->flags |= UF_COMPLEX;
			c->stop = rc == 1 ? 1 : 2;
			return 1;
		}
		method = MARK_DWARF;
		goto next;
	}

	// Hybrid (Algorithm 1).
	if (!r) {
		// No table for this file: FP, validated.
		if (fp_step(fp, sp, &npc, &nsp, &nfp) ||
		    !valid_caller(c->proc, npc, nsp, sp)) {
			c->stop = 2;
			return 1;
		}
		goto next;
	}
	struct marker_key mk = { .file = file, .pc = r->pc };
	__u32 *mark = bpf_map_lookup_elem(&markers, &mk);
	__u32 mv = mark ? *mark : 0;
	if (mv == MARK_FP) {
		if (fp_step(fp, sp, &npc, &nsp, &nfp) == 0 &&
		    valid_caller(c->proc, npc, nsp, sp))
			goto next;
		mv = MARK_DWARF; // the chain broke here this time: use the table
	}
	if (mv == MARK_DWARF) {
		int rc = dwarf_step(r, sp, fp, &npc, &nsp, &nfp);
		if (rc) {
			if (rc < 0 && r->cfa_reg == REG_COMPLEX)
				st->flags |= UF_COMPLEX;
			c->stop = rc == 1 ? 1 : 2;
			return 1;
		}
		method = MARK_DWARF;
		goto next;
	}
	// Unmarked: try FP and validate it. Where the CFI row is simple we
	// also require FP to agree with it, which catches a frame-pointer-less
	// function whose rbp still holds its caller's frame (FP would skip a
	// frame yet pass the paper's two checks).
	{
		__u64 dpc = 0, dsp = 0, dfp = 0;
		int frc = fp_step(fp, sp, &npc, &nsp, &nfp);
		int fok = frc == 0 && valid_caller(c->proc, npc, nsp, sp);
		int drc = -1;
		if (r->cfa_reg == REG_RSP || r->cfa_reg == REG_RBP ||
		    r->cfa_reg == REG_UNDEFINED)
			drc = dwarf_step(r, sp, fp, &dpc, &dsp, &dfp);
		if (drc == 0)
			fok = fok && dpc == npc && dsp == nsp;
		else if (drc == 1)
			fok = 0; // outermost frame per CFI
		__u32 nm = fok ? MARK_FP : MARK_DWARF;
		if (r->cfa_reg == REG_COMPLEX && !fok) {
			st->flags |= UF_COMPLEX;
			c->stop = 2;
			return 1;
		}
		if (r->cfa_reg != REG_COMPLEX &&
		    bpf_map_update_elem(&markers, &mk, &nm, BPF_NOEXIST) == 0)
			stat_add(nm == MARK_FP ? ST_MARK_FP : ST_MARK_DWARF, 1);
		if (r->cfa_reg == REG_COMPLEX)
			stat_add(ST_FALLBACK_FRAMES, 1);
		if (!fok) {
			if (drc) {
				c->stop = drc == 1 ? 1 : 2;
				return 1;
			}
			npc = dpc;
			nsp = dsp;
			nfp = dfp;
			method = MARK_DWARF;
		}
	}
next:
	stat_add(method == MARK_FP ? ST_FP_FRAMES : ST_DWARF_FRAMES, 1);
	if (nsp <= sp) {
		c->stop = 2;
		return 1;
	}
	c->pc = npc;
	c->sp = nsp;
	c->fp = nfp;
	return 0;
}

struct pctx {
	struct ustack *st;
	struct pyproc *py;
	__u64 frame;
	__u64 hash;
};

static long py_step(__u32 i, struct pctx *c)
{
	__u64 code = 0, prev = 0;
	__u8 entry = 0;
	if (c->frame == 0)
		return 1;
	if (read_u64(c->frame + c->py->frame_code, &code) ||
	    read_u64(c->frame + c->py->frame_previous, &prev) ||
	    bpf_probe_read_user(&entry, 1,
				(void *)(c->frame + c->py->frame_is_entry)))
		return 1;
	code |= entry ? 1 : 0;
	c->st->py[i & (MAX_PY - 1)] = code;
	c->st->npy = i + 1;
	c->hash = mix(c->hash, code);
	c->frame = prev;
	return 0;
}

static __always_inline __u64 py_thread(struct pyproc *py, __u32 tid)
{
	__u64 ts = 0, ntid = 0;
	// The tid CPython recorded: the namespace-local one for a process in
	// another pid namespace (the cache stays keyed by the host tid).
	__u32 want = tid;
	if (py->ns_ino) {
		struct bpf_pidns_info ns = {};
		if (bpf_get_ns_current_pid_tgid(py->ns_dev, py->ns_ino, &ns, sizeof(ns)))
			return 0;
		want = ns.pid;
	}
	__u64 *cached = bpf_map_lookup_elem(&pythreads, &tid);
	if (cached) {
		ts = *cached;
		if (read_u64(ts + py->ts_native_tid, &ntid) == 0 && ntid == want)
			return ts;
	}
	__u64 interp = 0;
	if (read_u64(py->runtime + py->rt_interp_head, &interp) || !interp)
		return 0;
	if (read_u64(interp + py->interp_threads_head, &ts))
		return 0;
	for (int i = 0; i < MAX_THREADS; i++) {
		if (!ts)
			return 0;
		if (read_u64(ts + py->ts_native_tid, &ntid))
			return 0;
		if (ntid == want) {
			bpf_map_update_elem(&pythreads, &tid, &ts, BPF_ANY);
			return ts;
		}
		if (read_u64(ts + py->ts_next, &ts))
			return 0;
	}
	return 0;
}

static __always_inline void count(void *m, struct count_key *k)
{
	__u64 one = 1;
	__u64 *v = bpf_map_lookup_elem(m, k);
	if (v) {
		__sync_fetch_and_add(v, 1);
		return;
	}
	long rc = bpf_map_update_elem(m, k, &one, BPF_NOEXIST);
	if (rc == 0)
		return;
	v = bpf_map_lookup_elem(m, k); // another CPU inserted it first
	if (v)
		__sync_fetch_and_add(v, 1);
	else
		stat_add(ST_DROP_COUNT, 1);
}

SEC("perf_event")
int sample(struct perf_ctx *ctx)
{
	__u32 zero = 0;
	struct config *cf = bpf_map_lookup_elem(&cfg, &zero);
	if (!cf)
		return 0;
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 pid = pt >> 32, tid = (__u32)pt;
	if (pid == 0 || pid == cf->self_tgid) // idle, or ourselves
		return 0;
	stat_add(ST_TICKS, 1);
	if (bpf_get_prandom_u32() > cf->threshold)
		return 0;
	__u64 t0 = bpf_ktime_get_ns();
	stat_add(ST_SAMPLES, 1);
	// One read of the generation: the kernel stack, the user stack and
	// the count of a sample must land in the same generation.
	__u32 gen = *(volatile __u32 *)&cf->gen;

	struct count_key k = {};
	k.pid = pid;
	k.tid = tid;
	k.cpu = bpf_get_smp_processor_id();
	bpf_get_current_comm(&k.comm, sizeof(k.comm));
	if (gen)
		k.kstack = bpf_get_stackid(ctx, &kstacks1, 0);
	else
		k.kstack = bpf_get_stackid(ctx, &kstacks0, 0);
	if (k.kstack < 0 && k.kstack != -14) // -EFAULT: sampled in user mode
		stat_add(ST_KSTACK_ERR, 1);

	struct ustack *st = bpf_map_lookup_elem(&scratch, &zero);
	if (!st)
		return 0;
	st->n = 0;
	st->npy = 0;
	st->flags = 0;

	struct user_regs regs;
	if ((ctx->regs.cs & 3) == 3) {
		regs.ip = ctx->regs.ip;
		regs.sp = ctx->regs.sp;
		regs.bp = ctx->regs.bp;
	} else {
		struct task_struct *task = bpf_get_current_task_btf();
		void *ur = (void *)bpf_task_pt_regs(task);
		if (!ur || bpf_probe_read_kernel(&regs, sizeof(regs), ur)) {
			regs.ip = 0;
			regs.sp = 0;
			regs.bp = 0;
		}
	}

	struct uctx uc = {
		.st = st,
		.proc = bpf_map_lookup_elem(&procs, &pid),
		.pc = regs.ip,
		.sp = regs.sp,
		.fp = regs.bp,
		.hash = 0x84222325cbf29ce4ULL,
		.mode = cf->mode,
	};
	if (regs.ip == 0 || regs.sp == 0) {
		st->flags |= UF_NO_REGS; // kernel thread
	} else {
		bpf_loop(MAX_FRAMES, unwind_step, &uc, 0);
		if (uc.stop != 1) {
			st->flags |= UF_TRUNCATED;
			stat_add(ST_TRUNCATED, 1);
		}
	}

	struct pyproc *py = bpf_map_lookup_elem(&pyprocs, &pid);
	if (py) {
		__u64 ts = py_thread(py, tid);
		__u64 cframe = 0, frame = 0;
		if (ts && read_u64(ts + py->ts_cframe, &cframe) == 0 && cframe &&
		    read_u64(cframe + py->cframe_current, &frame) == 0) {
			struct pctx pc = { .st = st, .py = py, .frame = frame,
					   .hash = uc.hash };
			bpf_loop(MAX_PY, py_step, &pc, 0);
			uc.hash = pc.hash;
			stat_add(ST_PY_FRAMES, st->npy);
		} else {
			stat_add(ST_PY_NOTHREAD, 1);
		}
	}

	if (st->n > 0 || st->npy > 0) {
		k.uhash = uc.hash | 1; // never 0: 0 means "no user stack"
		long rc;
		if (gen)
			rc = bpf_map_update_elem(&ustacks1, &k.uhash, st, BPF_NOEXIST);
		else
			rc = bpf_map_update_elem(&ustacks0, &k.uhash, st, BPF_NOEXIST);
		if (rc && rc != -17) { // -EEXIST: already stored
			stat_add(ST_DROP_USTACK, 1);
			// Even, so never a real key (those are odd): user space
			// sees a lost user stack and marks the sample truncated
			// rather than taking it for a complete kernel-only one.
			k.uhash = 2;
		}
	}
	if (gen)
		count(&counts1, &k);
	else
		count(&counts0, &k);
	stat_add(ST_NS, bpf_ktime_get_ns() - t0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
