// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// Wakeup→run latency of registered training processes' threads
// (SysOM-AI §3.1 "OS diff: scheduler latency (sched_stat tracepoints)"):
// a thread is stamped when it becomes runnable (sched_wakeup,
// sched_wakeup_new, or preempted while still runnable at sched_switch) and
// the delay to its next sched_switch-in goes into its rank's histogram.
//
// BTF-typed tracepoints (tp_btf) need kernel BTF but no tracefs. Types are
// declared here with CO-RE relocations, so no vmlinux.h is needed.

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef unsigned char u8;
typedef __u32 u32;
typedef __u64 u64;

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_LRU_HASH = 9,
};
#define BPF_ANY 0

#include <bpf/bpf_helpers.h>

// Histogram buckets: values below 8 ns are exact; above, 8 sub-buckets per
// power of two (±6%); every u64 fits (the largest index is 495). Go
// mirrors this in bucketOf/bucketRange.
#define SUB_BITS 3
#define SUB (1 << SUB_BITS)
#define NBUCKETS 512 // a power of two: the index is masked for the verifier
#define MAX_SLOTS 256 // ranks tracked at once

struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

struct hist {
	u64 count[NBUCKETS]; // cumulative; user space diffs successive reads
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);   // tgid
	__type(value, u32); // slot
} tracked SEC(".maps");

// The worst delay per slot since user space last zeroed it (a separate map
// so that zeroing never overwrites concurrent histogram increments).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, u32);
	__type(value, u64);
} maxns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, u32);   // tid
	__type(value, u64); // runnable since (ns)
} start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, u32);
	__type(value, struct hist);
} hists SEC(".maps");

static __always_inline u32 log2_32(u32 v)
{
	u32 r, s;
	r = (v > 0xFFFF) << 4;
	v >>= r;
	s = (v > 0xFF) << 3;
	v >>= s;
	r |= s;
	s = (v > 0xF) << 2;
	v >>= s;
	r |= s;
	s = (v > 0x3) << 1;
	v >>= s;
	r |= s;
	r |= (v >> 1);
	return r;
}

static __always_inline u32 log2_64(u64 v)
{
	u32 hi = v >> 32;
	return hi ? log2_32(hi) + 32 : log2_32((u32)v);
}

static __always_inline u32 bucket_of(u64 d)
{
	if (d < SUB)
		return d;
	u32 l = log2_64(d);
	return SUB + (l - SUB_BITS) * SUB + ((d >> (l - SUB_BITS)) & (SUB - 1));
}

static __always_inline void stamp(struct task_struct *p)
{
	u32 tgid = p->tgid;
	if (!bpf_map_lookup_elem(&tracked, &tgid))
		return;
	u32 tid = p->pid;
	u64 now = bpf_ktime_get_ns();
	bpf_map_update_elem(&start, &tid, &now, BPF_ANY);
}

SEC("tp_btf/sched_wakeup")
int handle_wakeup(u64 *ctx)
{
	stamp((struct task_struct *)ctx[0]);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int handle_wakeup_new(u64 *ctx)
{
	stamp((struct task_struct *)ctx[0]);
	return 0;
}

// sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
SEC("tp_btf/sched_switch")
int handle_switch(u64 *ctx)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	u32 prev_state = (u32)ctx[3];
	if ((u8)ctx[0] || prev_state == 0) // still runnable: back on the run queue
		stamp(prev);

	u32 tid = next->pid;
	u64 *ts = bpf_map_lookup_elem(&start, &tid);
	if (!ts)
		return 0;
	u64 now = bpf_ktime_get_ns();
	u64 d = now > *ts ? now - *ts : 0;
	bpf_map_delete_elem(&start, &tid);
	u32 tgid = next->tgid;
	u32 *slot = bpf_map_lookup_elem(&tracked, &tgid);
	if (!slot)
		return 0;
	u32 k = *slot;
	struct hist *h = bpf_map_lookup_elem(&hists, &k);
	if (!h)
		return 0;
	u32 b = bucket_of(d) & (NBUCKETS - 1);
	__sync_fetch_and_add(&h->count[b], 1);
	u64 *m = bpf_map_lookup_elem(&maxns, &k);
	if (m && d > *m)
		*m = d; // racy by design: a lost update only lowers one window's max
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
