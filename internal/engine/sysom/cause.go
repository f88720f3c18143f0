package sysom

import (
	"fmt"
	"strings"
)

// ForeignPrefix starts the synthetic root frame symbolization puts above
// a foreign sample (contract §4): "[other process] <comm>".
const ForeignPrefix = "[other process] "

// Frame-name vocabularies of the paper's root causes (§5.4). Kernel
// names are exact; user-space ones are lower-cased substrings.
var (
	netRXFrames = set("net_rx_action", "napi_poll", "__napi_poll", "napi_gro_receive", "virtnet_poll", "virtnet_receive",
		"mlx5e_napi_poll", "ixgbe_poll", "i40e_napi_poll", "netif_receive_skb", "__netif_receive_skb", "process_backlog",
		"gro_cell_poll", "ena_io_poll", "bnxt_poll", "igb_poll", "e1000_clean")
	irqFrames = set("asm_common_interrupt", "common_interrupt", "irq_exit_rcu", "__irq_exit_rcu", "do_softirq", "__do_softirq",
		"handle_softirqs", "do_softirq_own_stack", "irq_exit", "handle_irq_event", "__handle_irq_event_percpu",
		"asm_sysvec_apic_timer_interrupt", "sysvec_apic_timer_interrupt", "asm_sysvec_call_function_single",
		"sysvec_call_function_single", "run_ksoftirqd", "tasklet_action", "tasklet_action_common", "blk_done_softirq")
	vfsFrames = set("__legitimize_path", "legitimize_path", "lockref_get_not_dead", "dput", "lookup_fast", "unlazy_child",
		"try_to_unlazy", "try_to_unlazy_next", "terminate_walk", "link_path_walk", "walk_component", "path_openat",
		"__d_lookup", "d_alloc_parallel", "__dentry_kill", "shrink_dcache_parent", "d_invalidate", "path_lookupat",
		"filename_lookup", "do_filp_open", "do_sys_openat2")
	lockFrames = set("queued_spin_lock_slowpath", "native_queued_spin_lock_slowpath", "__pv_queued_spin_lock_slowpath",
		"_raw_spin_lock", "_raw_spin_lock_irqsave", "_raw_spin_lock_bh", "rwsem_down_read_slowpath",
		"rwsem_down_write_slowpath", "__mutex_lock", "osq_lock")
	storageSubs = []string{"cpfs", "ossutil", "oss::", "ossclient", "nfs_", "nfs4_", "fuse_", "ceph", "lustre", "s3fs",
		"filemap_read", "vfs_read", "ext4_file_read_iter", "xfs_file_read_iter", "blk_mq_", "io_uring", "__getitem__",
		"dataloader", "_next_data", "pil_", "decode_jpeg", "libjpeg", "pread64", "copy_page_to_iter"}
	loggingSubs = []string{"logclient", "logging", "spdlog", "glog", "google::log", "logger", "loghandler", "streamhandler",
		"handler.emit", "sls::", "log4", "fluent", "syslog"}
)

func set(xs ...string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// classify names the cause of a hot path from its frames (root first).
// Order matters: interference from another process first (whatever it
// runs), then the kernel mechanisms of §5.4 cases 2 and 3, then the
// user-space ones of cases 4 and 5.
func classify(stack []string) Cause {
	var irq, net, vfs, lock, storage, logging bool
	for _, f := range stack {
		if strings.HasPrefix(f, ForeignPrefix) {
			return CauseForeign
		}
		net = net || netRXFrames[f]
		irq = irq || irqFrames[f]
		vfs = vfs || vfsFrames[f]
		lock = lock || lockFrames[f]
		l := strings.ToLower(f)
		storage = storage || containsAny(l, storageSubs)
		logging = logging || containsAny(l, loggingSubs)
	}
	switch {
	case net:
		return CauseNetRX
	case irq:
		return CauseIRQ
	case lock && vfs:
		return CauseVFSLock
	case lock:
		return CauseKernelLock
	case storage:
		return CauseStorageIO
	case logging:
		return CauseLogging
	}
	return CauseApplication
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// foreignComm returns the interfering process's name of a path, if any.
func foreignComm(stack []string) string {
	for _, f := range stack {
		if c, ok := strings.CutPrefix(f, ForeignPrefix); ok {
			return c
		}
	}
	return ""
}

// nextCheck is the operator's next step for a cause (§5.4: "look at
// DCGM clocks", "check IRQ affinity of the NIC", "a system service
// churns the dentry cache").
func nextCheck(c Cause, p *HotPath) string {
	switch c {
	case CauseGPUUniform:
		return "look at DCGM clocks for the rank's GPU: SM clock vs max, clocks-event (throttle) reasons, temperature, power, ECC/XID errors"
	case CauseGPUKernel:
		return "compare the slowed kernels' inputs on this rank with the peer: shapes, dtypes, a changed operator or library version"
	case CauseNetRX:
		return "check IRQ affinity of the NIC (/proc/irq/*/smp_affinity, RPS in /sys/class/net/*/queues/rx-*/rps_cpus) and move its queues off the training cores"
	case CauseIRQ:
		return "find the device whose interrupts land on the rank's cores (/proc/interrupts, /proc/softirqs) and move its IRQ affinity (/proc/irq/*/smp_affinity) off them"
	case CauseVFSLock:
		return "a system service churns the dentry cache: look for systemctl daemon-reload, find/updatedb or mass file scans on the node (/proc/sys/fs/dentry-state, slabtop dentry)"
	case CauseKernelLock:
		return "kernel lock contention: the lock's callers in the stack name the subsystem; look for another process hammering it"
	case CauseForeign:
		name := "another process"
		if p != nil {
			if c := foreignComm(p.Stack); c != "" {
				name = fmt.Sprintf("process %q", c)
			}
		}
		return name + " shares the rank's cores: pin or move it (cpuset cgroup, taskset), or give the rank dedicated cores"
	case CauseStorageIO:
		return "data loading is CPU-bound in storage I/O paths: check the storage backend's throughput and rate limits, and data-loader parallelism"
	case CauseLogging:
		return "logging/serialization runs on the training threads: check the log level and per-step logging (a recent config or infrastructure update)"
	case CauseApplication:
		return "a code path of the rank's own grew: compare its inputs and configuration with the peer's (data skew, a changed operator or library)"
	case CauseRunQueue:
		return "another runnable task competes for the rank's cores: find it (top -H, the foreign samples on its cores), pin or move it"
	case CauseMigration:
		return "the rank's threads or pages migrate: pin threads (taskset, torch set_affinity) and bind memory (numactl --membind), or turn off automatic NUMA balancing"
	case CauseSteal:
		return "the hypervisor steals the rank's CPU: check the VM's host for noisy neighbours or CPU overcommit"
	}
	return ""
}
