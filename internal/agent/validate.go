package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// The validation protocol's types (contracts §3, Greyhound §4.3 Fig. 10)
// are the server's, from internal/signal/collective.
type (
	Plan      = collective.ValidationPlan
	GEMMPlan  = collective.GEMMTest
	P2PPlan   = collective.P2PTest
	Link      = collective.Link
	Result    = collective.ValidationResult
	P2PResult = collective.P2PResult
)

// Executor runs a plan's benchmarks for one rank while its training
// process is held in the shim's trap. On GPU hosts it reuses the
// trainer's CUDA context and NCCL communicators (Greyhound §6); that
// needs an in-process hook this agent does not have yet. ctx ends at the
// plan's budget (or deadline): an executor stops there with what it has,
// and honours the plan's pass budget and stop ratio (P2PPlan) as the
// Python client does, stopping a pass once it has run PassBudgetMS or
// after the size that proves a link StopRatio times slower.
type Executor interface {
	Run(ctx context.Context, job string, rank int, p Plan) Result
}

// ErrNoExecutor is what NoExecutor reports.
var ErrNoExecutor = errors.New("GPU validation executor not available")

// NoExecutor is the default Executor: it measures nothing and says so.
type NoExecutor struct{}

// Run reports ErrNoExecutor.
func (NoExecutor) Run(_ context.Context, _ string, rank int, _ Plan) Result {
	return Result{Rank: rank, Error: ErrNoExecutor.Error()}
}

// Available reports false: there is nothing to run, so training is never
// trapped for it (R9).
func (NoExecutor) Available() bool { return false }

// available reports whether e can run plans; an Executor may say it cannot
// (Available() false) and is then never given a trapped rank.
func available(e Executor) bool {
	if x, ok := e.(interface{ Available() bool }); ok {
		return x.Available()
	}
	return true
}

// maxDeadline bounds one trap whatever the plan asks (review N3).
const maxDeadline = 5 * time.Minute

// planHold is how long a plan may hold training: its deadline, capped by
// its benchmark budget (issue 16) and by maxDeadline.
func planHold(p Plan) time.Duration {
	d := min(time.Duration(p.DeadlineMS)*time.Millisecond, maxDeadline)
	if p.BudgetMS > 0 {
		d = min(d, time.Duration(p.BudgetMS)*time.Millisecond)
	}
	return d
}

// fetchPlan asks for rank's pending plan; nil when none (204).
func (a *Agent) fetchPlan(ctx context.Context, job string, rank int) (*Plan, error) {
	u := a.cfg.Server + "/api/v1/jobs/" + url.PathEscape(job) + "/validation?rank=" + strconv.Itoa(rank)
	ctx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	a.auth(req)
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil, nil
	case http.StatusOK:
		var p Plan
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&p); err != nil {
			return nil, fmt.Errorf("validation plan: %w", err)
		}
		if p.ID == "" || p.DeadlineMS <= 0 {
			return nil, fmt.Errorf("validation plan: id and deadline_ms are required")
		}
		return &p, nil
	}
	return nil, fmt.Errorf("validation poll: %s", resp.Status)
}

func (a *Agent) postResult(ctx context.Context, job, planID string, r Result) error {
	body, _ := json.Marshal(r)
	u := a.cfg.Server + "/api/v1/jobs/" + url.PathEscape(job) + "/validation/" + url.PathEscape(planID) + "/results"
	ctx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	a.auth(req)
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("validation result: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// pollValidation asks the server, for every live rank on this node, for a
// pending plan, and handles each new one (Greyhound §4.3: trap, benchmark,
// release).
func (a *Agent) pollValidation(ctx context.Context) {
	for _, l := range a.col.Locals() {
		key := l.Job + "/" + strconv.Itoa(l.Rank)
		if until, ok := a.valQuiet[l.Job]; ok && time.Now().Before(until) {
			continue
		}
		p, err := a.fetchPlan(ctx, l.Job, l.Rank)
		if err != nil {
			// an old server or an unknown job: ask again later, quietly
			a.cfg.Log.Debug("validation poll failed", "job", l.Job, "rank", l.Rank, "err", err)
			a.valQuiet[l.Job] = time.Now().Add(30 * time.Second)
			continue
		}
		a.mu.Lock()
		skip := p == nil || a.handled[key] == p.ID || a.running[key]
		if !skip {
			a.handled[key] = p.ID
			a.running[key] = true
		}
		a.mu.Unlock()
		if skip {
			continue // a plan still running is asked for again later (R9)
		}
		// the plan runs beside draining and shipping: those must go on
		a.wg.Add(1)
		go func(job string, rank int, p Plan) {
			defer a.wg.Done()
			defer func() {
				a.mu.Lock()
				delete(a.running, key)
				a.mu.Unlock()
			}()
			a.runPlan(ctx, job, rank, p)
		}(l.Job, l.Rank, *p)
	}
}

// runPlan holds the rank in the trap for the plan, runs the executor and
// posts its result; the trap is cleared by the deadline at the latest
// (and the shim itself gives up at the same deadline).
func (a *Agent) runPlan(ctx context.Context, job string, rank int, p Plan) {
	deadline := planHold(p)
	var res Result
	n := 0
	if available(a.cfg.Executor) {
		// trap, run, release only the generation armed here: a later
		// plan's trap is never cleared by this one (R9)
		from := time.Now()
		armed := a.col.Arm(job, rank, deadline)
		n = armed.Rings()
		rctx, cancel := context.WithTimeout(ctx, deadline)
		res = a.cfg.Executor.Run(rctx, job, rank, p)
		if res.Error == "" && rctx.Err() != nil {
			res.Error = "validation budget or deadline passed"
		}
		cancel()
		a.col.Release(armed)
		// The pause the server masks out of its detector (the calls'
		// clock is the wall clock).
		res.PausedFromNS, res.PausedToNS = from.UnixNano(), max(time.Now().UnixNano(), from.UnixNano()+1)
	} else {
		// nothing would run: never hold training for it (R9)
		res = Result{Error: ErrNoExecutor.Error()}
	}
	res.Rank = rank
	outcome := "ok"
	if res.Error != "" {
		outcome = "error"
		if res.Error == ErrNoExecutor.Error() {
			a.cfg.Log.Warn("GPU validation executor not available; reporting the plan as not run", "job", job, "rank", rank, "plan", p.ID)
		}
	}
	a.metrics.validations.WithLabelValues(outcome).Inc()
	a.cfg.Log.Info("validation plan handled", "job", job, "rank", rank, "plan", p.ID, "trapped_rings", n, "error", res.Error)
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer pcancel()
	if err := a.postResult(pctx, job, p.ID, res); err != nil {
		a.cfg.Log.Warn("posting validation result failed", "job", job, "rank", rank, "plan", p.ID, "err", err)
	}
}
