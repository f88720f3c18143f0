package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/laggard-dev/laggard/internal/incident"
)

const t0 = int64(1_700_000_000_000_000_000)

func testInc(id string, st incident.State) incident.Incident {
	return incident.Incident{
		Schema: incident.Schema, ID: id, Job: "train-7", Incarnation: 0, State: st,
		Opened:    incident.Point{WallNS: t0, Step: 1200},
		HealthyMS: 100, SlowMS: 130,
		Scope:    incident.Scope{Ranks: []int{3}, Hosts: []string{"h7"}},
		Category: incident.CategoryNetwork, Confidence: incident.ConfidenceHigh,
		Cause:           []string{"rank:3"},
		Headline:        "rank 3 on h7 slows every step by 30 ms (network)",
		Lost:            incident.Lost{Seconds: 42.5, RankSeconds: 340, Steps: 1400},
		Evidence:        []incident.Evidence{{ID: "e1", Engine: incident.EngineGreyhound, Text: strings.Repeat("x", 100)}},
		Recommendations: []incident.Recommendation{{Text: "drain h7 and run the NCCL link test"}},
	}
}

// receiver is an httptest server that records each request and answers
// with the next status of a script (200 when it runs out).
type receiver struct {
	mu      sync.Mutex
	reqs    []recorded
	script  []int
	hold    chan struct{} // when set, each request waits for it
	entered chan struct{}
	srv     *httptest.Server
}

type recorded struct {
	header http.Header
	body   []byte
	at     time.Time
}

func newReceiver(t *testing.T, script ...int) *receiver {
	r := &receiver{script: script, entered: make(chan struct{}, 1000)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.entered <- struct{}{}
		if r.hold != nil {
			select {
			case <-r.hold:
			case <-req.Context().Done():
				return
			}
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, recorded{req.Header.Clone(), b, time.Now()})
		status := 200
		if len(r.script) > 0 {
			status, r.script = r.script[0], r.script[1:]
		}
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) requests() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.reqs...)
}

// waitFor polls cond for up to 10 s (a generous bound: no timing is
// asserted, only that it happens).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// start runs a notifier over cfg until the test ends.
func start(t *testing.T, cfg Config) (*Notifier, *prometheus.Registry, *syncBuffer) {
	t.Helper()
	reg := prometheus.NewRegistry()
	logs := &syncBuffer{}
	n, err := New(cfg, reg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return n, reg, logs
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func fast(c Config) Config {
	c.BackoffMin, c.BackoffMax, c.Timeout, c.DrainTimeout = time.Millisecond, 4*time.Millisecond, 5*time.Second, 2*time.Second
	c.ExternalURL = "https://laggard.example.com"
	return c
}

func decodeAlerts(t *testing.T, b []byte) []alert {
	t.Helper()
	var as []alert
	if err := json.Unmarshal(b, &as); err != nil {
		t.Fatalf("alert body %s: %v", b, err)
	}
	return as
}

func sent(n *Notifier, sink, result string) float64 {
	return testutil.ToFloat64(n.m.sent.WithLabelValues(sink, result))
}

// An opened incident is a firing alert with the labels and annotations
// of docs/format/notify.md; its resolution ends the same alert (same
// labels) at the resolution time.
func TestAlertFiringThenResolved(t *testing.T) {
	am := newReceiver(t)
	n, _, _ := start(t, fast(Config{Alertmanagers: []string{am.srv.URL}}))
	inc := testInc("inc-1", incident.StateOpen)
	n.Notify(Change{Incident: inc, To: incident.StateOpen})
	waitFor(t, "the firing alert", func() bool { return len(am.requests()) == 1 })
	r := am.requests()[0]
	as := decodeAlerts(t, r.body)
	if len(as) != 1 {
		t.Fatalf("%d alerts", len(as))
	}
	a := as[0]
	want := map[string]string{"alertname": "LaggardIncident", "incident": "inc-1", "job": "train-7", "state": "open",
		"scope": "ranks:3 hosts:h7", "cause": "rank:3", "category": "network", "severity": "warning"}
	for k, v := range want {
		if a.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, a.Labels[k], v)
		}
	}
	if len(a.Labels) != len(want) {
		t.Errorf("labels %v, want exactly %v", a.Labels, want)
	}
	if a.Annotations["summary"] != inc.Headline || a.Annotations["incident_url"] != "https://laggard.example.com/#/incidents/inc-1" ||
		!strings.Contains(a.Annotations["description"], "Time lost: 42.5 s") || !strings.Contains(a.Annotations["description"], "Next: drain h7") {
		t.Errorf("annotations %v", a.Annotations)
	}
	if !a.StartsAt.Equal(time.Unix(0, t0)) || !a.EndsAt.After(r.at.Add(3*time.Minute)) {
		t.Errorf("firing alert startsAt %v endsAt %v (sent %v): want the onset and a validity of 4 re-sends", a.StartsAt, a.EndsAt, r.at)
	}
	if ua := r.header.Get("User-Agent"); ua != "laggard" || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", r.header)
	}

	res := inc
	res.State = incident.StateResolved
	res.Resolved = &incident.Point{WallNS: time.Now().Add(-time.Minute).UnixNano(), Step: 2600}
	n.Notify(Change{Incident: res, From: incident.StateOpen, To: incident.StateResolved})
	waitFor(t, "the resolution", func() bool { return len(am.requests()) == 2 })
	as = decodeAlerts(t, am.requests()[1].body)
	if len(as) != 1 || !mapsEqual(as[0].Labels, a.Labels) {
		t.Fatalf("resolution %+v, want the same labels %v", as, a.Labels)
	}
	if !as[0].EndsAt.Equal(time.Unix(0, res.Resolved.WallNS)) || !strings.HasPrefix(as[0].Annotations["summary"], "Resolved: ") ||
		as[0].Annotations["state"] != "resolved" {
		t.Errorf("resolution endsAt %v (want %v), annotations %v", as[0].EndsAt, time.Unix(0, res.Resolved.WallNS), as[0].Annotations)
	}
	if got := sent(n, "alertmanager", resultOK); got != 2 {
		t.Errorf("sent ok %v, want 2", got)
	}
	if rs := n.sinks[0].t.resend(time.Now()); len(rs) != 0 {
		t.Errorf("a resolved incident is still re-sent: %d", len(rs))
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Alertmanager identifies an alert by its labels: when the cause (or the
// state) changes, the alert under the old labels ends and one under the
// new fires; severity never goes down.
func TestAlertLabelChangeEndsOldAlert(t *testing.T) {
	am := newReceiver(t)
	n, _, _ := start(t, fast(Config{Alertmanagers: []string{am.srv.URL}}))
	inc := testInc("inc-2", incident.StateOpen)
	inc.Cause, inc.SlowMS = nil, 200 // +100 %: critical
	n.Notify(Change{Incident: inc, To: incident.StateOpen})
	waitFor(t, "the first alert", func() bool { return len(am.requests()) == 1 })
	first := decodeAlerts(t, am.requests()[0].body)[0]
	if first.Labels["cause"] != "undetermined" || first.Labels["severity"] != "critical" {
		t.Fatalf("first labels %v", first.Labels)
	}
	inc.Cause, inc.SlowMS = []string{"link:2-3"}, 120 // stated; +20 % would be warning
	n.Notify(Change{Incident: inc, From: incident.StateOpen, To: incident.StateOpen})
	waitFor(t, "the relabelled alert", func() bool { return len(am.requests()) >= 2 })
	var got []alert
	for _, r := range am.requests()[1:] {
		got = append(got, decodeAlerts(t, r.body)...)
	}
	if len(got) != 2 {
		t.Fatalf("%d alerts after the cause changed, want the old one ended and the new one", len(got))
	}
	if !mapsEqual(got[0].Labels, first.Labels) || got[0].EndsAt.After(time.Now()) {
		t.Errorf("old alert %v ends %v: want its labels ended now", got[0].Labels, got[0].EndsAt)
	}
	if got[1].Labels["cause"] != "link:2-3" || got[1].Labels["severity"] != "critical" || !got[1].EndsAt.After(time.Now()) {
		t.Errorf("new alert %v ends %v", got[1].Labels, got[1].EndsAt)
	}
}

// Unresolved incidents are posted again every Resend (Alertmanager
// resolves an alert that is not re-sent before its end).
func TestAlertResend(t *testing.T) {
	am := newReceiver(t)
	cfg := fast(Config{Alertmanagers: []string{am.srv.URL}})
	cfg.Resend = 20 * time.Millisecond
	n, _, _ := start(t, cfg)
	n.Notify(Change{Incident: testInc("inc-3", incident.StateOpen), To: incident.StateOpen})
	waitFor(t, "two re-sends", func() bool { return len(am.requests()) >= 3 })
	for _, r := range am.requests() {
		as := decodeAlerts(t, r.body)
		if len(as) != 1 || as[0].Labels["incident"] != "inc-3" || !as[0].EndsAt.After(r.at) {
			t.Fatalf("re-send %s", r.body)
		}
	}
}

// An incident resolved after a restart (no memory of its alert) ends the
// alert it was fired with: the labels of the state it leaves.
func TestAlertResolveWithoutMemory(t *testing.T) {
	am := newReceiver(t)
	n, _, _ := start(t, fast(Config{Alertmanagers: []string{am.srv.URL}}))
	inc := testInc("inc-4", incident.StateResolved)
	n.Notify(Change{Incident: inc, From: incident.StateRecovering, To: incident.StateResolved})
	waitFor(t, "the resolution", func() bool { return len(am.requests()) == 1 })
	a := decodeAlerts(t, am.requests()[0].body)[0]
	if a.Labels["state"] != "recovering" || a.EndsAt.IsZero() || a.EndsAt.After(time.Now()) {
		t.Errorf("resolution %v ends %v", a.Labels, a.EndsAt)
	}
}

// A failing receiver is retried with back-off; a 4xx is not retried; a
// receiver down past the deadline is given up, and later notifications
// still go out.
func TestRetryRejectDeadline(t *testing.T) {
	t.Run("retry", func(t *testing.T) {
		am := newReceiver(t, 503, 500, 200)
		n, _, _ := start(t, fast(Config{Alertmanagers: []string{am.srv.URL}}))
		n.Notify(Change{Incident: testInc("i", incident.StateOpen), To: incident.StateOpen})
		waitFor(t, "delivery", func() bool { return sent(n, "alertmanager", resultOK) == 1 })
		if len(am.requests()) != 3 || testutil.ToFloat64(n.m.retries.WithLabelValues("alertmanager")) != 2 {
			t.Errorf("%d attempts, %v retries; want 3 and 2", len(am.requests()), testutil.ToFloat64(n.m.retries.WithLabelValues("alertmanager")))
		}
	})
	t.Run("rejected", func(t *testing.T) {
		am := newReceiver(t, 400)
		n, _, logs := start(t, fast(Config{Alertmanagers: []string{am.srv.URL}}))
		n.Notify(Change{Incident: testInc("i", incident.StateOpen), To: incident.StateOpen})
		waitFor(t, "the refusal", func() bool { return sent(n, "alertmanager", resultRejected) == 1 })
		n.Notify(Change{Incident: testInc("j", incident.StateOpen), To: incident.StateOpen})
		waitFor(t, "the next one", func() bool { return sent(n, "alertmanager", resultOK) == 1 })
		if len(am.requests()) != 2 {
			t.Errorf("%d attempts, want 2 (no retry of a 400)", len(am.requests()))
		}
		waitFor(t, "the log line", func() bool { return strings.Contains(logs.String(), "the receiver refused it") })
	})
	t.Run("deadline", func(t *testing.T) {
		script := make([]int, 1000)
		for i := range script {
			script[i] = 500
		}
		am := newReceiver(t, script...)
		cfg := fast(Config{Alertmanagers: []string{am.srv.URL}})
		cfg.Deadline = 30 * time.Millisecond
		n, _, _ := start(t, cfg)
		n.Notify(Change{Incident: testInc("i", incident.StateOpen), To: incident.StateOpen})
		waitFor(t, "giving up", func() bool { return sent(n, "alertmanager", resultFailed) == 1 })
		if k := len(am.requests()); k < 2 {
			t.Errorf("%d attempts before giving up, want retries", k)
		}
	})
}

// A full queue drops its oldest notification, counts it and logs it;
// Notify returns at once however stuck the receiver is.
func TestQueueDropsOldestAndNeverBlocks(t *testing.T) {
	hook := newReceiver(t)
	hook.hold = make(chan struct{})
	cfg := fast(Config{Webhook: hook.srv.URL, WebhookSecret: []byte("0123456789abcdef0123")})
	cfg.QueueLength = 2
	n, _, logs := start(t, cfg)
	open := func(id string) Change {
		return Change{Incident: testInc(id, incident.StateOpen), To: incident.StateOpen}
	}
	n.Notify(open("first"))
	<-hook.entered // the worker holds "first" in a post
	for _, id := range []string{"a", "b", "c", "d"} {
		n.Notify(open(id)) // a and b are dropped for c and d
	}
	for i := range 10000 {
		n.Notify(open("flood-" + string(rune('a'+i%26)))) // returns although nothing moves
	}
	if d := testutil.ToFloat64(n.m.dropped.WithLabelValues("webhook")); d != 2+10000 {
		t.Errorf("dropped %v, want %d", d, 2+10000)
	}
	if !strings.Contains(logs.String(), "the queue is full") {
		t.Errorf("no log line for the drop: %s", logs)
	}
	close(hook.hold)
	waitFor(t, "the kept ones", func() bool { return len(hook.requests()) == 3 })
	var ids []string
	for _, r := range hook.requests() {
		var p Payload
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.Incident.ID)
	}
	if ids[0] != "first" || !strings.HasPrefix(ids[1], "flood-") || !strings.HasPrefix(ids[2], "flood-") {
		t.Errorf("delivered %v: want the one in flight and the two newest", ids)
	}
}

func TestQueueBounds(t *testing.T) {
	q := queue{maxLen: 10, maxBytes: 100, wake: make(chan struct{}, 1)}
	for i := range 4 {
		if d := q.push(item{incident: string(rune('a' + i)), size: 30}); (i < 3) != (len(d) == 0) {
			t.Fatalf("push %d dropped %d", i, len(d))
		}
	}
	if n, b := q.size(); n != 3 || b != 90 {
		t.Errorf("size %d/%d, want 3 entries of 90 bytes (the oldest dropped for bytes)", n, b)
	}
	if d := q.push(item{incident: "huge", size: 101}); len(d) != 1 || d[0].incident != "huge" {
		t.Errorf("an entry larger than the bound: dropped %v", d)
	}
	got := q.pop(10)
	if len(got) != 3 || got[0].incident != "b" || got[2].incident != "d" {
		t.Errorf("pop %v", got)
	}
	if n, b := q.size(); n != 0 || b != 0 {
		t.Errorf("after pop: %d/%d", n, b)
	}
}

// The webhook body is signed over the timestamp and the body; a receiver
// that checks with Verify accepts it and refuses a changed body, another
// secret or an old timestamp. A retry keeps its delivery id.
func TestWebhookSignature(t *testing.T) {
	secret := []byte("s3cret-s3cret-s3cret")
	hook := newReceiver(t, 502, 200)
	n, _, _ := start(t, fast(Config{Webhook: hook.srv.URL, WebhookSecret: secret}))
	inc := testInc("inc-9", incident.StateOpen)
	n.Notify(Change{Incident: inc, To: incident.StateOpen})
	waitFor(t, "the delivery", func() bool { return len(hook.requests()) == 2 })
	rs := hook.requests()
	r := rs[1]
	if err := Verify(secret, r.header, r.body, time.Now(), DefaultTolerance); err != nil {
		t.Fatalf("Verify: %v (headers %v)", err, r.header)
	}
	if rs[0].header.Get(HeaderDelivery) == "" || rs[0].header.Get(HeaderDelivery) != r.header.Get(HeaderDelivery) {
		t.Errorf("delivery ids %q, %q: want one id for the retried delivery", rs[0].header.Get(HeaderDelivery), r.header.Get(HeaderDelivery))
	}
	if err := Verify(secret, rs[0].header, rs[0].body, time.Now(), DefaultTolerance); err != nil {
		t.Errorf("the first attempt is signed too: %v", err)
	}
	var p Payload
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Schema != WebhookSchema || p.Event != "incident.opened" || p.From != "" || p.To != incident.StateOpen || p.Incident.ID != "inc-9" ||
		p.IncidentURL != "https://laggard.example.com/#/incidents/inc-9" || len(p.Incident.Evidence) != 1 || r.header.Get(HeaderEvent) != "incident.opened" {
		t.Errorf("payload %+v", p)
	}
	tampered := bytes.Replace(r.body, []byte("inc-9"), []byte("inc-8"), 1)
	if Verify(secret, r.header, tampered, time.Now(), DefaultTolerance) == nil {
		t.Error("a changed body verifies")
	}
	if Verify([]byte("another-secret-0123"), r.header, r.body, time.Now(), DefaultTolerance) == nil {
		t.Error("another secret verifies")
	}
	if err := Verify(secret, r.header, r.body, time.Now().Add(10*time.Minute), DefaultTolerance); err == nil || !strings.Contains(err.Error(), "replay") {
		t.Errorf("a replay 10 minutes later: %v", err)
	}
	// The timestamp is inside the MAC: moving it forward breaks it.
	h := r.header.Clone()
	h.Set(HeaderTimestamp, "1999999999")
	if Verify(secret, h, r.body, time.Unix(1999999999, 0), DefaultTolerance) == nil {
		t.Error("a re-dated delivery verifies")
	}
}

// An update that changes nothing a receiver sees is not sent; one that
// changes the cause is; a body over the bound goes without its evidence.
func TestWebhookUpdatesAndSize(t *testing.T) {
	hook := newReceiver(t)
	cfg := fast(Config{Webhook: hook.srv.URL})
	cfg.MaxWebhookBytes = 1500
	n, _, _ := start(t, cfg)
	inc := testInc("inc-5", incident.StateOpen)
	n.Notify(Change{Incident: inc, To: incident.StateOpen})
	n.Notify(Change{Incident: inc, From: incident.StateOpen, To: incident.StateOpen}) // nothing changed
	inc.Cause = []string{"host:h7"}
	inc.Evidence = append(inc.Evidence, incident.Evidence{ID: "e2", Text: strings.Repeat("y", 2000)})
	n.Notify(Change{Incident: inc, From: incident.StateOpen, To: incident.StateOpen})
	waitFor(t, "two deliveries", func() bool { return len(hook.requests()) == 2 })
	var p Payload
	if err := json.Unmarshal(hook.requests()[1].body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Event != "incident.updated" || p.Incident.Cause[0] != "host:h7" || p.EvidenceOmitted != 2 || p.Incident.Evidence != nil {
		t.Errorf("update %+v", p)
	}
	if hook.requests()[1].header.Get(HeaderSignature) != "" {
		t.Error("signed without a secret")
	}
	if len(hook.requests()) != 2 {
		t.Errorf("%d deliveries, want 2 (the empty update is not sent)", len(hook.requests()))
	}
}

func TestEvents(t *testing.T) {
	for _, c := range []struct {
		from, to incident.State
		want     string
	}{
		{"", incident.StateOpen, "incident.opened"},
		{incident.StateOpen, incident.StateRecovering, "incident.recovering"},
		{incident.StateRecovering, incident.StateOpen, "incident.reopened"},
		{incident.StateRecovering, incident.StateResolved, "incident.resolved"},
		{incident.StateOpen, incident.StateOpen, "incident.updated"},
	} {
		if got := Event(Change{From: c.from, To: c.to}); got != c.want {
			t.Errorf("%q→%q: %s, want %s", c.from, c.to, got, c.want)
		}
	}
}

// Close drains what is queued; a change after Close is dropped and
// counted; a receiver that hangs at shutdown costs at most DrainTimeout.
func TestCloseDrainsThenDrops(t *testing.T) {
	hook := newReceiver(t)
	reg := prometheus.NewRegistry()
	n, err := New(fast(Config{Webhook: hook.srv.URL}), reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		n.Notify(Change{Incident: testInc(id, incident.StateOpen), To: incident.StateOpen})
	}
	done := make(chan struct{})
	go func() { defer close(done); n.Run(context.Background()) }()
	n.Close()
	<-done
	if len(hook.requests()) != 3 {
		t.Errorf("%d delivered at close, want 3", len(hook.requests()))
	}
	n.Notify(Change{Incident: testInc("late", incident.StateOpen), To: incident.StateOpen})
	if d := testutil.ToFloat64(n.m.dropped.WithLabelValues("webhook")); d != 1 {
		t.Errorf("dropped %v after close, want 1", d)
	}

	stuck := newReceiver(t)
	stuck.hold = make(chan struct{})
	defer close(stuck.hold)
	cfg := fast(Config{Webhook: stuck.srv.URL})
	cfg.DrainTimeout = 20 * time.Millisecond
	n, err = New(cfg, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		n.Notify(Change{Incident: testInc(id, incident.StateOpen), To: incident.StateOpen})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	<-stuck.entered
	cancel()
	<-done // returns although the receiver never answers
	if f, d := sent(n, "webhook", resultFailed), testutil.ToFloat64(n.m.dropped.WithLabelValues("webhook")); f != 1 || d != 1 {
		t.Errorf("at a stuck shutdown: failed %v dropped %v, want 1 and 1", f, d)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Alertmanagers: []string{"am:9093"}}, "http:// or https://"},
		{Config{Alertmanagers: []string{"http://"}}, "no host"},
		{Config{Webhook: "ftp://user:hunter2@x/"}, "http:// or https://"},
		{Config{WebhookSecret: []byte("0123456789abcdef")}, "without a webhook URL"},
		{Config{Webhook: "http://x/", WebhookSecret: []byte("short")}, "at least 16"},
		{Config{ExternalURL: "laggard:7070"}, "external URL"},
		{Config{Alertmanagers: []string{"http://a:1", "http://a:1/"}}, "named twice"},
	} {
		_, err := New(c.cfg, prometheus.NewRegistry(), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%+v: %v, want an error saying %q (and no password)", c.cfg, err, c.want)
		}
	}
}

func TestAlertmanagerPostURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://am:9093":                      "http://am:9093/api/v2/alerts",
		"http://am:9093/":                     "http://am:9093/api/v2/alerts",
		"https://proxy/alertmanager":          "https://proxy/alertmanager/api/v2/alerts",
		"http://am:9093/api/v2/alerts":        "http://am:9093/api/v2/alerts",
		"http://u:p@am:9093/am/api/v2/alerts": "http://u:p@am:9093/am/api/v2/alerts",
	} {
		n, err := New(Config{Alertmanagers: []string{in}}, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := n.sinks[0].t.(*amTarget).url; got != want {
			t.Errorf("%s: posts to %s, want %s", in, got, want)
		}
	}
}

func TestLabelsAreBounded(t *testing.T) {
	var s incident.Scope
	for r := range 1000 {
		s.Ranks = append(s.Ranks, r)
	}
	if l := scopeLabel(s); len(l) > maxLabelBytes {
		t.Errorf("scope label of 1000 ranks is %d bytes", len(l))
	}
	causes := []string{strings.Repeat("é", 300), "rank:1"}
	l := causeLabel(&incident.Incident{Cause: causes})
	if len(l) > maxLabelBytes || !strings.HasSuffix(l, ",+1 more") || !strings.HasPrefix(l, "é") {
		t.Errorf("cause label %q (%d bytes)", l, len(l))
	}
	if scopeLabel(incident.Scope{Whole: true}) != "job" || scopeLabel(incident.Scope{}) != "job" {
		t.Error("a whole-job scope is not \"job\"")
	}
}

func TestRetryAfter(t *testing.T) {
	if d := retryAfter("3"); d != 3*time.Second {
		t.Errorf("3: %v", d)
	}
	if d := retryAfter("99999"); d != maxRetryAfter {
		t.Errorf("capped: %v", d)
	}
	if d := retryAfter("junk"); d != 0 {
		t.Errorf("junk: %v", d)
	}
	if d := retryAfter(time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)); d != 0 {
		t.Errorf("past date: %v", d)
	}
}
