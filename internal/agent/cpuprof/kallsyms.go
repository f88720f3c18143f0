package cpuprof

import (
	"bufio"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
)

// kallsyms names kernel addresses from /proc/kallsyms: the complete
// table is on every node, so naming kernel frames node-side cannot suffer
// the sparse-table misattribution of §3.4. Names live in one string.
type kallsyms struct {
	addrs []uint64
	offs  []uint32 // start of name i in names; name i ends at offs[i+1]
	names string
	// hidden: the kernel showed zero addresses (kptr_restrict without
	// CAP_SYSLOG); every frame is then "[kernel]".
	hidden bool
}

const unknownKernel = "[kernel]"

func loadKallsyms(log *slog.Logger) *kallsyms {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		log.Warn("cpuprof: kernel frames will be unnamed", "err", err)
		return &kallsyms{hidden: true}
	}
	defer f.Close()
	k, err := parseKallsyms(f)
	if err != nil {
		log.Warn("cpuprof: kernel frames will be unnamed", "err", err)
		return &kallsyms{hidden: true}
	}
	if k.hidden {
		log.Warn("cpuprof: /proc/kallsyms shows zero addresses (kptr_restrict); kernel frames are \"[kernel]\"")
	}
	return k
}

// parseKallsyms reads "addr type name [module]" lines, keeping text
// symbols (types t, T, w, W).
func parseKallsyms(r io.Reader) (*kallsyms, error) {
	type ent struct {
		addr uint64
		name string
	}
	var ents []ent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	zero, total := 0, 0
	for sc.Scan() {
		line := sc.Text()
		a, rest, ok := strings.Cut(line, " ")
		if !ok || len(rest) < 3 || rest[1] != ' ' {
			continue
		}
		switch rest[0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		addr, err := strconv.ParseUint(a, 16, 64)
		if err != nil {
			continue
		}
		total++
		if addr == 0 {
			zero++
			continue
		}
		name := rest[2:]
		if i := strings.IndexByte(name, '\t'); i >= 0 {
			name = name[:i] + " " + strings.TrimSpace(name[i+1:])
		}
		ents = append(ents, ent{addr, name})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	k := &kallsyms{}
	if total > 0 && zero == total {
		k.hidden = true
		return k, nil
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].addr < ents[j].addr })
	var sb strings.Builder
	k.addrs = make([]uint64, len(ents))
	k.offs = make([]uint32, len(ents)+1)
	for i, e := range ents {
		k.addrs[i] = e.addr
		k.offs[i] = uint32(sb.Len())
		sb.WriteString(e.name)
	}
	k.offs[len(ents)] = uint32(sb.Len())
	k.names = sb.String()
	return k, nil
}

// name returns the symbol containing addr (the greatest start ≤ addr).
func (k *kallsyms) name(addr uint64) string {
	if k.hidden || len(k.addrs) == 0 {
		return unknownKernel
	}
	i := sort.Search(len(k.addrs), func(i int) bool { return k.addrs[i] > addr })
	if i == 0 {
		return unknownKernel
	}
	return k.names[k.offs[i-1]:k.offs[i]]
}
