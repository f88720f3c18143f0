package agent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// jobQueue holds one job's calls and communicator reports not yet
// accepted by the server.
type jobQueue struct {
	world int
	// comms are kept until a batch carrying them is accepted (B6): the
	// shim announces a communicator once per ring, so a lost comm record
	// is lost membership for good.
	comms     []collective.Comm
	calls     []collective.Call // oldest first
	dropped   int64             // to report in the next accepted batch
	batch     int               // calls per POST after a 413 (0: MaxBatch)
	commBatch int               // comms per POST after a 413 (0: maxComms)
	isolate   bool              // next POST: the comms alone (a 4xx to find the culprit)
	commFails int               // 4xx answers to the comms sent alone
}

// maxComms bounds the comm records riding in one batch; maxCommFails is
// how many refusals of the comms sent alone drop them (a record the
// server will never take must not poison every later batch).
const (
	maxComms     = 1000
	maxCommFails = 3
)

// Shipper batches calls per job and POSTs them (contracts §1), bounded:
// when the server is away the oldest calls are dropped and counted, never
// the trainer slowed (arch rule 7). Add and Flush may run on different
// goroutines (the drain loop adds, the ship loop flushes, B5); Flush
// posts without holding the queue lock.
type Shipper struct {
	Server   string // base URL
	Token    string
	Client   *http.Client
	Log      *slog.Logger
	MaxQueue int // calls held over all jobs (default 200,000)
	MaxBatch int // calls per POST (default 5,000)
	// RequestTimeout bounds one POST (default and at most 5 s);
	// FlushBudget bounds one Flush (default 20 s).
	RequestTimeout time.Duration
	FlushBudget    time.Duration
	Metrics        *Metrics

	flushMu sync.Mutex // one Flush at a time
	mu      sync.Mutex // guards everything below
	queues  map[string]*jobQueue
	queued  int
	// backoff state, shared by all jobs: one server
	failures  int
	notBefore time.Time
	now       func() time.Time
	once      sync.Once
}

func (s *Shipper) init() {
	s.once.Do(func() {
		s.queues = map[string]*jobQueue{}
		if s.MaxQueue <= 0 {
			s.MaxQueue = 200_000
		}
		if s.MaxBatch <= 0 {
			s.MaxBatch = 5000
		}
		if s.RequestTimeout <= 0 || s.RequestTimeout > maxRequestTimeout {
			s.RequestTimeout = maxRequestTimeout
		}
		if s.FlushBudget <= 0 {
			s.FlushBudget = 20 * time.Second
		}
		if s.Client == nil {
			s.Client = &http.Client{Timeout: maxRequestTimeout}
		}
		if s.Log == nil {
			s.Log = slog.New(slog.DiscardHandler)
		}
		if s.now == nil {
			s.now = time.Now
		}
		if s.Metrics == nil {
			s.Metrics = NewMetrics()
		}
	})
}

// maxRequestTimeout bounds every request the agent makes (B5): a
// blackholed server must not hold the ship loop for long.
const maxRequestTimeout = 5 * time.Second

// Add queues a job's records; over MaxQueue the oldest calls go.
func (s *Shipper) Add(job string, world int, comms []collective.Comm, calls []collective.Call, dropped int64) {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[job]
	if q == nil {
		q = &jobQueue{}
		s.queues[job] = q
	}
	q.world = max(q.world, world)
	if n := sanitizeCollectives(comms, calls); n > 0 {
		s.Metrics.sanitized.WithLabelValues("calls").Add(float64(n))
	}
	q.comms = append(q.comms, comms...)
	q.calls = append(q.calls, calls...)
	q.dropped += dropped
	s.queued += len(calls)
	s.trim()
}

// trim drops the oldest calls over MaxQueue; s.mu is held.
func (s *Shipper) trim() {
	for s.queued > s.MaxQueue {
		// drop from the job holding the most (its oldest first)
		var big *jobQueue
		for _, x := range s.queues {
			if big == nil || len(x.calls) > len(big.calls) {
				big = x
			}
		}
		n := min(s.queued-s.MaxQueue, len(big.calls))
		big.calls = append(big.calls[:0:0], big.calls[n:]...)
		big.dropped += int64(n)
		s.queued -= n
		s.Metrics.shipDropped.Add(float64(n))
	}
	s.Metrics.queued.Set(float64(s.queued))
}

// Queued is the number of calls waiting.
func (s *Shipper) Queued() int {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued
}

// errRetry marks a failure worth retrying (network, 429, 5xx).
type errRetry struct {
	err   error
	after time.Duration
}

func (e *errRetry) Error() string { return e.err.Error() }

// errStatus is a non-retryable HTTP answer; field is the record or field
// the server's error names ("calls[3].comm"), when it names one.
type errStatus struct {
	code  int
	msg   string
	field string
}

func (e *errStatus) Error() string { return e.msg }

// Flush posts every queued batch it can, within FlushBudget; it stops at
// the first retryable failure and waits out the backoff before the next
// Flush tries again.
func (s *Shipper) Flush(ctx context.Context) error {
	s.init()
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.FlushBudget)
	defer cancel()
	s.mu.Lock()
	if s.now().Before(s.notBefore) {
		s.mu.Unlock()
		return nil
	}
	jobs := make([]string, 0, len(s.queues))
	for j := range s.queues {
		jobs = append(jobs, j)
	}
	s.mu.Unlock()
	sort.Strings(jobs)
	for _, job := range jobs {
		skipComms := false // the comms were refused alone in this Flush
		for {
			if err := ctx.Err(); err != nil {
				return err // budget spent: the rest waits for the next Flush
			}
			b, world, ok := s.take(job, skipComms)
			if !ok {
				break
			}
			err := s.post(ctx, job, world, &b)
			again, retErr := s.settle(job, &b, err, &skipComms)
			if retErr != nil {
				return retErr
			}
			if !again {
				break
			}
		}
	}
	return nil
}

// take cuts the next batch of job out of its queue; ok false when there
// is nothing to send.
func (s *Shipper) take(job string, skipComms bool) (b collective.Batch, world int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[job]
	if q == nil {
		return b, 0, false
	}
	if q.isolate && len(q.comms) == 0 {
		q.isolate = false
	}
	n := min(len(q.calls), cmp.Or(q.batch, s.MaxBatch))
	k := min(len(q.comms), cmp.Or(q.commBatch, maxComms))
	if q.isolate {
		n = 0
	}
	if skipComms {
		k = 0
	}
	if n == 0 && k == 0 && (q.dropped == 0 || skipComms) {
		if len(q.calls) == 0 && len(q.comms) == 0 && q.dropped == 0 {
			delete(s.queues, job)
		}
		return b, 0, false
	}
	b.Comms = slices.Clone(q.comms[:k])
	b.Calls = slices.Clone(q.calls[:n])
	b.Dropped = q.dropped
	q.calls = append(q.calls[:0:0], q.calls[n:]...)
	q.dropped = 0
	s.queued -= n
	s.Metrics.queued.Set(float64(s.queued))
	return b, q.world, true
}

// settle applies a POST's outcome to job's queue; again reports whether
// Flush should go on with this job, retErr a retryable failure.
func (s *Shipper) settle(job string, b *collective.Batch, err error, skipComms *bool) (again bool, retErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[job]
	if q == nil { // only Flush deletes queues; be safe
		q = &jobQueue{}
		s.queues[job] = q
	}
	n, k := len(b.Calls), len(b.Comms)
	requeue := func() {
		q.calls = append(b.Calls, q.calls...)
		q.dropped += b.Dropped
		s.queued += n
		s.trim()
	}
	var re *errRetry
	var st *errStatus
	switch {
	case err == nil:
		s.failures = 0
		q.comms = q.comms[k:]
		if k > 0 {
			q.commFails = 0
		}
		q.isolate = false
		s.Metrics.batches.Inc()
		s.Metrics.shipped.Add(float64(n))
		return true, nil
	case errors.As(err, &re):
		requeue()
		s.failures++
		d := backoff(s.failures)
		if re.after > 0 {
			d = re.after
		}
		s.notBefore = s.now().Add(d)
		s.Metrics.postErrors.Inc()
		s.Log.Warn("shipping collectives failed; will retry", "job", job, "err", err, "retry_in", d.Round(time.Millisecond), "queued", s.queued)
		return false, err
	case errors.As(err, &st) && st.code == http.StatusRequestEntityTooLarge && (n > 1 || k > 1):
		// too big: halve what was largest and send again (B6)
		s.failures = 0
		requeue()
		if n > 1 {
			q.batch = max(1, n/2)
		} else {
			q.commBatch = max(1, k/2)
		}
		s.Log.Info("server refused a batch as too large; halving it", "job", job, "calls", n, "comms", k)
		return true, nil
	}
	// The server refused the batch itself: sending it again as is cannot
	// help. Never let the comm records go with it (B6).
	s.failures = 0
	s.Metrics.postErrors.Inc()
	// One bad record never drops a batch (issue 16 item 8a): when the
	// refusal names a record, drop that one and send the rest again.
	if st != nil {
		if i, ok := recordIndex(st.field, "calls"); ok && i < n {
			b.Calls = slices.Delete(b.Calls, i, i+1)
			n--
			requeue()
			q.dropped++
			s.Metrics.shipDropped.Inc()
			s.Log.Warn("server refused one call; dropped it and sending the rest again", "job", job, "err", err)
			return true, nil
		}
		if i, ok := recordIndex(st.field, "comms"); ok && i < k && i < len(q.comms) {
			q.comms = slices.Delete(q.comms, i, i+1)
			if n > 0 {
				requeue()
			} else {
				q.dropped += b.Dropped
			}
			s.Log.Warn("server refused one communicator record; dropped it and sending the rest again", "job", job, "err", err)
			return true, nil
		}
	}
	switch {
	case k > 0 && n > 0:
		requeue()
		q.isolate = true // find out whether the comms or the calls are refused
		return true, nil
	case k > 0:
		q.dropped += b.Dropped
		q.isolate = false
		*skipComms = true
		q.commFails++
		if q.commFails >= maxCommFails {
			q.comms = q.comms[k:]
			q.commFails = 0
			s.Log.Error("server keeps rejecting communicator records; dropping them", "job", job, "err", err, "comms", k)
		} else {
			s.Log.Warn("server rejected communicator records; will send them again", "job", job, "err", err, "comms", k)
		}
		return true, nil
	}
	s.Log.Error("server rejected a collectives batch; dropping its calls", "job", job, "err", err, "calls", n)
	q.dropped += b.Dropped + int64(n)
	s.Metrics.shipDropped.Add(float64(n))
	return false, nil
}

// backoff is exponential from 500 ms to 60 s with ±50% jitter, so a fleet
// of agents does not return to a recovering server in step.
func backoff(failures int) time.Duration {
	d := 500 * time.Millisecond << min(failures-1, 7)
	d = min(d, 60*time.Second)
	return d/2 + time.Duration(rand.Int64N(int64(d)))
}

func (s *Shipper) post(ctx context.Context, job string, world int, b *collective.Batch) error {
	// Protobuf, not JSON: the server decodes it about four times faster
	// (internal/wire/laggardv1 benchmarks), and a node's agent carries
	// every local rank's calls.
	body, err := laggardv1.MarshalProtoCollectives(b)
	if err != nil {
		return err
	}
	u := s.Server + "/api/v1/jobs/" + url.PathEscape(job) + "/collectives"
	if world > 0 {
		u += "?world=" + strconv.Itoa(world)
	}
	return postBody(ctx, s.Client, s.Token, s.RequestTimeout, http.MethodPost, u, "application/x-protobuf", bytes.NewReader(body))
}

// postBody sends one request and classifies the answer: nil for 2xx,
// *errRetry for what may succeed later (network, 429, 5xx, 401/403),
// *errStatus for a refusal. Every shipper of the agent posts through it.
func postBody(ctx context.Context, c *http.Client, token string, timeout time.Duration, method, u, ctype string, body io.Reader) error {
	_, err := postAnswer(ctx, c, token, timeout, method, u, ctype, body)
	return err
}

// maxAnswer bounds the bytes of a 2xx answer the agent reads.
const maxAnswer = 64 << 10

// postAnswer is postBody that also returns a 2xx answer's body (at most
// maxAnswer bytes).
func postAnswer(ctx context.Context, c *http.Client, token string, timeout time.Duration, method, u, ctype string, body io.Reader) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, &errRetry{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		ans, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		return ans, nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		// 401/403 too: a token being rotated should not lose data
		return nil, &errRetry{err: fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg)), after: retryAfter(resp.Header.Get("Retry-After"))}
	}
	var eb struct {
		Field string `json:"field"`
	}
	_ = json.Unmarshal(msg, &eb)
	return nil, &errStatus{code: resp.StatusCode, msg: fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(msg)), field: eb.Field}
}

// recordIndex reads the record a field path names: "calls[3].comm" with
// kind "calls" is 3; ok false when it names another kind or none.
func recordIndex(field, kind string) (int, bool) {
	rest, ok := strings.CutPrefix(field, kind+"[")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "]")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(num)
	return i, err == nil && i >= 0
}

// retryAfter reads a Retry-After header (seconds or an HTTP date),
// capped at 5 minutes.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return min(time.Duration(n)*time.Second, 5*time.Minute)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), 5*time.Minute)
	}
	return 0
}
