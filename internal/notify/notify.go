// Package notify tells the outside world about incidents (issue 17 item
// 4): every state change becomes an Alertmanager alert (POST
// /api/v2/alerts, re-sent while the incident is open so Alertmanager
// keeps it firing, ended when it resolves) and, optionally, a signed
// generic webhook. Notify never blocks its caller (the incident manager,
// which runs on the ingest and fusion path): each sink has its own queue,
// bounded by count and bytes, that drops its oldest entry when full
// (laggard_notify_dropped_total and a log line say so), and one worker
// that delivers with exponential back-off until a deadline. The formats:
// docs/format/notify.md.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/ingest"
)

// Change is one state change of an incident, after it is stored.
// control.Change has the same fields, so the manager's subscriber hands
// one over as notify.Change(c).
type Change struct {
	Incident incident.Incident
	// From is the state before ("": the incident opened). From == To is
	// an update of an incident whose state did not change (its cause,
	// scope or headline did) or a re-assertion after a restart: the
	// alert is refreshed, the webhook told only when what it shows
	// changed.
	From incident.State
	To   incident.State
}

// Config configures the notifier. Zero fields take the defaults below.
type Config struct {
	// Alertmanagers are Alertmanager base URLs (http://am:9093); each
	// gets every alert (Alertmanager's own advice for an HA pair).
	// A URL that already ends in /api/v2/alerts is used as it is.
	Alertmanagers []string
	// Webhook is a URL that gets each change as signed JSON; "" none.
	Webhook string
	// WebhookSecret keys the HMAC-SHA256 signature of webhook bodies;
	// empty sends them unsigned.
	WebhookSecret []byte
	// ExternalURL is the laggard server's address as users reach it
	// (https://laggard.example.com); incident links are made from it.
	ExternalURL string

	// QueueLength and QueueBytes bound each sink's queue (defaults 4096
	// and 16 MiB); beyond either the oldest entry is dropped.
	QueueLength int
	QueueBytes  int64
	// MaxWebhookBytes bounds one webhook body (default 1 MiB): a larger
	// incident is sent without its evidence (evidence_omitted says how
	// many pieces), which its incident_url serves.
	MaxWebhookBytes int64
	// Timeout bounds one attempt (default 10s); Deadline all attempts of
	// one delivery (default 5m), which back off from BackoffMin (500ms)
	// doubling to BackoffMax (30s), or as long as a Retry-After asks.
	Timeout    time.Duration
	Deadline   time.Duration
	BackoffMin time.Duration
	BackoffMax time.Duration
	// Resend is how often the alerts of unresolved incidents are posted
	// again (default 1m). Each is posted valid for 4 × Resend, so an
	// alert whose laggard died resolves by itself after that.
	Resend time.Duration
	// DrainTimeout bounds the delivery of what is queued when Run stops
	// (default 5s).
	DrainTimeout time.Duration
	// CriticalSlowdown: an incident whose step time is at least this
	// much above healthy (default 0.5: 50 % slower) has severity
	// critical, else warning. Severity never goes down within an
	// incident (no alert flapping between the two).
	CriticalSlowdown float64
	// MaxTracked bounds the unresolved incidents remembered for re-sends
	// (default 10000); beyond it the least recently changed is dropped
	// from re-sends and logged.
	MaxTracked int
	// Client sends the requests (default: a client that follows no
	// redirect).
	Client *http.Client
	// UserAgent is sent with every request (default "laggard").
	UserAgent string
}

// Enabled reports whether c names a sink.
func (c *Config) Enabled() bool { return len(c.Alertmanagers) > 0 || c.Webhook != "" }

func (c *Config) setDefaults() {
	def := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	if c.QueueLength <= 0 {
		c.QueueLength = 4096
	}
	if c.QueueBytes <= 0 {
		c.QueueBytes = 16 << 20
	}
	if c.MaxWebhookBytes <= 0 {
		c.MaxWebhookBytes = 1 << 20
	}
	def(&c.Timeout, 10*time.Second)
	def(&c.Deadline, 5*time.Minute)
	def(&c.BackoffMin, 500*time.Millisecond)
	def(&c.BackoffMax, 30*time.Second)
	def(&c.Resend, time.Minute)
	def(&c.DrainTimeout, 5*time.Second)
	if c.CriticalSlowdown <= 0 {
		c.CriticalSlowdown = 0.5
	}
	if c.MaxTracked <= 0 {
		c.MaxTracked = 10000
	}
	if c.UserAgent == "" {
		c.UserAgent = "laggard"
	}
	if c.Client == nil {
		c.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
}

// CheckURL checks a sink or external URL: absolute http or https with a
// host. The error never quotes a password.
func CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %v", redactErr(err, raw))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%s: want an http:// or https:// URL", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%s: no host", u.Redacted())
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("%s: a URL with a #fragment", u.Redacted())
	}
	return u, nil
}

// redactErr drops the URL (and so any password in it) from a parse error.
func redactErr(err error, raw string) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return strings.ReplaceAll(err.Error(), raw, "…")
}

// Validate reports the first bad field.
func (c *Config) Validate() error {
	for _, a := range c.Alertmanagers {
		if _, err := CheckURL(a); err != nil {
			return fmt.Errorf("alertmanager URL %w", err)
		}
	}
	if c.Webhook != "" {
		if _, err := CheckURL(c.Webhook); err != nil {
			return fmt.Errorf("webhook URL %w", err)
		}
	}
	if len(c.WebhookSecret) > 0 && c.Webhook == "" {
		return errors.New("a webhook secret without a webhook URL")
	}
	if len(c.WebhookSecret) > 0 && len(c.WebhookSecret) < MinSecretBytes {
		return fmt.Errorf("the webhook secret is %d bytes; use at least %d random bytes", len(c.WebhookSecret), MinSecretBytes)
	}
	if c.ExternalURL != "" {
		if _, err := CheckURL(c.ExternalURL); err != nil {
			return fmt.Errorf("external URL %w", err)
		}
	}
	if c.CriticalSlowdown < 0 {
		return fmt.Errorf("critical slowdown %v: must not be negative", c.CriticalSlowdown)
	}
	return nil
}

// IncidentURL is where users open an incident: the web UI's incident
// page under base.
func IncidentURL(base, id string) string {
	if base == "" {
		return ""
	}
	return strings.TrimRight(base, "/") + "/#/incidents/" + url.PathEscape(id)
}

// Notifier delivers incident changes to its sinks. Create it with New,
// run it with Run, stop it with Close; Notify is safe from any goroutine.
type Notifier struct {
	cfg     Config
	log     *slog.Logger
	m       *metrics
	sinks   []*sink
	closed  atomic.Bool
	started atomic.Bool
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	lateLog ingest.Throttle
}

// New returns a notifier over cfg's sinks with its metrics on reg.
func New(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("notify: %w", err)
	}
	cfg.setDefaults()
	if log == nil {
		log = slog.Default()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("notify: registering metrics: %w", err)
	}
	n := &Notifier{cfg: cfg, log: log.With("component", "notify"), m: m, stop: make(chan struct{}), done: make(chan struct{})}
	names := map[string]int{}
	for _, a := range cfg.Alertmanagers {
		u, _ := CheckURL(a)
		post := *u
		post.Path = strings.TrimSuffix(strings.TrimRight(u.Path, "/"), "/api/v2/alerts") + "/api/v2/alerts"
		name := "alertmanager"
		if len(cfg.Alertmanagers) > 1 {
			name += "@" + u.Host
		}
		if names[name]++; names[name] > 1 {
			return nil, fmt.Errorf("notify: alertmanager %s named twice", u.Redacted())
		}
		n.sinks = append(n.sinks, n.newSink(name, &amTarget{n: n, url: post.String(), firing: map[string]*tracked{}}))
	}
	if cfg.Webhook != "" {
		n.sinks = append(n.sinks, n.newSink("webhook", &hookTarget{n: n, url: cfg.Webhook, shown: map[string]string{}}))
	}
	if len(cfg.WebhookSecret) == 0 && cfg.Webhook != "" {
		n.log.Warn("webhook deliveries are not signed: give a secret (-webhook-secret-file) so the receiver can check they come from laggard")
	}
	return n, nil
}

// Notify hands c to every sink and returns at once: it never waits for
// the network or for room in a queue.
func (n *Notifier) Notify(c Change) {
	if n == nil {
		return
	}
	if n.closed.Load() {
		for _, s := range n.sinks {
			n.m.dropped.WithLabelValues(s.name).Inc()
		}
		n.lateLog.Note(func(missed int) {
			n.log.Warn("incident change after the notifier closed: not sent", "incident", c.Incident.ID, "to", c.To, "same_since_last_log", missed)
		})
		return
	}
	now := time.Now()
	for _, s := range n.sinks {
		s.offer(c, now)
	}
}

// Run delivers until ctx is done or Close is called, then delivers what
// is queued for up to DrainTimeout (one attempt each) and returns.
func (n *Notifier) Run(ctx context.Context) {
	if !n.started.CompareAndSwap(false, true) {
		return // one Run per notifier
	}
	defer close(n.done)
	soft, stopSoft := context.WithCancel(ctx)
	defer stopSoft()
	go func() {
		select {
		case <-n.stop:
			stopSoft()
		case <-soft.Done():
		}
	}()
	// Attempts run under hard, which outlives soft by DrainTimeout so
	// the queue can drain after a shutdown.
	hard, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHard()
	var wg sync.WaitGroup
	for _, s := range n.sinks {
		wg.Go(func() { s.run(soft, hard) })
	}
	<-soft.Done()
	n.closed.Store(true)
	t := time.AfterFunc(n.cfg.DrainTimeout, stopHard)
	defer t.Stop()
	wg.Wait()
}

// Close stops Run (waiting for its drain) and refuses later changes.
func (n *Notifier) Close() error {
	if n == nil {
		return nil
	}
	n.once.Do(func() {
		n.closed.Store(true)
		close(n.stop)
	})
	if n.started.Load() {
		<-n.done
	}
	return nil
}

// metrics are the notifier's Prometheus metrics.
type metrics struct {
	sent        *prometheus.CounterVec // by sink, result
	dropped     *prometheus.CounterVec // by sink
	retries     *prometheus.CounterVec // by sink
	queued      *prometheus.GaugeVec   // by sink
	queuedBytes *prometheus.GaugeVec   // by sink
}

// Results of a delivery (laggard_notify_sent_total's result label).
const (
	resultOK = "ok"
	// resultFailed: gave up after retrying until the deadline (or the
	// drain at shutdown ended).
	resultFailed = "failed"
	// resultRejected: the receiver refused it for good (a 4xx other than
	// 408, 425 and 429); not retried.
	resultRejected = "rejected"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "laggard", "notify"
	m := &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "sent_total",
			Help: "Incident notifications (Alertmanager alerts, webhook deliveries) by sink and result: ok, failed (gave up after retries), rejected (refused by the receiver)."},
			[]string{"sink", "result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dropped_total",
			Help: "Incident notifications dropped unsent: the sink's queue was full (the oldest goes), or laggard was shutting down."},
			[]string{"sink"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "retries_total",
			Help: "Delivery attempts that failed and were retried, by sink."}, []string{"sink"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_length",
			Help: "Incident notifications waiting in a sink's queue."}, []string{"sink"}),
		queuedBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_bytes",
			Help: "Bytes of incident notifications waiting in a sink's queue."}, []string{"sink"}),
	}
	for _, c := range []prometheus.Collector{m.sent, m.dropped, m.retries, m.queued, m.queuedBytes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
