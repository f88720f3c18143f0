package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/laggard-dev/laggard/internal/agent"
	"github.com/laggard-dev/laggard/internal/agent/cpuprof"
	"github.com/laggard-dev/laggard/internal/agent/osstat"
	"github.com/laggard-dev/laggard/internal/agent/register"
)

// runAgent is the node agent: one per node beside the trainers, it drains
// the NCCL shim's rings (native/ncclshim) and ships the calls; it stops
// on ctx cancel after a last drain and ship.
func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agent", "-server URL [flags]", stderr)
	server := fs.String("server", "", "laggard server base URL (required), e.g. http://laggard:7070")
	tokenFile := fs.String("token-file", "", "file holding the ingest bearer token (default: $LAGGARD_TOKEN)")
	shmDir := fs.String("shm-dir", "/dev/shm", "directory of the shim's rings (the trainers' $LAGGARD_SHM_DIR)")
	job := fs.String("job", "", "job id for rings whose trainer set neither LAGGARD_JOB nor TORCHELASTIC_RUN_ID")
	interval := fs.Duration("interval", time.Second, "drain and ship period")
	metricsAddr := fs.String("metrics-addr", "", "serve the agent's Prometheus metrics on this address (default off)")
	maxQueue := fs.Int("max-queue", 200_000, "calls held while the server is unreachable; the oldest beyond are dropped and counted")
	ringUIDs := fs.String("ring-uids", "", "comma-separated uids whose ring files are trusted besides the producer's own and the agent's (set when trainers run as another uid in another PID namespace)")
	socket := fs.String("socket", envOr(register.EnvVar, register.DefaultPath), "registration socket for training processes (their $"+register.EnvVar+"); \"\" disables it")
	noProfile := fs.Bool("no-profile", false, "do not sample CPU stacks (SysOM-AI eBPF profiler)")
	profileHz := fs.Int("profile-hz", 99, "CPU stack sampling frequency in Hz (10..999)")
	profileRatio := fs.Float64("profile-ratio", 0.1, "fraction of timer ticks that collect a stack, (0, 1]")
	profileAll := fs.Bool("profile-all", false, "keep every process's stacks, not only registered ranks' (shipped to -job as rank -1; an admin's choice: every process's names and stacks reach that job)")
	showOthers := fs.Bool("show-other-processes", false, "show other processes on a rank's CPUs to the rank's job with their names and stacks even when the job's registering user could not read them (default: one anonymous \"[other process] (hidden)\" frame with their share of the core; docs/security.md)")
	noOSStat := fs.Bool("no-osstat", false, "do not collect OS counters (interrupts, softirqs, run-queue latency, NUMA, GPU)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	logJSON := fs.Bool("log-json", false, "log as JSON lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	if *server == "" {
		fmt.Fprintln(stderr, "laggard agent: -server is required")
		fs.Usage()
		return errUsage
	}
	if u, err := url.Parse(*server); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-server must be an http(s) URL, got %q", *server)
	}
	if err := checkRange("interval", *interval, 10*time.Millisecond, time.Hour); err != nil {
		return err
	}
	if err := checkRange("max-queue", *maxQueue, 1, 100_000_000); err != nil {
		return err
	}
	if err := checkRange("profile-hz", *profileHz, 10, 999); err != nil {
		return err
	}
	if !(*profileRatio > 0 && *profileRatio <= 1) {
		return fmt.Errorf("-profile-ratio must be in (0, 1], got %v", *profileRatio)
	}
	if *profileAll && *job == "" {
		return errors.New("-profile-all needs -job: unregistered processes' stacks are shipped to that job")
	}
	var uids []uint32
	for _, f := range strings.Split(*ringUIDs, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return fmt.Errorf("-ring-uids: %q is not a uid", f)
		}
		uids = append(uids, uint32(v))
	}
	log, err := newLogger(stderr, *level, *logJSON)
	if err != nil {
		return err
	}
	token := os.Getenv("LAGGARD_TOKEN")
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("-token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return fmt.Errorf("-token-file: %s is empty", *tokenFile)
		}
	}
	if fi, err := os.Stat(*shmDir); err != nil || !fi.IsDir() {
		// not fatal: the directory may appear (a tmpfs mounted later)
		log.Warn("ring directory not found; will keep looking", "shm_dir", *shmDir)
	}
	m := agent.NewMetrics()
	a, err := agent.New(agent.Config{Server: *server, Token: token, ShmDir: *shmDir, DefaultJob: *job,
		Interval: *interval, MaxQueue: *maxQueue, TrustedUIDs: uids, Log: log, Metrics: m,
		Socket: *socket, ProfileOn: !*noProfile, OSOn: !*noOSStat, ShowOtherProcesses: *showOthers,
		Profile: cpuprof.Config{Hz: *profileHz, Ratio: *profileRatio, AllProcesses: *profileAll},
		OS:      osstat.Config{SchedTracepoints: true}})
	if err != nil {
		return err
	}
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("-metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "err", err)
			}
		}()
		defer hs.Close()
		fmt.Fprintf(stdout, "laggard agent: metrics on http://%s/metrics\n", ln.Addr())
	}
	return a.Run(ctx)
}
