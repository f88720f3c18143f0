package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"syscall"

	"github.com/laggard-dev/laggard/internal/server"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/ui"
)

// defaultAddr is the -addr default; a variable so tests can occupy it.
var defaultAddr = "127.0.0.1:7070"

type serveOptions struct {
	addr       string
	dataDir    string
	queueDepth int
	maxBody    int64
}

func (o *serveOptions) register(fs *flag.FlagSet, defaultData string) {
	fs.StringVar(&o.addr, "addr", defaultAddr, "listen address for the API, metrics and web UI (127.0.0.1:0 picks a free port)")
	fs.StringVar(&o.dataDir, "data", defaultData, "directory of the embedded store (created if missing)")
	fs.IntVar(&o.queueDepth, "queue", 1024, "ingest queue depth in batches, 1..1048576; a full queue answers 429")
	fs.Int64Var(&o.maxBody, "max-body", 64<<20, "largest accepted request body in bytes, 1024..4294967296")
}

// validate checks the flags register defines.
func (o *serveOptions) validate() error {
	if o.addr == "" {
		return errors.New("-addr must not be empty (127.0.0.1:0 picks a free port)")
	}
	return errors.Join(
		checkRange("queue", o.queueDepth, 1, 1<<20),
		checkRange("max-body", o.maxBody, 1<<10, 1<<32),
	)
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "[flags] [DATA_DIR]  (default data directory: ./laggard-data)", stderr)
	var o serveOptions
	o.register(fs, "laggard-data")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	logJSON := fs.Bool("log-json", false, "log as JSON lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return errUsage
	}
	if fs.NArg() == 1 {
		dir := fs.Arg(0)
		if flagWasSet(fs, "data") && !sameDir(dir, o.dataDir) {
			return fmt.Errorf("two data directories: -data %s and argument %s; give one", o.dataDir, dir)
		}
		o.dataDir = dir
	}
	if o.dataDir == "" {
		return errors.New("the data directory must not be empty")
	}
	if err := o.validate(); err != nil {
		return err
	}
	log, err := newLogger(stderr, *level, *logJSON)
	if err != nil {
		return err
	}
	ln, err := listen(o.addr)
	if err != nil {
		return err
	}
	data := absPath(o.dataDir)
	return serve(ctx, o, ln, log, func(url string) {
		log.Info("laggard is serving", "ui", url+"/", "metrics", url+"/metrics", "data", data)
	})
}

// listen opens addr, explaining the usual failure.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, listenError(addr, err)
	}
	return ln, nil
}

func listenError(addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("cannot listen on -addr %s: address already in use (is another laggard running? use -addr 127.0.0.1:0 for any free port)", addr)
	}
	return fmt.Errorf("cannot listen on -addr %s: %w", addr, err)
}

// serve opens the store, serves on ln (which it takes over and closes)
// and blocks until ctx is done, then shuts down gracefully. ready is
// called with the base URL before serving starts. The caller opens ln so
// that the address it reports is the one served, with no window for
// another process to take it.
func serve(ctx context.Context, o serveOptions, ln net.Listener, log *slog.Logger, ready func(url string)) error {
	st, err := store.Open(o.dataDir, store.Options{Logger: log})
	if err != nil {
		ln.Close()
		return fmt.Errorf("opening store %s: %w", o.dataDir, err)
	}
	srv, err := server.New(server.Config{
		Addr: ln.Addr().String(), DataDir: absPath(o.dataDir), QueueDepth: o.queueDepth, MaxBodyBytes: o.maxBody,
		Logger: log, UI: ui.Handler(),
	}, st)
	if err != nil {
		ln.Close()
		st.Close()
		return err
	}
	ready("http://" + ln.Addr().String())
	serr := srv.Serve(ctx, ln)
	if cerr := st.Close(); serr == nil {
		serr = cerr
	}
	return serr
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

func sameDir(a, b string) bool { return absPath(a) == absPath(b) }
