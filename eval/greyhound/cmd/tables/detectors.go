package main

import "github.com/laggard-dev/laggard/internal/stats"

// detectors are Tables 3–4's rows with the engine's defaults: the sliding
// window baseline (>10% from the window median), plain BOCD, and BOCD with
// the ≥10% before/after verification (§4.2). Nothing is tuned here. The
// fourth row is BOCD+V comparing means, as the paper words it (the engine
// compares medians by default; see stats.Verified).
func detectors() []stats.Detector {
	mean := stats.DefaultVerified()
	mean.Mean = true
	return []stats.Detector{
		stats.DefaultSlidingWindow(),
		stats.DefaultBOCD(),
		stats.DefaultVerified(),
		named{mean, "bocd+v-mean"},
	}
}

// named renames a detector for the tables and keeps it Online.
type named struct {
	stats.Verified
	name string
}

func (n named) Name() string { return n.name }
