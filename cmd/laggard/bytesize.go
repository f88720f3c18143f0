package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteSize is a flag.Value for sizes in bytes: a plain integer, or a
// number with a unit (B, KB/MB/GB/TB in powers of 1000, KiB/MiB/GiB/TiB
// in powers of 1024; K/M/G/T alone mean the binary ones). Hand-written:
// no dependency of ours parses sizes, and a dozen lines do not justify one.
type byteSize int64

var byteUnits = []struct {
	suffix string
	mult   float64
}{ // longest suffixes first so "MiB" is not read as "B"
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

func (b *byteSize) Set(s string) error {
	t := strings.ToLower(strings.TrimSpace(s))
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		*b = byteSize(n)
		return nil
	}
	for _, u := range byteUnits {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || f*u.mult >= math.MaxInt64 {
			break
		}
		*b = byteSize(f * u.mult)
		return nil
	}
	return fmt.Errorf("%q is not a size: give bytes, or a number with a unit such as 512MiB or 20GB", s)
}

func (b *byteSize) String() string {
	if b == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*b), 10)
}
