package demo

import (
	"fmt"
	"slices"
	"strings"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/engine/sysom"
)

// Verdict kinds of the SysOM-AI act.
const (
	VerdictLocated      = "located"      // the hidden rank, a CPU/OS layer and the hog's path
	VerdictPartial      = "partial"      // the hidden rank, but not the layer or the path
	VerdictMissed       = "missed"       // other ranks named, not the hidden one
	VerdictInconclusive = "inconclusive" // no rank named
	VerdictNoData       = "no_data"      // no stacks reached the server
)

// SysomVerdict grades the report against the ground truth: a CPU hog on
// the hidden rank's only core.
type SysomVerdict struct {
	Kind string `json:"kind"`
	// Named: the ranks diagnosed, flagged slow or named by the temporal
	// split, ascending; Extra those that are not the hogged rank.
	Named     []int `json:"named"`
	Extra     []int `json:"extra,omitempty"`
	RankNamed bool  `json:"rank_named"`
	// Layer and Cause concluded for the hidden rank ("" when it has no
	// diagnosis); LayerOK: cpu or os — the hog takes the rank's CPU
	// (another process's stacks) and keeps it waiting runnable.
	Layer   sysom.LayerName `json:"layer,omitempty"`
	Cause   sysom.Cause     `json:"cause,omitempty"`
	LayerOK bool            `json:"layer_ok"`
	// HogPath is the "[other process] <comm>" frame found in the hidden
	// rank's evidence ("" none).
	HogPath string `json:"hog_path,omitempty"`
	Line    string `json:"line"`
}

// JudgeSysom compares the report with the hog on rank.
func JudgeSysom(r *analysis.SysomReport, rank int) *SysomVerdict {
	v := &SysomVerdict{Named: []int{}}
	if r == nil || r.Report == nil || r.Window.Ranks == 0 {
		v.Kind = VerdictNoData
		v.Line = fmt.Sprintf("– no CPU stacks reached the server for the hog window (hog on rank %d): the agent's profiler did not attach or ship — see its log", rank)
		return v
	}
	rep := r.Report
	for _, d := range rep.Diagnoses {
		v.Named = append(v.Named, d.Rank)
	}
	for _, s := range rep.SlowRanks {
		v.Named = append(v.Named, s.Rank)
	}
	if rep.Temporal != nil {
		v.Named = append(v.Named, rep.Temporal.Suspects...)
	}
	g := GradeRanks("SysOM-AI", v.Named, rank, "")
	v.Named, v.Extra = g.Named, g.Extra
	v.RankNamed = slices.Contains(v.Named, rank)
	var paths []sysom.HotPath
	for _, d := range rep.Diagnoses {
		if d.Rank != rank {
			continue
		}
		v.Layer, v.Cause = d.Layer, d.Cause
		v.LayerOK = d.Layer == sysom.LayerCPU || d.Layer == sysom.LayerOS
		for _, l := range d.Layers {
			paths = append(paths, l.Paths...)
		}
	}
	v.HogPath = foreignFrame(paths)
	if v.HogPath == "" {
		for _, f := range rep.Waterline {
			if f.Rank == rank && strings.HasPrefix(f.Func, sysom.ForeignPrefix) {
				v.HogPath = f.Func
				break
			}
		}
	}
	layer := "no layer concluded"
	if v.Layer != "" {
		layer = "layer " + string(v.Layer)
		if v.Cause != "" {
			layer += " (" + string(v.Cause) + ")"
		}
	}
	path := "no \"" + strings.TrimSpace(sysom.ForeignPrefix) + "\" path"
	if v.HogPath != "" {
		path = fmt.Sprintf("hot path %q", v.HogPath)
	}
	switch {
	case v.RankNamed && len(v.Extra) > 0:
		// Never ✔ when other ranks were named too (issue 16 item 8b).
		v.Kind = VerdictPartial
		v.Line = fmt.Sprintf("~ SysOM-AI names rank %d (hog on rank %d), %s, %s — but also %s, wrongly", rank, rank, layer, path, rankList(v.Extra))
	case v.RankNamed && v.LayerOK && v.HogPath != "":
		v.Kind = VerdictLocated
		v.Line = fmt.Sprintf("✔ SysOM-AI names rank %d (hog on rank %d), %s, %s", rank, rank, layer, path)
	case v.RankNamed:
		v.Kind = VerdictPartial
		v.Line = fmt.Sprintf("~ SysOM-AI names rank %d (hog on rank %d) but %s, %s", rank, rank, layer, path)
	case len(v.Named) > 0:
		v.Kind = VerdictMissed
		v.Line = fmt.Sprintf("✘ SysOM-AI names %s, not rank %d (the hogged one)", rankList(v.Named), rank)
	default:
		v.Kind = VerdictInconclusive
		v.Line = fmt.Sprintf("– SysOM-AI names no rank (hog on rank %d): the evidence did not single one out", rank)
	}
	return v
}

// foreignFrame returns the first "[other process] …" frame in paths.
func foreignFrame(paths []sysom.HotPath) string {
	for _, h := range paths {
		if strings.HasPrefix(h.Func, sysom.ForeignPrefix) {
			return h.Func
		}
		for _, f := range h.Stack {
			if strings.HasPrefix(f, sysom.ForeignPrefix) {
				return f
			}
		}
	}
	return ""
}
