package ingest

import (
	"unsafe"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Per-element overheads of the decoded forms, for Cost.
const (
	vectorSize = int64(unsafe.Sizeof(stagevec.Vector{}))
	// probeEntry approximates one map entry of Vector.Probes: key header,
	// value, and the map's bucket overhead (about 2x).
	probeEntry = 2 * int64(unsafe.Sizeof("")+unsafe.Sizeof(stagevec.Probe{}))
	callSize   = int64(unsafe.Sizeof(collective.Call{}))
	commSize   = int64(unsafe.Sizeof(collective.Comm{}))
)

// Cost is the decoded in-memory size in bytes of a request payload the
// queue knows, 0 for others. For stage vectors that is, per vector, the
// struct, its durations (8 bytes per stage) and its probes — what a
// request really holds while it waits, which for a compact protobuf body
// is several times its body bytes (D2: 64 queued batches of 65,536
// vectors were 2.2 GB of memory, far more than their bodies).
//
// A type switch rather than a cost callback in Config: Config is shared
// by every payload type, and *Item covers every signal kind.
func Cost(payload any) int64 {
	switch p := payload.(type) {
	case []stagevec.Vector:
		return VectorsCost(p)
	case *Item:
		if p == nil {
			return 0
		}
		if p.Collectives != nil {
			return CollectivesCost(p.Collectives)
		}
		if p.Stacks != nil {
			return StacksCost(p.Stacks)
		}
		if p.OSStats != nil {
			return OSStatsCost(p.OSStats)
		}
		return VectorsCost(p.Vectors)
	case string: // tests
		return int64(len(p))
	}
	return 0
}

// VectorsCost is Cost for a batch of stage vectors.
func VectorsCost(vs []stagevec.Vector) int64 {
	n := int64(cap(vs)) * vectorSize
	for i := range vs {
		v := &vs[i]
		n += int64(cap(v.Durations)) * 8
		for k := range v.Probes {
			n += probeEntry + int64(len(k))
		}
	}
	return n
}

// CollectivesCost is Cost for a collective batch: the call and
// communicator structs and the strings they hold (a decoder allocates each
// call's comm id and dtype).
func CollectivesCost(b *collective.Batch) int64 {
	n := int64(cap(b.Calls))*callSize + int64(cap(b.Comms))*commSize
	for i := range b.Calls {
		n += int64(len(b.Calls[i].Comm) + len(b.Calls[i].Dtype))
	}
	for i := range b.Comms {
		c := &b.Comms[i]
		n += int64(len(c.ID)+len(c.Parent)+len(c.Backend)+len(c.Host)) + 8*int64(cap(c.Ranks))
	}
	return n
}

// StacksCost is Cost for a stack batch: samples, frames, mappings and
// the strings they hold (decoders share interned names, so this
// overcounts a protobuf batch's strings; a bound, not an estimate).
func StacksCost(b *stack.Batch) int64 {
	n := int64(cap(b.Samples))*sampleSize + int64(cap(b.Mappings))*mappingSize + int64(len(b.Node))
	for i := range b.Samples {
		s := &b.Samples[i]
		n += int64(cap(s.Frames))*frameSize + int64(len(s.Comm)+len(s.Thread))
		for j := range s.Frames {
			n += int64(len(s.Frames[j].Func) + len(s.Frames[j].File))
		}
	}
	for i := range b.Mappings {
		n += int64(len(b.Mappings[i].BuildID) + len(b.Mappings[i].Path))
	}
	return n
}

// OSStatsCost is Cost for an OS batch.
func OSStatsCost(b *osstat.Batch) int64 {
	n := int64(cap(b.Points))*pointSize + int64(len(b.Node))
	for i := range b.Absent {
		n += int64(len(b.Absent[i].Source)+len(b.Absent[i].Reason)) + 32
	}
	return n
}

var (
	sampleSize  = int64(unsafe.Sizeof(stack.Sample{}))
	frameSize   = int64(unsafe.Sizeof(stack.Frame{}))
	mappingSize = int64(unsafe.Sizeof(stack.Mapping{}))
	pointSize   = int64(unsafe.Sizeof(osstat.Point{}))
)
