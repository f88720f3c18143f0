package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/laggard-dev/laggard/internal/server"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/ui"
)

type serveOptions struct {
	addr       string
	dataDir    string
	queueDepth int
	maxBody    int64
}

func (o *serveOptions) register(fs *flag.FlagSet, defaultData string) {
	fs.StringVar(&o.addr, "addr", "127.0.0.1:7070", "listen address for the API, metrics and web UI")
	fs.StringVar(&o.dataDir, "data", defaultData, "directory of the embedded store (created if missing)")
	fs.IntVar(&o.queueDepth, "queue", 1024, "ingest queue depth in batches; a full queue answers 429")
	fs.Int64Var(&o.maxBody, "max-body", 64<<20, "largest accepted request body in bytes")
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "[flags]", stderr)
	var o serveOptions
	o.register(fs, "laggard-data")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	logJSON := fs.Bool("log-json", false, "log as JSON lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *level, *logJSON)
	if err != nil {
		return err
	}
	return serve(ctx, o, log, func(url string) {
		log.Info("laggard is serving", "ui", url+"/", "metrics", url+"/metrics", "data", o.dataDir)
	})
}

// serve opens the store, starts the server on o.addr and blocks until ctx
// is done, then shuts down gracefully. ready is called with the base URL
// once the listener is open.
func serve(ctx context.Context, o serveOptions, log *slog.Logger, ready func(url string)) error {
	st, err := store.Open(o.dataDir, store.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("opening store %s: %w", o.dataDir, err)
	}
	srv, err := server.New(server.Config{
		Addr: o.addr, DataDir: o.dataDir, QueueDepth: o.queueDepth, MaxBodyBytes: o.maxBody,
		Logger: log, UI: ui.Handler(),
	}, st)
	if err != nil {
		st.Close()
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
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
