// Package store is laggard's embedded on-disk store for jobs, stage
// vectors and collective calls, built on Pebble because analysis windows are range scans over
// (job, step, rank) and an LSM turns the ingest stream into sequential
// writes.
//
// Key layout (all integers big-endian so byte order is numeric order):
//
//	j/<job>                                         → Job as JSON
//	s/<job>                                         → JobStats (first, last, count), 24 bytes
//	v/<job>\x00<step uint64><rank uint32><micro uint16> → stage vector value (codec.go)
//	c/<job>\x00<rank uint32><enter_ns uint64><comm uint32><seq uint64> → collective call value
//	m/<job>\x00<comm uint32>                         → communicator: id, size, members
//	h/<job>\x00<rank uint32><comm uint32>            → highest stored seq, 8 bytes
//	x/<job>                                         → CollectiveStats, 32 bytes
//	g/<job>\x00s | p<seq u32> | r<seq u32><rank u32> → Greyhound controller state, plan, result (greyhound.go)
//	k/<job>\x00<start_ns u64><rank+1 u32><id u64>     → one rank's stacks of one node window (stack.go)
//	o/<job>\x00<start_ns u64><id u64>                → one node window's OS points (stack.go)
//	y/<job>                                         → ProfileStats, 64 bytes
//	a/<job>\x00<capture id 13B>                      → KAIR capture as JSON (capture.go)
//	t/<job>\x00<capture id 13B><rank u32><part u16>  → one rank's operator trace: part 0 header, 1..n laggard.v1.OpTrace bytes (optrace.go)
//	i/<job>\x00<incident id>                         → incident as laggard.incident/v1 JSON (incident.go)
//	n/<incident id>\x00<job>                         → the incident's summary: the index Get, List and the fleet view read
//	e/<job>\x00<evidence id>                         → one piece of the job's incident evidence (working set) as JSON
//	u/<job>\x00<at_ns u64><hash u64>                 → one incident audit action as JSON
//
// The incident keyspaces (byte layout in docs/format/incident.md) hold
// opaque JSON the incident manager (internal/control) writes and
// decodes: a fusion round's incidents and the working-set change behind
// them go in one batch, so a restarted server re-fuses the same set.
//
// The KAIR keyspaces (byte layout in docs/format/optrace.md) keep a job's
// newest KeepCaptures on-demand captures and, per capture, each rank's
// operator trace in the compact laggard.v1.OpTrace encoding, cut into
// parts of at most 8 MiB (one rank's trace is at most 64 MiB encoded).
//
// The collective keyspace (collective.go, collective_codec.go; byte layout
// in docs/format/collective.md) keeps each rank's calls in enter order, so
// a time window of one rank is one bounded iterator. Communicator ids are
// interned per job (m/), which keeps a call key at 24 bytes after the job.
// A call whose seq is above its (rank, comm) high-water mark (h/) is new by
// construction; only a resent one is read back and compared.
//
// Job ids never contain \x00, so one job's vectors form one contiguous key
// range and no job's range is a prefix of another's. A scan of steps
// [a, b] is one bounded iterator in ascending (step, rank, micro) order.
//
// A stored record is never overwritten (conflict.go, stack_conflict.go):
// writing the same key again with the same value is a duplicate (not
// written again; JobStats.Vectors counts distinct keys), with another value
// a conflict (ErrConflict; the write stores nothing). Telling new keys from
// re-sent ones is cheap: keys past LastStep are new by construction, keys
// in the newest 64 steps absent from an in-memory bitset per job (tail.go,
// rebuilt on the first write after Open by a bounded scan) are new, and
// only keys the bitset holds or late keys older than its window are read
// back, by one forward iterator per write.
//
// Durability: Append and AppendMany return only after the batch is in the
// fsync'd write-ahead log (unless Options.NoSync). Each call is one Pebble
// batch, so it is stored entirely or not at all. Concurrent callers share
// fsyncs (Pebble group-commits the WAL); AppendMany additionally puts
// several jobs' vectors in one batch for callers that queue ingest. Writes
// are serialized per job (joblock.go), not store-wide.
//
// Space (space.go): writes leave a free-space reserve plus what pending
// compactions will write; on a volume under 2 GiB the memtables and the
// reserve shrink with it, and obsolete WAL files are deleted rather than
// kept for reuse, so a store that filled its volume accepts writes again
// once space is freed.
package store
