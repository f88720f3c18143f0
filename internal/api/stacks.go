package api

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/ingest"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/wire/collapsed"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
	"github.com/laggard-dev/laggard/internal/wire/pprof"
)

// SysOM-AI ingest (§4): node agents post each 5 s window's raw CPU stacks
// and OS points per job; perf/py-spy/Parca users post outside profiles.
// All three go through the shared ingest path (intake.go): the job's share
// is checked before the body is read, the body is read through the gate,
// decoded and validated, and the records are committed by the one queue
// writer, so a stack flood sheds (429) like any other.

// registerStacks adds the stack, OS-stat, profile-import and symbol
// upload routes.
func (a *API) registerStacks(mux *http.ServeMux) {
	mux.HandleFunc("POST /api/v1/jobs/{id}/stacks", a.ingestStacks)
	mux.HandleFunc("POST /api/v1/jobs/{id}/osstats", a.ingestOSStats)
	mux.HandleFunc("POST /api/v1/jobs/{id}/profiles", a.importProfile)
	mux.HandleFunc("HEAD /api/v1/symbols/{buildid}", a.headSymbols)
	mux.HandleFunc("POST /api/v1/symbols/{buildid}", a.postSymbols)
	mux.HandleFunc("DELETE /api/v1/symbols/{buildid}", a.deleteSymbols) // admin scope (server/auth.go)
}

// StacksAnswer is the answer to a stack, OS-stat or profile post.
type StacksAnswer struct {
	// AcceptedSamples are the samples (OS points) in new records;
	// AcceptedRecords the new (window, rank, node) records.
	AcceptedSamples int `json:"accepted_samples"`
	AcceptedRecords int `json:"accepted_records"`
	// Duplicates are records already stored (a resent batch): not
	// stored again.
	Duplicates int `json:"duplicates"`
	// Refused counts the records of the batch (samples, mappings, OS
	// points, absences) left out because they are invalid — a string
	// that is not UTF-8, a rank outside the job — while the rest was
	// stored (one bad record never drops a batch); RefusedRecords names
	// the first MaxRefusalsListed of them with their errors.
	Refused        int                 `json:"refused,omitempty"`
	RefusedRecords []laggardv1.Refusal `json:"refused_records,omitempty"`
}

// MaxRefusalsListed bounds the refusals an answer names (the count is
// always whole).
const MaxRefusalsListed = 20

func (s *StacksAnswer) refuse(refused []laggardv1.Refusal) {
	s.Refused = len(refused)
	if len(refused) > 0 {
		s.RefusedRecords = refused[:min(len(refused), MaxRefusalsListed)]
	}
}

// stackMetrics count SysOM-AI ingest (laggard_ingest_stack_*).
type stackMetrics struct {
	samples  *prometheus.CounterVec // stack samples durably stored, by job, encoding
	points   *prometheus.CounterVec // OS points durably stored, by job, encoding
	shed     *prometheus.CounterVec // requests shed (429/503), by kind
	shedSmpl *prometheus.CounterVec // samples of requests shed after decoding, by kind
	refused  *prometheus.CounterVec // invalid records left out of an accepted batch, by kind
	// refusedLog throttles the log line about refused records (an agent
	// with a bad process name repeats it every window).
	refusedLog throttle
}

func (m *stackMetrics) register(reg prometheus.Registerer) error {
	const ns, sub = "laggard", "ingest"
	m.samples = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "stack_samples_total",
		Help: "CPU stack samples (distinct stacks with counts) durably stored; resent duplicates not counted."}, []string{"job", "encoding"})
	m.points = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "os_points_total",
		Help: "OS/GPU/NIC metric points durably stored; resent duplicates not counted."}, []string{"job", "encoding"})
	m.shed = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "stack_shed_requests_total",
		Help: "Stack, OS-stat and profile posts shed with 429 or 503 (queue full, job share, shutdown)."}, []string{"kind"})
	m.shedSmpl = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "stack_shed_samples_total",
		Help: "Samples (OS points) of posts shed after their body was decoded; posts shed before reading are only counted as requests."}, []string{"kind"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "records_refused_total",
		Help: "Invalid records (stack samples and mappings, OS points and absences) left out of a stack, OS-stat or profile post whose other records were stored."}, []string{"kind"})
	for _, c := range []prometheus.Collector{m.samples, m.points, m.shed, m.shedSmpl, m.refused} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	for _, k := range []string{kindStacks, kindOSStats, kindProfiles} {
		m.shed.WithLabelValues(k)
		m.shedSmpl.WithLabelValues(k)
		m.refused.WithLabelValues(k)
	}
	return nil
}

func (m *stackMetrics) forget(job string) {
	for _, c := range []*prometheus.CounterVec{m.samples, m.points} {
		if c != nil {
			c.DeletePartialMatch(prometheus.Labels{"job": job})
		}
	}
}

// Values of the kind label.
const (
	kindStacks        = "stacks"
	kindOSStats       = "osstats"
	kindProfiles      = "profiles"
	encodingPprof     = "pprof"
	encodingCollapsed = "collapsed"
)

// shedWriter notes a 429/503 answer for the shed counters.
type shedWriter struct {
	http.ResponseWriter
	status int
}

func (s *shedWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// countShed counts a shed answer; samples are those decoded before it.
func (a *API) countShed(w *shedWriter, kind string, samples int) {
	if a.d.Metrics == nil || a.d.Metrics.stacks.shed == nil {
		return
	}
	if w.status == http.StatusTooManyRequests || w.status == http.StatusServiceUnavailable {
		a.d.Metrics.stacks.shed.WithLabelValues(kind).Inc()
		a.d.Metrics.stacks.shedSmpl.WithLabelValues(kind).Add(float64(samples))
	}
}

// profileJob resolves the job of a SysOM-AI post: a registered job, or —
// like collective ingest — an unknown one registered implicitly from
// ?world=N once its body is valid (the agent may be the only thing that
// knows a pure-NCCL job). It returns the job id, its world size, and a
// commit function to call once the body decoded.
func (a *API) profileJob(w http.ResponseWriter, r *http.Request) (id string, world int, register func() bool, ok bool) {
	id = r.PathValue("id")
	job, err := a.d.Catalog.Get(id)
	switch {
	case err == nil:
		return id, job.WorldSize, func() bool { return true }, true
	case errors.Is(err, store.ErrNotFound):
		implicit, ierr := implicitJob(id, r.URL.Query().Get("world"), err)
		if ierr != nil {
			status := statusOf(ierr)
			a.reject(w, r, status, reasonFor(status, reasonUnknownJob), ierr)
			return "", 0, nil, false
		}
		return id, implicit.WorldSize, func() bool {
			if _, _, err := a.d.Catalog.RegisterImplicit(implicit.ID, implicit.WorldSize, implicit.Schema, func(err error) bool { return errors.Is(err, store.ErrNotFound) }); err != nil {
				status := statusOf(err)
				a.reject(w, r, status, reasonFor(status, reasonStoreError), err)
				return false
			}
			a.d.Log.Info("job registered by stack ingest", "job", id, "world_size", implicit.WorldSize)
			return true
		}, true
	default:
		a.reject(w, r, statusOf(err), reasonStoreError, err)
		return "", 0, nil, false
	}
}

// checkProfileHeaders is checkBodyHeaders for the SysOM-AI posts, which
// also accept Content-Encoding: gzip (agents compress stacks: names and
// addresses repeat) — the decompressed body is bounded by MaxBodyBytes.
func (a *API) checkProfileHeaders(w http.ResponseWriter, r *http.Request) (gz, ok bool) {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		gz = true
	default:
		a.reject(w, r, http.StatusUnsupportedMediaType, reasonMediaType, fmt.Errorf("unsupported Content-Encoding %q: send identity or gzip", signal.Clip(enc)))
		return false, false
	}
	if r.ContentLength > a.d.MaxBodyBytes {
		a.reject(w, r, http.StatusRequestEntityTooLarge, reasonTooLarge,
			fmt.Errorf("%w: %d bytes, the limit is %d; send smaller batches", laggardv1.ErrTooLarge, r.ContentLength, a.d.MaxBodyBytes))
		return false, false
	}
	return gz, true
}

// gunzip inflates a gzip body, failing past limit decompressed bytes.
func gunzip(b []byte, limit int64) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, &signal.FieldError{Field: "body", Msg: "invalid gzip: " + signal.Clip(err.Error())}
	}
	out, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, &signal.FieldError{Field: "body", Msg: "invalid gzip: " + signal.Clip(err.Error())}
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes once decompressed", laggardv1.ErrTooLarge, limit)
	}
	return out, nil
}

// wireDecoder picks JSON or protobuf by Content-Type (the rules of
// collectiveDecoder).
func wireDecoder[F any](r *http.Request, fromJSON, fromProto F) (F, string, error) {
	var none F
	mt, err := mediaType(r)
	if err != nil {
		return none, "", err
	}
	switch mt {
	case "application/json":
		return fromJSON, encodingJSON, nil
	case "application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf":
		return fromProto, encodingProto, nil
	}
	return none, "", fmt.Errorf("unsupported Content-Type %q: send application/json or application/x-protobuf", signal.Clip(mt))
}

// ingestStacks stores a node window's stacks (POST
// /api/v1/jobs/{id}/stacks, JSON or protobuf, optionally gzip).
func (a *API) ingestStacks(rw http.ResponseWriter, r *http.Request) {
	w := &shedWriter{ResponseWriter: rw}
	decode, encoding, err := wireDecoder(r, laggardv1.UnmarshalJSONStacksPartial, laggardv1.UnmarshalProtoStacksPartial)
	a.postStacks(w, r, kindStacks, encoding, err, func(b []byte, world int) (*stack.Batch, []laggardv1.Refusal, error) {
		// Agents ship registered ranks: a sample outside the job is
		// refused alone.
		return decode(b, laggardv1.Rules{World: world})
	})
}

// importProfile stores an outside profile as rank's stacks (POST
// /api/v1/jobs/{id}/profiles?rank=&format=pprof|collapsed&start_ns=
// &end_ns=&node=). The format is ?format=, else the Content-Type
// (text/x-collapsed: collapsed; protobuf, octet-stream, x-pprof or gzip:
// pprof), else sniffed (a gzip or protobuf body is pprof). The server's
// request hygiene refuses text/plain (CORS-safelisted: a cross-site page
// could post it) before this runs; the api package alone still reads it
// as collapsed. The window is the query's, else the
// profile's own (pprof); collapsed text has none, so start_ns and end_ns
// are required with it. Samples without a pprof "rank" label are rank's
// (-1 when no rank is given: an unregistered process).
func (a *API) importProfile(rw http.ResponseWriter, r *http.Request) {
	w := &shedWriter{ResponseWriter: rw}
	q := r.URL.Query()
	var start, end int64
	for _, p := range []struct {
		name string
		dst  *int64
	}{{"start_ns", &start}, {"end_ns", &end}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				a.reject(w, r, http.StatusBadRequest, reasonInvalid, signal.FieldErrorf(p.name, "must be a positive integer (ns since the Unix epoch), got %q", signal.Clip(v)))
				return
			}
			*p.dst = n
		}
	}
	if (start == 0) != (end == 0) {
		a.reject(w, r, http.StatusBadRequest, reasonInvalid, signal.FieldErrorf("end_ns", "pass both start_ns and end_ns, or neither"))
		return
	}
	node := q.Get("node")
	if node == "" {
		node = "import"
	}
	if len(node) > stack.MaxNameLen {
		a.reject(w, r, http.StatusBadRequest, reasonInvalid, signal.FieldErrorf("node", "longer than %d bytes", stack.MaxNameLen))
		return
	}
	format := q.Get("format")
	if format == "" {
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		switch mt {
		case "text/plain", "text/x-collapsed":
			format = encodingCollapsed
		case "application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf", "application/octet-stream", "application/x-pprof", "application/gzip":
			format = encodingPprof
		}
	}
	if format != "" && format != encodingPprof && format != encodingCollapsed {
		a.reject(w, r, http.StatusBadRequest, reasonInvalid, signal.FieldErrorf("format", "must be pprof or collapsed, got %q", signal.Clip(format)))
		return
	}
	if format == encodingCollapsed && start == 0 {
		a.reject(w, r, http.StatusBadRequest, reasonInvalid, signal.FieldErrorf("start_ns", "collapsed stacks carry no time: pass start_ns and end_ns"))
		return
	}
	rankArg := q.Get("rank")
	a.postStacks(w, r, kindProfiles, format, nil, func(b []byte, world int) (*stack.Batch, []laggardv1.Refusal, error) {
		out, err := a.importedProfile(b, world, rankArg, format, node, start, end)
		return out, nil, err
	})
}

// importedProfile decodes an imported profile (importProfile's rules).
func (a *API) importedProfile(b []byte, world int, rankArg, format, node string, start, end int64) (*stack.Batch, error) {
	{
		rank := -1
		if rankArg != "" {
			n, err := strconv.Atoi(rankArg)
			if err != nil || n < -1 || n >= world {
				return nil, signal.FieldErrorf("rank", "must be an integer in [-1, %d), got %q", world, signal.Clip(rankArg))
			}
			rank = n
		}
		f := format
		if f == "" { // sniff: pprof is gzip or protobuf, collapsed is text
			f = encodingCollapsed
			if len(b) >= 2 && (b[0] == 0x1f && b[1] == 0x8b || b[0] == 0x0a) {
				f = encodingPprof
			}
			if f == encodingCollapsed && start == 0 {
				return nil, signal.FieldErrorf("start_ns", "collapsed stacks carry no time: pass start_ns and end_ns")
			}
		}
		var out *stack.Batch
		var err error
		if f == encodingPprof {
			out, err = pprof.ImportWith(bytes.NewReader(b), pprof.Options{Rank: rank, StartNS: start, EndNS: end, MaxBytes: a.d.MaxBodyBytes})
		} else {
			out, err = collapsed.Import(bytes.NewReader(b), rank)
			if err == nil {
				out.StartNS, out.EndNS = start, end
				err = out.Validate()
			}
		}
		if err != nil {
			return nil, err
		}
		if err := checkImportWindow(out.StartNS, out.EndNS, time.Now().UnixNano()); err != nil {
			return nil, err
		}
		for i := range out.Samples { // a pprof rank label must lie in the job too
			if rk := out.Samples[i].Rank; rk >= world {
				return nil, signal.FieldErrorf(fmt.Sprintf("samples[%d].rank", i), "%d outside the job's world of %d", rk, world)
			}
		}
		out.Node = node
		return out, nil
	}
}

// MaxImportSkewNS is how far past the server's clock an imported
// profile may start: a future timestamp would become every report's
// "latest" window.
const MaxImportSkewNS = int64(5 * 60 * 1e9)

// checkImportWindow bounds an imported profile's window: at most
// store.MaxWindowNS long (scans look back the longest stored window)
// and not starting in the future.
func checkImportWindow(start, end, nowNS int64) error {
	if end-start > store.MaxWindowNS {
		return signal.FieldErrorf("end_ns", "the profile's window [start_ns=%d, end_ns=%d] spans %d ns, more than the %d ns (1 h) one import may cover: import it in parts",
			start, end, end-start, store.MaxWindowNS)
	}
	if start > nowNS+MaxImportSkewNS {
		return signal.FieldErrorf("start_ns", "%d is in the future (server clock %d ns)", start, nowNS)
	}
	return nil
}

// postStacks is the shared body of the stack and profile posts. decErr
// is a Content-Type error found by the caller (415).
func (a *API) postStacks(w *shedWriter, r *http.Request, kind, encoding string, decErr error, decode func(b []byte, world int) (*stack.Batch, []laggardv1.Refusal, error)) {
	id, world, register, ok := a.profileJob(w, r)
	if !ok {
		return
	}
	gz, ok := a.checkProfileHeaders(w, r)
	if !ok {
		return
	}
	if decErr != nil {
		a.reject(w, r, http.StatusUnsupportedMediaType, reasonMediaType, decErr)
		return
	}
	var b *stack.Batch
	var refused []laggardv1.Refusal
	n, ok := a.readGated(w, r, id, func(body []byte) (err error) {
		if gz {
			if body, err = gunzip(body, a.d.MaxBodyBytes); err != nil {
				return err
			}
		}
		if b, refused, err = decode(body, world); err != nil {
			return err
		}
		return allRefused(len(b.Samples), refused)
	})
	if !ok {
		a.countShed(w, kind, 0)
		return
	}
	if !register() {
		return
	}
	a.noteRefused(r, id, kind, refused)
	parts := stackParts(b)
	if len(parts) == 0 {
		var ans StacksAnswer
		ans.refuse(refused)
		writeJSON(w, http.StatusOK, ans)
		return
	}
	if !a.commitParts(w, r, id, "samples", parts, n) {
		a.countShed(w, kind, len(b.Samples))
		return
	}
	var ans StacksAnswer
	for _, p := range parts {
		ans.AcceptedSamples += p.item.Stored.Samples
		ans.AcceptedRecords += p.item.Stored.Records
		ans.Duplicates += p.item.Stored.Duplicates
	}
	ans.refuse(refused)
	if m := a.d.Metrics; m != nil && m.stacks.samples != nil {
		m.stacks.samples.WithLabelValues(id, encoding).Add(float64(ans.AcceptedSamples))
		m.bytes.WithLabelValues(id, encoding).Add(float64(n))
	}
	writeJSON(w, http.StatusOK, ans)
}

// stackPart is the most samples one queue request holds (the ranks of a
// part are whole: a rank's samples are one record, so they never span
// two parts). A 40-frame sample costs ~2.5 KiB decoded: a part is ~5
// MiB, a few ms of store work (BenchmarkAppendStacks).
const stackPart = 2048

// stackParts splits a batch into queue parts of whole ranks; the
// dropped count and unwind stats travel with the first part.
func stackParts(b *stack.Batch) []part {
	if len(b.Samples) == 0 {
		if b.Dropped == 0 && b.Unwind == (stack.UnwindStats{}) {
			return nil
		}
		return []part{{item: &ingest.Item{Stacks: b}, items: 1}}
	}
	if len(b.Samples) <= stackPart {
		return []part{{item: &ingest.Item{Stacks: b}, items: len(b.Samples)}}
	}
	order := make([]int, len(b.Samples))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return b.Samples[x].Rank - b.Samples[y].Rank })
	var parts []part
	for lo := 0; lo < len(order); {
		hi := min(lo+stackPart, len(order))
		for hi < len(order) && b.Samples[order[hi]].Rank == b.Samples[order[hi-1]].Rank { // the last rank whole
			hi++
		}
		pb := &stack.Batch{Node: b.Node, StartNS: b.StartNS, EndNS: b.EndNS, Hz: b.Hz, Ratio: b.Ratio, Mappings: b.Mappings,
			Samples: make([]stack.Sample, 0, hi-lo)}
		for _, i := range order[lo:hi] {
			pb.Samples = append(pb.Samples, b.Samples[i])
		}
		if lo == 0 {
			pb.Dropped, pb.Unwind = b.Dropped, b.Unwind
		}
		parts = append(parts, part{item: &ingest.Item{Stacks: pb}, items: len(pb.Samples), first: lo})
		lo = hi
	}
	return parts
}

// ingestOSStats stores a node window's OS points (POST
// /api/v1/jobs/{id}/osstats, JSON or protobuf, optionally gzip).
func (a *API) ingestOSStats(rw http.ResponseWriter, r *http.Request) {
	w := &shedWriter{ResponseWriter: rw}
	id, world, register, ok := a.profileJob(w, r)
	if !ok {
		return
	}
	gz, ok := a.checkProfileHeaders(w, r)
	if !ok {
		return
	}
	decode, encoding, err := wireDecoder(r, laggardv1.UnmarshalJSONOSStatsPartial, laggardv1.UnmarshalProtoOSStatsPartial)
	if err != nil {
		a.reject(w, r, http.StatusUnsupportedMediaType, reasonMediaType, err)
		return
	}
	var b *osstat.Batch
	var refused []laggardv1.Refusal
	n, ok := a.readGated(w, r, id, func(body []byte) (err error) {
		if gz {
			if body, err = gunzip(body, a.d.MaxBodyBytes); err != nil {
				return err
			}
		}
		if b, refused, err = decode(body, laggardv1.Rules{World: world}); err != nil {
			return err
		}
		return allRefused(len(b.Points)+len(b.Absent), refused)
	})
	if !ok {
		a.countShed(w, kindOSStats, 0)
		return
	}
	if !register() {
		return
	}
	a.noteRefused(r, id, kindOSStats, refused)
	if len(b.Points) == 0 && len(b.Absent) == 0 {
		var ans StacksAnswer
		ans.refuse(refused)
		writeJSON(w, http.StatusOK, ans)
		return
	}
	p := part{item: &ingest.Item{OSStats: b}, items: max(len(b.Points), 1)}
	if !a.commitParts(w, r, id, "points", []part{p}, n) {
		a.countShed(w, kindOSStats, len(b.Points))
		return
	}
	st := p.item.Stored
	if m := a.d.Metrics; m != nil && m.stacks.points != nil {
		m.stacks.points.WithLabelValues(id, encoding).Add(float64(st.Samples))
		m.bytes.WithLabelValues(id, encoding).Add(float64(n))
	}
	ans := StacksAnswer{AcceptedSamples: st.Samples, AcceptedRecords: st.Records, Duplicates: st.Duplicates}
	ans.refuse(refused)
	writeJSON(w, http.StatusOK, ans)
}

// allRefused is the answer when a batch had records and every one was
// refused: a 400 naming the first, as a batch of one bad record always
// got (the sender learns nothing was stored).
func allRefused(kept int, refused []laggardv1.Refusal) error {
	if kept > 0 || len(refused) == 0 {
		return nil
	}
	first := refused[0]
	msg := first.Error
	if len(refused) > 1 {
		msg = fmt.Sprintf("all %d records refused; the first: %s", len(refused), first.Error)
	}
	return &signal.FieldError{Field: cmpOr(first.Field, first.Record), Msg: strings.TrimPrefix(msg, cmpOr(first.Field, first.Record)+": ")}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// noteRefused counts the records refused from an accepted batch and logs
// it, at most once a minute.
func (a *API) noteRefused(r *http.Request, job, kind string, refused []laggardv1.Refusal) {
	if len(refused) == 0 {
		return
	}
	m := a.d.Metrics
	if m != nil && m.stacks.refused != nil {
		m.stacks.refused.WithLabelValues(kind).Add(float64(len(refused)))
	}
	if m == nil || m.stacks.refusedLog.allow(time.Now()) {
		a.d.Log.Warn("refused invalid records; stored the rest of the batch", "job", job, "kind", kind, "refused", len(refused), "first", refused[0].Error, "remote", r.RemoteAddr)
	}
}

// throttle allows one event per minute.
type throttle struct {
	mu   sync.Mutex
	next time.Time
}

func (t *throttle) allow(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Before(t.next) {
		return false
	}
	t.next = now.Add(time.Minute)
	return true
}
