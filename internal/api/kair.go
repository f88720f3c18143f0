package api

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/control"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/wire/kineto"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// KAIR's routes (contract C of issue 9): triggered operator-trace
// captures (KAIR §III-A Feature 2) — an operator or the detector asks
// ranks to record a few steps with torch.profiler, the client polls for
// the plan (the poll doubles as the clock heartbeat, Feature 4) and
// uploads its trace — and the KAIR report over a capture's traces.

// Kair is the capture controller the routes serve; *control.Kair
// implements it (the clock, the trigger metrics, the auto trigger).
type Kair interface {
	CreateCapture(job string, req analysis.CaptureRequest) (*store.Capture, error)
	Captures(job string) ([]*store.Capture, error)
	Capture(job, id string) (*store.Capture, error)
	CancelCapture(job, id string) (*store.Capture, error)
	// PendingCapture is rank's poll: the open capture it should record,
	// nil when none (marks it fetched); step is the step the rank last
	// began, inc the incarnation its process belongs to (-1 each when the
	// client did not say).
	PendingCapture(job string, rank int, step int64, inc int) (*store.Capture, error)
	// CheckUpload is checked before an upload's body is read.
	CheckUpload(job, id string, rank, inc int) (*store.Capture, error)
	PutTrace(job, id string, t *optrace.Trace, hb []store.OpHeartbeat) (*store.Capture, error)
	FailRank(job, id string, rank int, msg string) (*store.Capture, error)
	Report(ctx context.Context, job, id string) (*analysis.KairAnswer, error)
	Timeline(ctx context.Context, job, id string, step int64) (*analysis.KairTimeline, error)
}

// Upload defaults (Deps.MaxTraceBytes, MaxTraceEvents, TraceUploads).
const (
	// DefaultMaxTraceBytes bounds one rank's uploaded trace: the body, and
	// the JSON once a gzip body is inflated.
	DefaultMaxTraceBytes = int64(1) << 30
	// DefaultMaxTraceEvents bounds one rank's decoded events (~160 B
	// each in memory: 2M is ~320 MiB while the upload is decoded).
	DefaultMaxTraceEvents = 2_000_000
	// DefaultTraceUploads bounds the uploads decoded at once; more wait
	// up to traceWait, then get 503 with Retry-After (the client retries
	// with back-off).
	DefaultTraceUploads = 2
	// MaxClockSamples bounds X-Laggard-Clock.
	MaxClockSamples = 64
	// maxCaptureBody bounds POST …/captures.
	maxCaptureBody = 64 << 10
)

// traceWait is how long an upload waits for a decode slot.
const traceWait = 10 * time.Second

// Upload headers.
const (
	HeaderClock        = "X-Laggard-Clock"
	HeaderCaptureError = "X-Laggard-Capture-Error"
	HeaderTraceBase    = "X-Laggard-Trace-Base-NS"
)

// Rejection reasons of laggard_kair_rejected_total (besides the ingest
// reasons invalid, too_large, unsupported_media_type, unknown_job).
const (
	reasonUnknownCapture = "unknown_capture"
	reasonClosed         = "capture_closed"
	reasonWrongRank      = "wrong_rank"
	reasonBusy           = "busy"
)

// kairMetrics count trace uploads (laggard_kair_*; captures_total is the
// controller's, internal/control).
type kairMetrics struct {
	uploads      prometheus.Counter
	bytes        prometheus.Counter
	clockDropped prometheus.Counter
	rejected     *prometheus.CounterVec
}

func (m *kairMetrics) register(reg prometheus.Registerer) error {
	const ns, sub = "laggard", "kair"
	m.uploads = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "uploads_total",
		Help: "Rank operator traces stored (KAIR captures)."})
	m.bytes = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "upload_bytes_total",
		Help: "Request body bytes of stored rank traces."})
	m.clockDropped = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "clock_samples_dropped_total",
		Help: "X-Laggard-Clock samples dropped from stored uploads (not four epoch times in order)."})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rejected_total",
		Help: "Trace uploads refused, by reason; nothing of a refused upload is stored."}, []string{"reason"})
	for _, c := range []prometheus.Collector{m.uploads, m.bytes, m.clockDropped, m.rejected} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	for _, r := range []string{reasonInvalid, reasonTooLarge, reasonMediaType, reasonUnknownJob, reasonUnknownCapture, reasonClosed, reasonWrongRank, reasonBusy, reasonStoreError} {
		m.rejected.WithLabelValues(r)
	}
	return nil
}

// registerKair adds the KAIR routes; their scopes are in internal/server's
// routeAccess.
func (a *API) registerKair(mux *http.ServeMux) {
	if a.d.MaxTraceBytes <= 0 {
		a.d.MaxTraceBytes = DefaultMaxTraceBytes
	}
	if a.d.MaxTraceEvents <= 0 {
		a.d.MaxTraceEvents = DefaultMaxTraceEvents
	}
	if a.d.TraceUploads <= 0 {
		a.d.TraceUploads = DefaultTraceUploads
	}
	a.uploads = make(chan struct{}, a.d.TraceUploads)
	// Reports load every rank's trace and run the pipeline: gated like
	// SysOM-AI's heavy reads, with their own slots.
	heavy := make(chan struct{}, MaxHeavyReads)
	mux.HandleFunc("POST /api/v1/jobs/{id}/captures", a.createCapture)
	mux.HandleFunc("GET /api/v1/jobs/{id}/captures", a.listCaptures)
	mux.HandleFunc("GET /api/v1/jobs/{id}/captures/pending", a.pendingCapture)
	mux.HandleFunc("GET /api/v1/jobs/{id}/captures/{cid}", a.getCapture)
	mux.HandleFunc("DELETE /api/v1/jobs/{id}/captures/{cid}", a.cancelCapture)
	mux.HandleFunc("POST /api/v1/jobs/{id}/captures/{cid}/traces", a.uploadTrace)
	mux.HandleFunc("GET /api/v1/jobs/{id}/kair", a.gateNamed(heavy, "KAIR", a.kairReport))
	mux.HandleFunc("GET /api/v1/jobs/{id}/kair/timeline", a.gateNamed(heavy, "KAIR", a.kairTimeline))
}

var errNoKair = errors.New("KAIR captures are not enabled on this server")

func (a *API) kair(w http.ResponseWriter, r *http.Request) (*signal.Job, bool) {
	if a.d.Kair == nil {
		a.fail(w, r, http.StatusNotFound, errNoKair)
		return nil, false
	}
	return a.job(w, r)
}

// kairStatus maps the controller's errors: an open or cancelled capture
// and too few traces are 409, a trace over the store's bound 413.
func kairStatus(err error) int {
	switch {
	case errors.Is(err, control.ErrCaptureOpen), errors.Is(err, control.ErrCaptureClosed), errors.Is(err, analysis.ErrTooFewTraces):
		return http.StatusConflict
	case errors.Is(err, store.ErrTraceTooLarge):
		return http.StatusRequestEntityTooLarge
	}
	return statusOf(err)
}

// createCapture is a manual trigger (POST …/captures, body optional:
// {"ranks","steps","every","reason","start_step"}): 201 with the capture,
// 409 while another is open.
func (a *API) createCapture(w http.ResponseWriter, r *http.Request) {
	job, ok := a.kair(w, r)
	if !ok {
		return
	}
	var req analysis.CaptureRequest
	if r.ContentLength != 0 {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCaptureBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			a.fail(w, r, http.StatusBadRequest, jsonFieldError(err))
			return
		}
	}
	c, err := a.d.Kair.CreateCapture(job.ID, req)
	if err != nil {
		a.fail(w, r, kairStatus(err), err)
		return
	}
	a.d.Log.Info("capture requested", "job", job.ID, "capture", c.ID, "ranks", len(c.Ranks), "start_step", c.StartStep, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusCreated, c)
}

// jsonFieldError names the field of a JSON decoding error.
func jsonFieldError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &te):
		return signal.FieldErrorf(te.Field, "want %s, got a JSON %s", te.Type, te.Value)
	case errors.As(err, &se):
		return signal.FieldErrorf("body", "invalid JSON at byte %d: %v", se.Offset, err)
	case errors.As(err, &mb):
		return signal.FieldErrorf("body", "longer than %d bytes", mb.Limit)
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return signal.FieldErrorf(strings.Trim(f, `"`), "unknown field (want ranks, steps, every, reason, start_step)")
	}
	return signal.FieldErrorf("body", "%s", signal.Clip(msg))
}

// listCaptures answers {"captures": [...]}, newest first.
func (a *API) listCaptures(w http.ResponseWriter, r *http.Request) {
	job, ok := a.kair(w, r)
	if !ok {
		return
	}
	cs, err := a.d.Kair.Captures(job.ID)
	if err != nil {
		a.fail(w, r, kairStatus(err), err)
		return
	}
	if cs == nil {
		cs = []*store.Capture{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"captures": cs})
}

func (a *API) getCapture(w http.ResponseWriter, r *http.Request) {
	job, ok := a.kair(w, r)
	if !ok {
		return
	}
	c, err := a.d.Kair.Capture(job.ID, r.PathValue("cid"))
	if err != nil {
		a.fail(w, r, kairStatus(err), err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// cancelCapture cancels an open capture (200 with it; a closed one is
// returned unchanged).
func (a *API) cancelCapture(w http.ResponseWriter, r *http.Request) {
	job, ok := a.kair(w, r)
	if !ok {
		return
	}
	c, err := a.d.Kair.CancelCapture(job.ID, r.PathValue("cid"))
	if err != nil {
		a.fail(w, r, kairStatus(err), err)
		return
	}
	a.d.Log.Info("capture cancel", "job", job.ID, "capture", c.ID, "state", c.State, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, c)
}

// rankParam reads ?rank= (required), a rank of the job.
func rankParam(r *http.Request, job *signal.Job) (int, error) {
	v := r.URL.Query().Get("rank")
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || (job.WorldSize > 0 && n >= job.WorldSize) {
		if job.WorldSize <= 0 {
			return 0, signal.FieldErrorf("rank", "must be a rank ≥ 0, got %q", signal.Clip(v))
		}
		return 0, signal.FieldErrorf("rank", "must be a rank in [0, %d), got %q", job.WorldSize, signal.Clip(v))
	}
	return n, nil
}

// PendingAnswer is the poll's answer. The server times bracket the
// lookup on the server's clock: with the client's send and receive times
// they are one clock sample (KAIR Feature 4, NTP-style).
type PendingAnswer struct {
	Capture      *store.Capture `json:"capture"`
	ServerRecvNS int64          `json:"server_recv_ns"`
	ServerSendNS int64          `json:"server_send_ns"`
}

// pendingCapture answers a rank's poll (GET …/captures/pending?rank=R
// [&step=S]).
func (a *API) pendingCapture(w http.ResponseWriter, r *http.Request) {
	recv := time.Now().UnixNano()
	job, ok := a.kair(w, r)
	if !ok {
		return
	}
	rank, err := rankParam(r, job)
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	// The rank's current step (optional): where a plan should start.
	step := int64(-1)
	if v := r.URL.Query().Get("step"); v != "" {
		if step, err = strconv.ParseInt(v, 10, 64); err != nil || step < 0 || step > optrace.MaxStep {
			a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("step", "want the training step the rank last began, in [0, %d], got %q", optrace.MaxStep, signal.Clip(v)))
			return
		}
	}
	inc, err := incarnationParam(r, job)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	c, err := a.d.Kair.PendingCapture(job.ID, rank, step, inc)
	if err != nil {
		a.fail(w, r, kairStatus(err), err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, PendingAnswer{Capture: c, ServerRecvNS: recv, ServerSendNS: time.Now().UnixNano()})
}

// parseClock reads X-Laggard-Clock: a JSON array of [c_send, s_recv,
// s_send, c_recv] samples in ns (the client's poll exchanges). A header
// that is not such an array (or has more than MaxClockSamples) is an
// error naming it; a single sample that is not four epoch times in order
// (a clock stepped mid-poll) is dropped and counted, not a reason to
// lose the rank's trace: KAIR Feature 4 takes the best of the rest.
func parseClock(vals []string) (hb []store.OpHeartbeat, dropped int, err error) {
	if len(vals) == 0 {
		return nil, 0, nil
	}
	var raw [][]int64
	if err := json.Unmarshal([]byte(strings.Join(vals, ",")), &raw); err != nil {
		return nil, 0, signal.FieldErrorf(HeaderClock, "want a JSON array of [c_send, s_recv, s_send, c_recv] ns arrays: %v", signal.Clip(err.Error()))
	}
	if len(raw) > MaxClockSamples {
		return nil, 0, signal.FieldErrorf(HeaderClock, "%d samples, more than %d", len(raw), MaxClockSamples)
	}
	out := make([]store.OpHeartbeat, 0, len(raw))
	for i, s := range raw {
		if len(s) != 4 {
			return nil, 0, signal.FieldErrorf(fmt.Sprintf("%s[%d]", HeaderClock, i), "want 4 times [c_send, s_recv, s_send, c_recv], got %d", len(s))
		}
		if !clockSampleOK(s) {
			dropped++
			continue
		}
		out = append(out, store.OpHeartbeat{ClientSendNS: s[0], ServerRecvNS: s[1], ServerSendNS: s[2], ClientRecvNS: s[3]})
	}
	return out, dropped, nil
}

// clockSampleOK: four epoch times in ns, c_send ≤ c_recv and s_recv ≤
// s_send.
func clockSampleOK(s []int64) bool {
	for _, v := range s {
		if v <= 0 || v > optrace.MaxAbsNS {
			return false
		}
	}
	return s[3] >= s[0] && s[2] >= s[1]
}

// UploadAnswer is a stored trace.
type UploadAnswer struct {
	Rank   int `json:"rank"`
	Events int `json:"events"`
	Steps  int `json:"steps"`
	// ErrorRecorded: the post was a client's X-Laggard-Capture-Error.
	ErrorRecorded bool `json:"error_recorded,omitempty"`
	// ClockDropped counts X-Laggard-Clock samples dropped as invalid
	// (not four epoch times in order).
	ClockDropped int `json:"clock_dropped,omitempty"`
	// Reordered counts events of a Kineto/Chrome trace that came before
	// the ProfilerStep range or the launch they belong to: the file was
	// not in time order (allowed; they were matched after reading it).
	Reordered int64 `json:"reordered,omitempty"`
}

func (a *API) rejectKair(w http.ResponseWriter, r *http.Request, status int, reason string, err error) {
	if m := a.d.Metrics; m != nil && m.kair.rejected != nil {
		m.kair.rejected.WithLabelValues(reason).Inc()
	}
	a.fail(w, r, status, err)
}

// kairReason is the rejection reason of a controller error.
func kairReason(err error, status int) string {
	var fe *signal.FieldError
	switch {
	case errors.Is(err, control.ErrCaptureClosed):
		return reasonClosed
	case status == http.StatusNotFound:
		return reasonUnknownCapture
	case status == http.StatusRequestEntityTooLarge:
		return reasonTooLarge
	case errors.As(err, &fe) && fe.Field == "rank":
		return reasonWrongRank
	case status < 500:
		return reasonInvalid
	}
	return reasonStoreError
}

// uploadTrace stores one rank's trace of a capture (POST
// …/captures/{cid}/traces?rank=R): Kineto/Chrome-trace JSON, gzip
// sniffed, streamed through kineto.Decode; or Content-Type
// application/x-protobuf, the compact laggard.v1.OpTrace. Nothing is
// stored unless the whole trace decodes within the limits: 400 naming
// the field or element, 413 over the byte or event limit.
func (a *API) uploadTrace(w http.ResponseWriter, r *http.Request) {
	job, ok := a.kair(w, r)
	if !ok {
		if a.d.Kair != nil {
			a.countKairReject(reasonUnknownJob)
		}
		return
	}
	id := r.PathValue("cid")
	rank, err := rankParam(r, job)
	if err != nil {
		a.rejectKair(w, r, http.StatusBadRequest, reasonWrongRank, err)
		return
	}
	hb, dropped, err := parseClock(r.Header.Values(HeaderClock))
	if err != nil {
		a.rejectKair(w, r, http.StatusBadRequest, reasonInvalid, err)
		return
	}
	if dropped > 0 {
		if m := a.d.Metrics; m != nil && m.kair.clockDropped != nil {
			m.kair.clockDropped.Add(float64(dropped))
		}
		a.d.Log.Info("capture clock samples dropped", "job", job.ID, "capture", id, "rank", rank, "dropped", dropped, "kept", len(hb))
	}
	var base int64
	if v := r.Header.Get(HeaderTraceBase); v != "" {
		if base, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil || base < 0 || base > optrace.MaxAbsNS {
			a.rejectKair(w, r, http.StatusBadRequest, reasonInvalid, signal.FieldErrorf(HeaderTraceBase, "want the epoch ns of the trace's ts 0, got %q", signal.Clip(v)))
			return
		}
	}
	if msg := r.Header.Get(HeaderCaptureError); msg != "" {
		// The client could not record: the body, if any, is not read.
		if _, err := a.d.Kair.FailRank(job.ID, id, rank, msg); err != nil {
			status := kairStatus(err)
			a.rejectKair(w, r, status, kairReason(err, status), err)
			return
		}
		a.d.Log.Info("capture rank failed", "job", job.ID, "capture", id, "rank", rank, "error", signal.Clip(msg))
		writeJSON(w, http.StatusCreated, UploadAnswer{Rank: rank, ErrorRecorded: true, ClockDropped: dropped})
		return
	}
	inc, err := incarnationParam(r, job)
	if err != nil {
		a.rejectKair(w, r, statusOf(err), reasonInvalid, err)
		return
	}
	if _, err := a.d.Kair.CheckUpload(job.ID, id, rank, inc); err != nil {
		status := kairStatus(err)
		a.rejectKair(w, r, status, kairReason(err, status), err)
		return
	}
	if r.ContentLength > a.d.MaxTraceBytes {
		a.rejectKair(w, r, http.StatusRequestEntityTooLarge, reasonTooLarge,
			fmt.Errorf("%w: %d bytes, the per-rank trace limit is %d; capture fewer steps", laggardv1.ErrTooLarge, r.ContentLength, a.d.MaxTraceBytes))
		return
	}
	if r.ContentLength == 0 {
		a.rejectKair(w, r, http.StatusBadRequest, reasonInvalid, signal.FieldErrorf("body", "empty: send the rank's trace, or %s with the reason it could not record", HeaderCaptureError))
		return
	}
	proto := false
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		switch {
		case err != nil:
			a.rejectKair(w, r, http.StatusUnsupportedMediaType, reasonMediaType, fmt.Errorf("unparsable Content-Type %q", signal.Clip(ct)))
			return
		case mt == "application/x-protobuf" || mt == "application/protobuf" || mt == "application/vnd.google.protobuf":
			proto = true
		case mt == "application/json" || mt == "application/gzip" || mt == "application/octet-stream":
		default:
			a.rejectKair(w, r, http.StatusUnsupportedMediaType, reasonMediaType, fmt.Errorf("unsupported Content-Type %q: send application/json (gzip allowed) or application/x-protobuf", signal.Clip(mt)))
			return
		}
	}
	if !a.acquireUpload(w, r) {
		return
	}
	defer func() { <-a.uploads }()
	body := &capReader{r: r.Body, n: a.d.MaxTraceBytes}
	var t *optrace.Trace
	var meta kineto.Meta
	if proto {
		t, err = a.decodeOpTraceBody(body, rank)
	} else {
		t, meta, err = a.decodeKineto(r.Context(), body, rank, base)
	}
	if body.over {
		err = fmt.Errorf("%w: more than %d bytes; capture fewer steps", laggardv1.ErrTooLarge, a.d.MaxTraceBytes)
	}
	if err != nil {
		status := statusOf(err)
		if status >= 500 && !errors.Is(err, context.Canceled) {
			status = http.StatusBadRequest
		}
		reason := reasonInvalid
		var fe *signal.FieldError
		switch {
		case status == http.StatusRequestEntityTooLarge:
			reason = reasonTooLarge
		case errors.As(err, &fe) && fe.Field == "rank":
			reason = reasonWrongRank
		}
		a.rejectKair(w, r, status, reason, err)
		return
	}
	if len(hb) > 0 && !epochTimes(t) {
		// KAIR Feature 4: heartbeats are epoch ns and apply to a trace on
		// the epoch clock only. A trace with relative ts and no base
		// (neither baseTimeNanoseconds nor X-Laggard-Trace-Base-NS) would
		// get offsets of decades: keep the trace, drop the samples.
		a.d.Log.Info("capture clock samples dropped: the trace's times are not epoch ns (send "+HeaderTraceBase+")", "job", job.ID, "capture", id, "rank", rank, "dropped", len(hb))
		if m := a.d.Metrics; m != nil && m.kair.clockDropped != nil {
			m.kair.clockDropped.Add(float64(len(hb)))
		}
		dropped += len(hb)
		hb = nil
	}
	if _, err := a.d.Kair.PutTrace(job.ID, id, t, hb); err != nil {
		status := kairStatus(err)
		a.rejectKair(w, r, status, kairReason(err, status), err)
		return
	}
	steps := map[int64]bool{}
	for i := range t.Events {
		if s := t.Events[i].Step; s >= 0 && len(steps) < 1<<16 {
			steps[s] = true
		}
	}
	if m := a.d.Metrics; m != nil && m.kair.uploads != nil {
		m.kair.uploads.Inc()
		m.kair.bytes.Add(float64(a.d.MaxTraceBytes - body.n))
	}
	a.d.Log.Info("capture trace stored", "job", job.ID, "capture", id, "rank", rank, "events", len(t.Events), "steps", len(steps), "bytes", a.d.MaxTraceBytes-body.n, "reordered", meta.Reordered)
	writeJSON(w, http.StatusCreated, UploadAnswer{Rank: rank, Events: len(t.Events), Steps: len(steps), ClockDropped: dropped, Reordered: meta.Reordered})
}

func (a *API) countKairReject(reason string) {
	if m := a.d.Metrics; m != nil && m.kair.rejected != nil {
		m.kair.rejected.WithLabelValues(reason).Inc()
	}
}

// acquireUpload takes a decode slot, waiting up to traceWait; on false
// the 503 is written.
func (a *API) acquireUpload(w http.ResponseWriter, r *http.Request) bool {
	t := time.NewTimer(traceWait)
	defer t.Stop()
	select {
	case a.uploads <- struct{}{}:
		return true
	case <-t.C:
		retry := max(a.d.RetryAfter, 5*time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(int((retry+time.Second-1)/time.Second)))
		a.rejectKair(w, r, http.StatusServiceUnavailable, reasonBusy, fmt.Errorf("%d trace uploads are being decoded; retry later", cap(a.uploads)))
	case <-r.Context().Done():
	}
	return false
}

// decodeKineto streams a Kineto/Chrome trace into a Trace of rank,
// putting StartNS on the epoch clock (the file's baseTimeNanoseconds,
// else base from X-Laggard-Trace-Base-NS). One gzip layer is inflated
// here, under the byte limit; a second one is refused, since
// kineto.Decode would inflate it without a bound (a few hundred bytes can
// hold gigabytes of JSON). ctx (the request's) stops a decode whose
// client left.
func (a *API) decodeKineto(ctx context.Context, body io.Reader, rank int, base int64) (*optrace.Trace, kineto.Meta, error) {
	br := bufio.NewReaderSize(body, 64<<10)
	if isGzip(br) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, kineto.Meta{}, signal.FieldErrorf("body", "invalid gzip: %v", signal.Clip(err.Error()))
		}
		defer zr.Close()
		// The inflated JSON is bounded too: a small gzip body may inflate
		// to any size.
		inflated := &capReader{r: zr, n: a.d.MaxTraceBytes}
		ir := bufio.NewReaderSize(inflated, 64<<10)
		if isGzip(ir) {
			if inflated.over {
				return nil, kineto.Meta{}, fmt.Errorf("%w: more than %d bytes of JSON once inflated; capture fewer steps", laggardv1.ErrTooLarge, a.d.MaxTraceBytes)
			}
			return nil, kineto.Meta{}, signal.FieldErrorf("body", "gzip inside gzip: compress the trace JSON once")
		}
		t, meta, err := a.decodeKinetoJSON(ctx, ir, rank, base)
		if inflated.over {
			return nil, meta, fmt.Errorf("%w: more than %d bytes of JSON once inflated; capture fewer steps", laggardv1.ErrTooLarge, a.d.MaxTraceBytes)
		}
		return t, meta, err
	}
	return a.decodeKinetoJSON(ctx, br, rank, base)
}

// epochFloorNS: a trace whose events start before this (2001-09-09) is
// on a relative clock, not epoch ns.
const epochFloorNS = int64(1e18)

// epochTimes reports whether t's events are on the epoch clock (their
// earliest start is past epochFloorNS).
func epochTimes(t *optrace.Trace) bool {
	for i := range t.Events {
		if t.Events[i].StartNS < epochFloorNS {
			return false
		}
	}
	return len(t.Events) > 0
}

// isGzip peeks for the gzip magic (kineto.Decode sniffs the same way).
func isGzip(br *bufio.Reader) bool {
	magic, _ := br.Peek(2)
	return len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b
}

// decodeKinetoJSON reads one rank's JSON; ctx stops the decode (even
// after the body was read whole: a gzip body inflates long after).
func (a *API) decodeKinetoJSON(ctx context.Context, src io.Reader, rank int, base int64) (*optrace.Trace, kineto.Meta, error) {
	limit := a.d.MaxTraceEvents
	// Stored StartNS are epoch ns on the rank's clock whenever the trace
	// or the client says how (KAIR Feature 4: heartbeats then apply).
	t, meta, err := kineto.ReadTrace(src, kineto.ReadOptions{Ctx: ctx, MaxEvents: limit, BaseNS: base})
	switch {
	case errors.Is(err, kineto.ErrTooManyEvents):
		return nil, meta, fmt.Errorf("%w: more than %d events in one rank's trace; capture fewer steps", laggardv1.ErrTooLarge, limit)
	case errors.Is(err, laggardv1.ErrTooLarge), errors.Is(err, kineto.ErrTimeBase), isCtxErr(err):
		return nil, meta, err
	case err != nil:
		return nil, meta, &signal.FieldError{Field: "body", Msg: "not a Kineto/Chrome trace: " + clipErr(err)}
	}
	if meta.Rank >= 0 && meta.Rank != rank {
		return nil, meta, signal.FieldErrorf("rank", "the trace's distributedInfo says rank %d, the upload says rank %d", meta.Rank, rank)
	}
	if len(t.Events) == 0 {
		return nil, meta, signal.FieldErrorf("traceEvents", "no operator or kernel events (%d elements read)", meta.Elements)
	}
	t.Rank = rank
	return t, meta, nil
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// clipErr keeps a decoder error readable (it names the element and the
// byte offset).
func clipErr(err error) string {
	s := err.Error()
	if len(s) > 300 {
		s = s[:297] + "…"
	}
	return s
}

// decodeOpTraceBody reads a compact laggard.v1.OpTrace of rank.
func (a *API) decodeOpTraceBody(body io.Reader, rank int) (*optrace.Trace, error) {
	var t *optrace.Trace
	err := laggardv1.ReadBody(body, min(a.d.MaxTraceBytes, store.MaxOpTraceBytes), func(b []byte) (err error) {
		t, err = laggardv1.DecodeOpTrace(b)
		return err
	})
	if err != nil {
		var fe *signal.FieldError
		if errors.Is(err, laggardv1.ErrTooLarge) || errors.As(err, &fe) {
			return nil, err
		}
		return nil, &signal.FieldError{Field: "body", Msg: "not a laggard.v1.OpTrace: " + clipErr(err)}
	}
	if t.Rank != rank {
		return nil, signal.FieldErrorf("rank", "the trace says rank %d, the upload says rank %d", t.Rank, rank)
	}
	if len(t.Events) > a.d.MaxTraceEvents {
		return nil, fmt.Errorf("%w: %d events in one rank's trace, more than %d; capture fewer steps", laggardv1.ErrTooLarge, len(t.Events), a.d.MaxTraceEvents)
	}
	// Events may come in any order (each carries its step); stored in
	// one order, so a reordered upload analyses the same.
	t.Sort()
	return t, nil
}

// kairReport serves GET …/kair?capture=cid: the capture and its KAIR
// report (default: the newest capture with an upload).
func (a *API) kairReport(w http.ResponseWriter, r *http.Request) {
	job, ok := a.kair(w, r)
	if !ok {
		return
	}
	ans, err := a.d.Kair.Report(r.Context(), job.ID, r.URL.Query().Get("capture"))
	if err != nil {
		a.fail(w, r, kairStatus(err), err)
		return
	}
	a.writeBuffered(w, r, job.ID, ans)
}

// kairTimeline serves GET …/kair/timeline?capture=cid&step=S.
func (a *API) kairTimeline(w http.ResponseWriter, r *http.Request) {
	job, ok := a.kair(w, r)
	if !ok {
		return
	}
	step := int64(-1)
	if v := r.URL.Query().Get("step"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > optrace.MaxStep {
			a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("step", "must be a training step in [0, %d], got %q", optrace.MaxStep, signal.Clip(v)))
			return
		}
		step = n
	}
	tl, err := a.d.Kair.Timeline(r.Context(), job.ID, r.URL.Query().Get("capture"), step)
	if err != nil {
		a.fail(w, r, kairStatus(err), err)
		return
	}
	a.writeBuffered(w, r, job.ID, tl)
}
