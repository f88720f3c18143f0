package auth

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// File is a token Set loaded from a file and kept current: Reload (on
// SIGHUP) and Watch (on a change of the file) swap in the new tokens, and
// a bad file keeps the old ones. It is safe for concurrent use.
type File struct {
	path string
	log  *slog.Logger
	cur  atomic.Pointer[Set]

	mu   sync.Mutex // serialises reloads
	last os.FileInfo

	tokens  prometheus.Gauge
	reloads *prometheus.CounterVec
}

// Load reads the token file at path. log receives reload results (default
// slog.Default()).
func Load(path string, log *slog.Logger) (*File, error) {
	if log == nil {
		log = slog.Default()
	}
	f := &File{path: path, log: log.With("component", "auth", "tokens", path),
		tokens: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "laggard", Subsystem: "auth", Name: "tokens",
			Help: "Tokens in the loaded token file."}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "laggard", Subsystem: "auth", Name: "reloads_total",
			Help: "Token file reloads by result (ok, error); a failed reload keeps the previous tokens."}, []string{"result"}),
	}
	set, fi, err := f.read()
	if err != nil {
		return nil, err
	}
	f.install(set, fi)
	return f, nil
}

// Path is the token file's path.
func (f *File) Path() string { return f.path }

// Register adds the file's metrics (laggard_auth_tokens,
// laggard_auth_reloads_total) to reg.
func (f *File) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{f.tokens, f.reloads} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Lookup looks token up in the current set.
func (f *File) Lookup(token string) (*Principal, bool) { return f.cur.Load().Lookup(token) }

// Current returns the set in force.
func (f *File) Current() *Set { return f.cur.Load() }

func (f *File) read() (*Set, os.FileInfo, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, nil, fmt.Errorf("token file: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("token file: %w", err)
	}
	set, err := Parse(fh)
	if err != nil {
		return nil, nil, fmt.Errorf("token file %s: %w", f.path, err)
	}
	return set, fi, nil
}

func (f *File) install(set *Set, fi os.FileInfo) {
	f.cur.Store(set)
	f.last = fi
	f.tokens.Set(float64(set.Len()))
	if set.Len() == 0 {
		f.log.Warn("the token file has no tokens: every API request will be refused")
	}
	// A file others can read hands out every plain token in it.
	if set.Plain > 0 && fi.Mode().Perm()&0o044 != 0 {
		f.log.Warn("the token file holds plain tokens and is readable by group or others; store sha256: hashes (laggard token) or chmod 600",
			"plain", set.Plain, "mode", fi.Mode().Perm().String())
	}
}

// Reload rereads the file. On error the previous tokens stay in force
// and the error (naming the line) is logged and returned.
func (f *File) Reload() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	set, fi, err := f.read()
	if err == nil && set.Len() == 0 && f.cur.Load().Len() > 0 {
		// Most likely caught between an editor's truncate and write; an
		// empty set would lock every client out (and the Python client
		// stops shipping on 401). Revoke all tokens by removing lines,
		// keeping at least one (an admin's), or by restarting.
		err = fmt.Errorf("token file %s: no tokens; refusing to revoke every token on reload", f.path)
	}
	if err != nil {
		f.reloads.WithLabelValues("error").Inc()
		f.log.Error("token file reload failed; keeping the previous tokens", "err", err)
		return err
	}
	f.install(set, fi)
	f.reloads.WithLabelValues("ok").Inc()
	f.log.Info("token file reloaded", "tokens", set.Len())
	return nil
}

// changed reports whether the file differs from the one last loaded
// (another inode, as after an atomic rename, or another size or mtime).
// A file that cannot be stat'ed counts as changed so the reload logs why.
func (f *File) changed() bool {
	fi, err := os.Stat(f.path)
	if err != nil {
		return true
	}
	f.mu.Lock()
	last := f.last
	f.mu.Unlock()
	return !sameStat(fi, last)
}

func sameStat(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// Watch polls the file every interval until ctx is done and reloads it
// when it changed. A bad file is reported once, not every interval: it is
// reread only when it changes again.
func (f *File) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var bad os.FileInfo // the file as it was when a reload failed
	missing := false    // a reload failed because the file is gone
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !f.changed() {
			bad, missing = nil, false
			continue
		}
		fi, err := os.Stat(f.path)
		if (err != nil && missing) || (err == nil && bad != nil && sameStat(fi, bad)) {
			continue
		}
		bad, missing = nil, false
		if f.Reload() != nil {
			bad, missing = fi, err != nil
		}
	}
}
