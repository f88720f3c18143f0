import os
# Writes the fake /proc and /sys snapshots t0 and t1 (5 s apart) that
# TestGoldenRates reads; the expected rates are listed in that test.
base = os.path.dirname(os.path.abspath(__file__))
def w(snap, path, text):
    p = os.path.join(base, snap, path.lstrip("/"))
    os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, "w").write(text)

def statline(tid, comm, start, cpu):
    f = [str(tid), "(%s)" % comm, "R"] + ["0"] * 49
    # fields are 1-based: 22 = starttime, 39 = processor
    f[21] = str(start)
    f[38] = str(cpu)
    return " ".join(f) + "\n"

for snap, d in (("t0", 0), ("t1", 1)):
    w(snap, "proc/interrupts",
      "           CPU0       CPU2       \n"
      " 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n"
      " 38:          0      %d PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\n" % (24027 + 5000 * d) +
      " 40: %10d          0 PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx\n" % ((4294967290, 4)[d]) +
      " 41:          0          0 PCI-MSIX-0000:00:04.0   2-edge\n"
      "LOC: %10d %10d   Local timer interrupts\n" % (24815307 + 1000 * d, 21123037 + 1000 * d) +
      "ERR: %10d\n" % (3 * d))
    w(snap, "proc/softirqs",
      "                    CPU0       CPU2       \n"
      "          HI:          0          0\n"
      "      NET_RX:       1000 %10d\n" % (2000 + 10000 * d) +
      "       TIMER: %10d %10d\n" % (500 + 50 * d, 500 + 50 * d))
    # ticks (USER_HZ 100): user nice system idle iowait irq softirq steal guest guest_nice
    c0 = [100 + 200 * d, 0, 100 + 50 * d, 700 + 200 * d, 100, 0 + 20 * d, 0 + 30 * d, 0, 0, 0]
    c2 = [0, 0, 0, 1000 + 400 * d, 0, 0, 0, 100 * d, 0, 0]
    tot = [a + b for a, b in zip(c0, c2)]
    j = lambda v: " ".join(map(str, v))
    w(snap, "proc/stat", "cpu  %s\ncpu0 %s\ncpu2 %s\nintr 0\nctxt 1\nbtime 1700000000\nprocesses 10\nprocs_running 1\nprocs_blocked 0\n" % (j(tot), j(c0), j(c2)))
    w(snap, "proc/vmstat", "nr_free_pages 1\nnuma_hit 5\nnuma_pages_migrated %d\n" % (100 + 500 * d))
    # pid 100 (rank 0): threads 100, 101
    th = {
        100: dict(ss=("1000000000 200000000 50", "5000000000 700000000 80"), vol=(10, 60), inv=(5, 30), mig=(3, 13), numa=(0, 50), start=1000, cpu=2),
        101: dict(ss=("0 0 0", "500000000 0 3"), vol=(0, 0), inv=(0, 5), mig=(0, 5), numa=(0, 0), start=1001, cpu=0),
    }
    for tid, t in th.items():
        tp = "proc/100/task/%d/" % tid
        w(snap, tp + "schedstat", t["ss"][d] + "\n")
        w(snap, tp + "status", "Name:\tpython\nTgid:\t100\nPid:\t%d\nvoluntary_ctxt_switches:\t999\nnonvoluntary_ctxt_switches:\t999\n" % tid)
        w(snap, tp + "sched", "python (%d, #threads: 2)\n----------------\nse.exec_start                                :      17838888.346739\nse.nr_migrations                             :                 %d\nnr_switches                                  :                    0\nnr_voluntary_switches                        :                 %d\nnr_involuntary_switches                      :                 %d\nnuma_pages_migrated                          :                 %d\ncurrent_node=0, numa_group_id=0\n" % (tid, t["mig"][d], t["vol"][d], t["inv"][d], t["numa"][d]))
        w(snap, tp + "stat", statline(tid, "python", t["start"], t["cpu"]))
    # pid 200 (rank 1): tid 200 reused between snapshots (new start time); tid 201 new in t1
    tp = "proc/200/task/200/"
    w(snap, tp + "schedstat", ("100 0 1", "900000000 0 2")[d] + "\n")
    w(snap, tp + "status", "Tgid:\t200\nvoluntary_ctxt_switches:\t%d\nnonvoluntary_ctxt_switches:\t0\n" % (5 + d))
    w(snap, tp + "stat", statline(200, "my proc) x", (7, 9)[d], 1))
    if d == 1:
        tp = "proc/200/task/201/"
        w(snap, tp + "schedstat", "5 0 1\n")
        w(snap, tp + "status", "Tgid:\t200\n")
        w(snap, tp + "stat", statline(201, "w", 10, 0))
    w(snap, "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", ("2000000", "2400000")[d] + "\n")
    hw = "sys/class/infiniband/mlx5_0/ports/1/hw_counters/"
    w(snap, hw + "np_cnp_sent", ("10", "60")[d] + "\n")
    w(snap, hw + "rp_cnp_handled", ("1000", "500")[d] + "\n")
    w(snap, hw + "out_of_buffer", "0\n")
