package notify

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/laggard-dev/laggard/internal/ingest"
)

// target is what one sink delivers to: Alertmanager (alertmanager.go)
// or a webhook (webhook.go).
type target interface {
	// items turns a change into queue entries; it is called by Notify
	// and must be cheap and never block on I/O.
	items(c Change, now time.Time) []item
	// post delivers a batch once: retry says whether another attempt may
	// succeed, after at least wait (a Retry-After) when non-zero.
	post(ctx context.Context, batch []item) (wait time.Duration, retry bool, err error)
	// batchSize is the most entries one post carries.
	batchSize() int
	// resend returns what to post again now (nil: nothing).
	resend(now time.Time) []item
}

// item is one queued notification.
type item struct {
	incident string
	size     int64
	alert    *alert // Alertmanager
	body     []byte // webhook: the JSON body
	delivery string // webhook: the delivery id (the same on every retry)
	event    string // webhook: the payload's event
}

// sink is one destination: its queue, its worker and its target.
type sink struct {
	n      *Notifier
	name   string
	t      target
	q      queue
	drops  ingest.Throttle
	failed ingest.Throttle
}

func (n *Notifier) newSink(name string, t target) *sink {
	s := &sink{n: n, name: name, t: t}
	s.q = queue{maxLen: n.cfg.QueueLength, maxBytes: n.cfg.QueueBytes, wake: make(chan struct{}, 1)}
	for _, r := range []string{resultOK, resultFailed, resultRejected} {
		n.m.sent.WithLabelValues(name, r)
	}
	n.m.dropped.WithLabelValues(name)
	n.m.retries.WithLabelValues(name)
	s.gauge()
	return s
}

// offer queues c's entries, dropping the oldest when the queue is full.
func (s *sink) offer(c Change, now time.Time) {
	for _, it := range s.t.items(c, now) {
		if dropped := s.q.push(it); len(dropped) > 0 {
			s.drop(dropped, "the queue is full: the oldest notification was dropped")
		}
	}
	s.gauge()
}

// drop counts and logs notifications that will never be sent.
func (s *sink) drop(items []item, why string) {
	s.n.m.dropped.WithLabelValues(s.name).Add(float64(len(items)))
	s.drops.Note(func(missed int) {
		s.n.log.Warn("incident notification dropped: "+why, "sink", s.name, "incident", items[0].incident,
			"dropped", len(items), "dropped_unlogged_since_last_log", missed)
	})
}

func (s *sink) gauge() {
	n, b := s.q.size()
	s.n.m.queued.WithLabelValues(s.name).Set(float64(n))
	s.n.m.queuedBytes.WithLabelValues(s.name).Set(float64(b))
}

// run delivers the queue and the periodic re-sends until soft is done,
// then drains the queue under hard (one attempt each).
func (s *sink) run(soft, hard context.Context) {
	tick := time.NewTicker(s.n.cfg.Resend)
	defer tick.Stop()
	draining := false
	for {
		if hard.Err() != nil {
			if rest := s.q.pop(s.q.maxLen); len(rest) > 0 {
				s.drop(rest, "laggard stopped before it could be sent")
			}
			s.gauge()
			return
		}
		if batch := s.q.pop(s.t.batchSize()); len(batch) > 0 {
			s.gauge()
			s.deliver(soft, hard, batch)
			continue
		}
		if draining {
			return
		}
		select {
		case <-soft.Done():
			draining = true
		case <-s.q.wake:
		case <-tick.C:
			items := s.t.resend(time.Now())
			for len(items) > 0 && soft.Err() == nil {
				k := min(len(items), s.t.batchSize())
				s.deliver(soft, hard, items[:k])
				items = items[k:]
			}
		}
	}
}

// deliver posts batch, retrying with exponential back-off and jitter
// until Deadline; once soft is done (shutdown) it makes one attempt.
func (s *sink) deliver(soft, hard context.Context, batch []item) {
	cfg := &s.n.cfg
	deadline := time.Now().Add(cfg.Deadline)
	backoff := cfg.BackoffMin
	for {
		actx, cancel := context.WithTimeout(hard, cfg.Timeout)
		wait, retry, err := s.t.post(actx, batch)
		cancel()
		if err == nil {
			s.n.m.sent.WithLabelValues(s.name, resultOK).Add(float64(len(batch)))
			return
		}
		wait = max(wait, jitter(backoff))
		if !retry || soft.Err() != nil || time.Now().Add(wait).After(deadline) {
			result, why := resultFailed, "gave up retrying"
			if !retry {
				result, why = resultRejected, "the receiver refused it"
			}
			s.n.m.sent.WithLabelValues(s.name, result).Add(float64(len(batch)))
			s.failed.Note(func(missed int) {
				s.n.log.Warn("incident notification not delivered: "+why, "sink", s.name, "incident", batch[0].incident,
					"notifications", len(batch), "err", err, "same_since_last_log", missed)
			})
			return
		}
		s.n.m.retries.WithLabelValues(s.name).Inc()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-soft.Done():
			t.Stop()
		}
		backoff = min(2*backoff, cfg.BackoffMax)
	}
}

// jitter spreads d over [0.8d, 1.2d) so many laggards do not retry in step.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// maxRetryAfter bounds a receiver's Retry-After.
const maxRetryAfter = 5 * time.Minute

// send makes one POST of body with hdr and classifies the answer: 2xx is
// delivered; 408, 425, 429 and 5xx (and transport errors) may succeed
// later; any other status will not (a redirect is not followed: the
// signature and the body must not go elsewhere).
func (n *Notifier) send(ctx context.Context, url string, body []byte, hdr http.Header) (time.Duration, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, false, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", n.cfg.UserAgent)
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		return 0, true, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection
	if resp.StatusCode/100 == 2 {
		return 0, false, nil
	}
	err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
	switch c := resp.StatusCode; {
	case c == http.StatusRequestTimeout, c == http.StatusTooEarly, c == http.StatusTooManyRequests, c >= 500:
		return retryAfter(resp.Header.Get("Retry-After")), true, err
	}
	return 0, false, err
}

// retryAfter reads a Retry-After header (seconds or an HTTP date).
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if s, err := strconv.Atoi(v); err == nil {
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	}
	return min(max(d, 0), maxRetryAfter)
}

// queue is a FIFO bounded by count and bytes that drops its oldest
// entries to make room: the newest state of an incident matters most.
type queue struct {
	mu       sync.Mutex
	items    []item
	head     int
	bytes    int64
	maxLen   int
	maxBytes int64
	wake     chan struct{}
}

// push appends it and returns what was dropped for it (it itself when it
// alone is larger than the byte bound).
func (q *queue) push(it item) (dropped []item) {
	q.mu.Lock()
	if it.size > q.maxBytes {
		q.mu.Unlock()
		return []item{it}
	}
	for len(q.items)-q.head >= q.maxLen || q.bytes+it.size > q.maxBytes {
		old := q.items[q.head]
		q.items[q.head] = item{}
		q.head++
		q.bytes -= old.size
		dropped = append(dropped, old)
	}
	if q.head > 0 && q.head >= len(q.items)/2 {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	q.items = append(q.items, it)
	q.bytes += it.size
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return dropped
}

// pop takes up to k entries from the front.
func (q *queue) pop(k int) []item {
	q.mu.Lock()
	defer q.mu.Unlock()
	k = min(k, len(q.items)-q.head)
	if k <= 0 {
		return nil
	}
	out := make([]item, k)
	copy(out, q.items[q.head:q.head+k])
	clear(q.items[q.head : q.head+k])
	q.head += k
	for _, it := range out {
		q.bytes -= it.size
	}
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return out
}

func (q *queue) size() (int, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) - q.head, q.bytes
}
