package osstat

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// perCPUTable is /proc/interrupts or /proc/softirqs: a header naming the
// online CPUs, then one row per line.
//
// Hand-parsed rather than with procfs: procfs's Interrupts slices
// parts[1:cpuNum+1] without a length check (a short row panics) and keeps
// counts as strings; its Softirqs maps columns to positions, which is
// wrong when a CPU is offline (the header then skips that number), and
// knows only ten fixed rows.
type perCPUTable struct {
	CPUs []int // column → CPU number, from the header
	Rows []perCPURow
}

type perCPURow struct {
	Key    string   // "24", "LOC", "NET_RX"
	Counts []uint64 // one per CPU column, or a single node total (ERR, MIS)
	Total  bool     // Counts is one node-wide total
	Desc   []string // what follows the counts: chip, hwirq, actions; or a description
}

// parsePerCPU parses the table. A malformed row is skipped and the first
// such problem returned as rowErr (naming the line); only a missing or
// malformed header is fatal. At most maxRows rows are kept.
func parsePerCPU(b []byte, maxRows, maxCPUs int) (t perCPUTable, rowErr error, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		for i, h := range f {
			n, ok := strings.CutPrefix(h, "CPU")
			v, e := strconv.Atoi(n)
			if !ok || e != nil || v < 0 || v >= maxCPUs {
				return t, nil, fmt.Errorf("line %d: header column %d is %q, want CPU<n> with n < %d", line, i+1, h, maxCPUs)
			}
			if len(t.CPUs) > 0 && v <= t.CPUs[len(t.CPUs)-1] {
				return t, nil, fmt.Errorf("line %d: header CPU numbers not increasing at %q", line, h)
			}
			t.CPUs = append(t.CPUs, v)
		}
		break
	}
	if len(t.CPUs) == 0 {
		if err := sc.Err(); err != nil {
			return t, nil, err
		}
		return t, nil, fmt.Errorf("line %d: no CPU header", line)
	}
	seen := map[string]bool{}
	for sc.Scan() {
		line++
		s := sc.Text()
		if strings.TrimSpace(s) == "" {
			continue
		}
		key, rest, ok := strings.Cut(s, ":")
		key = strings.TrimSpace(key)
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			if rowErr == nil {
				rowErr = fmt.Errorf("line %d: no \"<name>:\" prefix", line)
			}
			continue
		}
		if seen[key] {
			if rowErr == nil {
				rowErr = fmt.Errorf("line %d: row %q repeated", line, key)
			}
			continue
		}
		f := strings.Fields(rest)
		n := 0
		var counts []uint64
		for n < len(f) && n < len(t.CPUs) {
			v, e := strconv.ParseUint(f[n], 10, 64)
			if e != nil {
				break
			}
			counts = append(counts, v)
			n++
		}
		r := perCPURow{Key: key, Counts: counts, Desc: f[n:]}
		switch {
		case n == len(t.CPUs):
		case n == 1 && len(f) == 1:
			r.Total = true // ERR:, MIS: carry one node-wide count
		default:
			if rowErr == nil {
				rowErr = fmt.Errorf("line %d: row %q has %d counts for %d CPUs", line, key, n, len(t.CPUs))
			}
			continue
		}
		if len(t.Rows) >= maxRows {
			if rowErr == nil {
				rowErr = fmt.Errorf("line %d: more than %d rows; the rest ignored", line, maxRows)
			}
			break
		}
		seen[key] = true
		t.Rows = append(t.Rows, r)
	}
	return t, rowErr, sc.Err()
}

// irqName is the Device of an interrupts row: the mnemonic for the
// architecture rows (LOC, RES, NMI, …), "<irq>:<actions>" for numbered
// lines, so an operator sees which device's queue lands on a CPU (§5.4
// case 2: "check IRQ affinity of the NIC").
func irqName(r perCPURow) string {
	if _, err := strconv.Atoi(r.Key); err != nil {
		return clip(r.Key)
	}
	d := r.Desc
	if len(d) > 0 {
		d = d[1:] // the irq chip
	}
	if len(d) > 0 && isHWIRQ(d[0]) {
		d = d[1:]
	}
	if len(d) == 0 {
		return clip(r.Key)
	}
	return clip(r.Key + ":" + strings.Join(d, " "))
}

// isHWIRQ matches the hwirq/trigger column: "5-edge", "16-fasteoi", "0".
func isHWIRQ(s string) bool {
	num, _, _ := strings.Cut(s, "-")
	if num == "" {
		return false
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

const maxDevice = 200

func clip(s string) string {
	if len(s) <= maxDevice {
		return s
	}
	// Keep valid UTF-8 by cutting at a rune boundary.
	i := maxDevice
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i]
}

// parseKV reads "key value" (/proc/vmstat) or "key : value"
// (/proc/<pid>/sched) lines into the integers of the wanted keys; other
// lines, including non-numeric ones, are ignored. procfs has no parser
// for either file.
func parseKV(b []byte, want map[string]bool) map[string]uint64 {
	out := map[string]uint64{}
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		var k, v []byte
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			k, v = line[:i], line[i+1:]
		} else {
			f := bytes.Fields(line)
			if len(f) != 2 {
				continue
			}
			k, v = f[0], f[1]
		}
		key := string(bytes.TrimSpace(k))
		if !want[key] {
			continue
		}
		val := bytes.TrimSpace(v)
		// /proc/<pid>/sched prints some counters as "123.000000"; the
		// ones we read are integers, but accept a zero fraction.
		if i := bytes.IndexByte(val, '.'); i >= 0 && strings.Trim(string(val[i+1:]), "0") == "" {
			val = val[:i]
		}
		n, err := strconv.ParseUint(string(val), 10, 64)
		if err != nil {
			continue
		}
		out[key] = n
	}
	return out
}
