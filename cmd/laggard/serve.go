package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/laggard-dev/laggard/internal/auth"
	"github.com/laggard-dev/laggard/internal/control"
	"github.com/laggard-dev/laggard/internal/detect"
	"github.com/laggard-dev/laggard/internal/notify"
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
	greyhound  greyhoundOptions
	kair       kairOptions
	incidents  incidentOptions
	sec        securityOptions // serve's own flags; demo leaves them zero
	life       storageOptions  // serve's own flags; demo leaves them zero
	notify     notifyOptions   // serve's own flags; demo leaves them zero
}

// notifyOptions are serve's incident notification flags (issue 17 item 4,
// docs/format/notify.md).
type notifyOptions struct {
	alertmanager string
	webhook      string
	secretFile   string
	externalURL  string
}

func (o *notifyOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.alertmanager, "alertmanager", "", "send every incident state change as an alert to this Alertmanager `URL` (http://am:9093; comma-separated for an HA set, each gets every alert); unresolved incidents are re-sent every minute")
	fs.StringVar(&o.webhook, "webhook", "", "POST every incident state change as JSON to this `URL` (docs/format/notify.md)")
	fs.StringVar(&o.secretFile, "webhook-secret-file", "", "sign -webhook deliveries with the secret in this `FILE` (X-Laggard-Signature: sha256=HMAC of timestamp.body; at least 16 bytes, e.g. openssl rand -hex 32)")
	fs.StringVar(&o.externalURL, "external-url", "", "the `URL` users reach this server at, for the incident links in alerts and webhooks (default: http(s):// and the listen address)")
}

// config returns the notifier's configuration (the secret read from its
// file); base is the listen address's URL, the external URL's default.
func (o *notifyOptions) config(base string) (notify.Config, error) {
	c := notify.Config{Webhook: o.webhook, ExternalURL: o.externalURL}
	for _, a := range strings.Split(o.alertmanager, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Alertmanagers = append(c.Alertmanagers, a)
		}
	}
	if !c.Enabled() {
		return notify.Config{}, nil
	}
	if c.ExternalURL == "" {
		c.ExternalURL = base
	}
	if o.secretFile != "" {
		var err error
		if c.WebhookSecret, err = notify.ReadSecretFile(o.secretFile); err != nil {
			return c, fmt.Errorf("-webhook-secret-file: %w", err)
		}
	}
	return c, nil
}

// validate checks the flags register defines.
func (o *notifyOptions) validate() error {
	var errs []error
	for _, a := range strings.Split(o.alertmanager, ",") {
		if a = strings.TrimSpace(a); a != "" {
			if _, err := notify.CheckURL(a); err != nil {
				errs = append(errs, fmt.Errorf("-alertmanager %w", err))
			}
		}
	}
	if o.webhook != "" {
		if _, err := notify.CheckURL(o.webhook); err != nil {
			errs = append(errs, fmt.Errorf("-webhook %w", err))
		}
	}
	if o.secretFile != "" && o.webhook == "" {
		errs = append(errs, errors.New("-webhook-secret-file needs -webhook"))
	}
	if o.externalURL != "" {
		if _, err := notify.CheckURL(o.externalURL); err != nil {
			errs = append(errs, fmt.Errorf("-external-url %w", err))
		}
	}
	return errors.Join(errs...)
}

// listenURL is the URL of a listen address: the machine's name for an
// unspecified host (0.0.0.0, ::), which no one can open.
func listenURL(scheme string, addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return scheme + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil && name != "" {
			host = name
		}
	}
	return scheme + net.JoinHostPort(host, port)
}

// storageOptions are serve's bounds on what is kept: retention, the disk
// reserve, the job count and the ingest queue's memory. Zero values take
// the store's and server's defaults.
type storageOptions struct {
	retentionAge    time.Duration
	retentionSize   byteSize
	compactInterval time.Duration
	minFree         byteSize
	maxJobs         int
	queueBytes      byteSize
}

func (o *storageOptions) register(fs *flag.FlagSet) {
	fs.DurationVar(&o.retentionAge, "retention-age", 0, "delete jobs with no ingest for this long, e.g. 720h (default 0: keep forever)")
	fs.Var(&o.retentionSize, "retention-size", "delete the least recently written jobs while the store is larger than this, e.g. 50GiB (default 0: no limit; jobs written in the last 10 minutes are kept)")
	fs.DurationVar(&o.compactInterval, "compact-interval", time.Minute, "how often retention runs and deleted jobs' space is compacted away")
	fs.Var(&o.minFree, "min-free", "free disk space to keep on the store's filesystem; below it ingest answers 507 and reads go on (default 0: max(256MiB, 4 memtables); -1: off)")
	fs.IntVar(&o.maxJobs, "max-jobs", 100_000, "most registered jobs; a new job beyond it answers 507, 1..10000000")
	fs.Var(&o.queueBytes, "queue-bytes", "memory the ingest queue may hold in decoded batches, e.g. 256MiB; a full queue answers 429 (default 0: 64MiB)")
}

func (o *storageOptions) validate() error {
	var errs []error
	if o.retentionAge < 0 || (o.retentionAge > 0 && o.retentionAge < time.Minute) {
		errs = append(errs, fmt.Errorf("-retention-age %s: want 0 (keep forever) or at least 1m", o.retentionAge))
	}
	if o.retentionSize < 0 {
		errs = append(errs, fmt.Errorf("-retention-size %d: must be >= 0", o.retentionSize))
	}
	if o.compactInterval < time.Second {
		errs = append(errs, fmt.Errorf("-compact-interval %s: must be at least 1s", o.compactInterval))
	}
	if o.minFree < -1 {
		errs = append(errs, fmt.Errorf("-min-free %d: want -1 (off), 0 (default) or a size", o.minFree))
	}
	if o.queueBytes < 0 || (o.queueBytes > 0 && o.queueBytes < 1<<20) {
		errs = append(errs, fmt.Errorf("-queue-bytes %d: want 0 (default) or at least 1MiB", o.queueBytes))
	}
	return errors.Join(append(errs, checkRange("max-jobs", o.maxJobs, 1, 10_000_000))...)
}

// securityOptions are serve's access and connection flags
// (docs/security.md). The zero value is the loopback default: no tokens,
// server defaults for the limits.
type securityOptions struct {
	tokens         string
	insecure       bool
	metricsAuth    string
	healthzAuth    string
	allowedHosts   string
	tlsCert        string
	tlsKey         string
	readHeader     time.Duration
	bodyTimeout    time.Duration
	writeTimeout   time.Duration
	idleTimeout    time.Duration
	minRate        int64
	maxConns       int
	maxHeaderBytes int
}

func (o *securityOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.tokens, "tokens", "", "`FILE` of bearer tokens, one \"TOKEN SCOPES [NAME]\" per line, scopes read, admin, ingest[:JOB|:PREFIX*] (docs/security.md; laggard token makes lines); reloaded on SIGHUP and when it changes. Without it the server is open and may listen only on loopback")
	fs.BoolVar(&o.insecure, "insecure", false, "allow listening on a non-loopback address without -tokens: anyone who reaches the port can read, overwrite and delete every job")
	fs.StringVar(&o.metricsAuth, "metrics-auth", "read", "what /metrics needs when -tokens is set: read or none")
	fs.StringVar(&o.healthzAuth, "healthz-auth", "none", "what /healthz needs when -tokens is set: none or read")
	fs.StringVar(&o.allowedHosts, "allowed-hosts", "", "comma-separated Host header `NAMES` served, * for any (default: any with -tokens; else localhost, IP addresses and this machine's name)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate chain `FILE` (with -tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the PEM private key `FILE` of -tls-cert")
	fs.DurationVar(&o.readHeader, "read-header-timeout", 10*time.Second, "time to read a request's headers")
	fs.DurationVar(&o.bodyTimeout, "body-timeout", 30*time.Second, "time to read a request body, plus 1s per -min-rate bytes")
	fs.DurationVar(&o.writeTimeout, "write-timeout", 2*time.Minute, "time to compute and write a response, plus 1s per -min-rate bytes")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 2*time.Minute, "close keep-alive connections idle this long")
	fs.Int64Var(&o.minRate, "min-rate", 64<<10, "slowest upload or download in bytes/s that keeps extending -body-timeout and -write-timeout")
	fs.IntVar(&o.maxConns, "max-conns", 4096, "most open connections (each training rank keeps one); more wait to be accepted")
	fs.IntVar(&o.maxHeaderBytes, "max-header-bytes", 64<<10, "largest request header block in bytes")
}

// validate checks the flags register defines.
func (o *securityOptions) validate() error {
	var errs []error
	if (o.tlsCert == "") != (o.tlsKey == "") {
		errs = append(errs, errors.New("-tls-cert and -tls-key go together"))
	}
	if o.metricsAuth != "read" && o.metricsAuth != "none" {
		errs = append(errs, fmt.Errorf("-metrics-auth must be read or none, got %q", o.metricsAuth))
	}
	if o.healthzAuth != "read" && o.healthzAuth != "none" {
		errs = append(errs, fmt.Errorf("-healthz-auth must be none or read, got %q", o.healthzAuth))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read-header-timeout", o.readHeader}, {"body-timeout", o.bodyTimeout}, {"write-timeout", o.writeTimeout}, {"idle-timeout", o.idleTimeout}} {
		errs = append(errs, checkRange(d.name, d.v, time.Second, 24*time.Hour))
	}
	return errors.Join(append(errs,
		checkRange("min-rate", o.minRate, 1, 1<<40),
		checkRange("max-conns", o.maxConns, 1, 1<<20),
		checkRange("max-header-bytes", o.maxHeaderBytes, 4<<10, 64<<20),
	)...)
}

// hosts splits -allowed-hosts.
func (o *securityOptions) hosts() []string {
	var out []string
	for _, h := range strings.Split(o.allowedHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// exposedError explains the refusal to serve a non-loopback address
// without tokens.
func exposedError(addr net.Addr) error {
	return fmt.Errorf("refusing to listen on %s without authentication: anyone who can reach it could read, overwrite and delete every job.\n"+
		"  Give -tokens FILE (see docs/security.md; laggard token makes one), listen on loopback (-addr 127.0.0.1:7070),\n"+
		"  or pass -insecure to serve it open anyway (a trusted network only)", addr)
}

// tokenPoll is how often the token file is checked for changes.
var tokenPoll = 2 * time.Second

func (o *serveOptions) register(fs *flag.FlagSet, defaultData string) {
	fs.StringVar(&o.addr, "addr", defaultAddr, "listen address for the API, metrics and web UI (127.0.0.1:0 picks a free port)")
	fs.StringVar(&o.dataDir, "data", defaultData, "directory of the embedded store (created if missing)")
	fs.IntVar(&o.queueDepth, "queue", 1024, "ingest queue depth in batches, 1..1048576; a full queue answers 429")
	fs.Int64Var(&o.maxBody, "max-body", 64<<20, "largest accepted request body in bytes, 1024..4294967296")
	fs.DurationVar(&o.greyhound.interval, "greyhound-interval", 2*time.Second, "how often the Greyhound controller evaluates each job with collective calls (0: off; the report and validation routes still serve)")
	fs.DurationVar(&o.greyhound.margin, "greyhound-margin", 3*time.Second, "how far ahead of the ranks a validation plan's at_step is scheduled")
	fs.DurationVar(&o.kair.cooldown, "kair-cooldown", 10*time.Minute, "no second KAIR capture asked for a job by its incidents within this, 1s..168h")
	fs.IntVar(&o.kair.steps, "kair-steps", 5, "sampled training steps a KAIR capture records unless the request says otherwise, 1..64")
	fs.BoolVar(&o.incidents.on, "incidents", true, "the incident layer: one incident per slowdown fusing every engine's evidence, and the escalation that asks the engines for what it lacks (a Greyhound validation, a KAIR capture, a SysOM profile window); false: the engines still run, nothing is asked automatically")
	fs.DurationVar(&o.incidents.detectInterval, "detect-interval", 30*time.Second, "how often the background StageFrontier evaluation runs over every active job (0: off); a job with a suspected onset or an open incident is re-evaluated every 5s (or this, if shorter) while its data advances")
}

// kairOptions configure KAIR's triggered capture; zero values take the
// defaults (10m, 5 steps).
type kairOptions struct {
	cooldown time.Duration
	steps    int
}

func (o kairOptions) config() control.KairConfig {
	return control.KairConfig{Steps: o.steps}
}

func (o kairOptions) validate() error {
	var errs []error
	if o.cooldown != 0 {
		errs = append(errs, checkRange("kair-cooldown", o.cooldown, time.Second, 168*time.Hour))
	}
	if o.steps != 0 {
		errs = append(errs, checkRange("kair-steps", o.steps, 1, 64))
	}
	return errors.Join(errs...)
}

// incidentOptions switch the incident layer and schedule the evaluation
// that feeds it.
type incidentOptions struct {
	on             bool
	detectInterval time.Duration
}

// config is the server's incident and detection configuration;
// kairCooldown is the escalation's capture cool-down.
func (o incidentOptions) config(kairCooldown time.Duration) (control.IncidentsConfig, detect.Config) {
	var ic control.IncidentsConfig
	ic.Escalation.CaptureCooldown = kairCooldown
	dc := detect.Config{Interval: o.detectInterval}
	if o.detectInterval == 0 {
		dc.Interval = -1
	}
	return ic, dc
}

func (o incidentOptions) validate() error {
	if o.detectInterval != 0 {
		return checkRange("detect-interval", o.detectInterval, time.Second, time.Hour)
	}
	return nil
}

// greyhoundOptions schedule the Greyhound-Detect controller.
type greyhoundOptions struct{ interval, margin time.Duration }

func (o greyhoundOptions) config() control.GreyhoundConfig {
	c := control.GreyhoundConfig{Interval: o.interval, Margin: o.margin}
	if o.interval == 0 {
		c.Interval = -1
	}
	return c
}

// validate checks the flags register defines.
func (o *serveOptions) validate() error {
	if o.addr == "" {
		return errors.New("-addr must not be empty (127.0.0.1:0 picks a free port)")
	}
	if o.greyhound.interval != 0 {
		if err := checkRange("greyhound-interval", o.greyhound.interval, 100*time.Millisecond, time.Hour); err != nil {
			return err
		}
	}
	return errors.Join(
		o.kair.validate(),
		o.incidents.validate(),
		checkRange("greyhound-margin", o.greyhound.margin, 0, time.Hour),
		checkRange("queue", o.queueDepth, 1, 1<<20),
		checkRange("max-body", o.maxBody, 1<<10, 1<<32),
	)
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "[flags] [DATA_DIR]  (default data directory: ./laggard-data)", stderr)
	var o serveOptions
	o.register(fs, "laggard-data")
	o.sec.register(fs)
	o.life.register(fs)
	o.notify.register(fs)
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
	if err := errors.Join(o.validate(), o.sec.validate(), o.life.validate(), o.notify.validate()); err != nil {
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
	if o.sec.tokens == "" && !o.sec.insecure && !server.IsLoopback(ln.Addr()) {
		ln.Close()
		return exposedError(ln.Addr())
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
	access, httpOpts, tokens, err := o.sec.load(log)
	if err != nil {
		ln.Close()
		return err
	}
	incCfg, detCfg := o.incidents.config(o.kair.cooldown)
	scheme := "http://"
	if httpOpts.TLS != nil {
		scheme = "https://"
	}
	notifyCfg, err := o.notify.config(listenURL(scheme, ln.Addr()))
	if err != nil {
		ln.Close()
		return err
	}
	st, err := store.Open(o.dataDir, store.Options{Logger: log, MinFreeBytes: int64(o.life.minFree), MaxJobs: o.life.maxJobs})
	if err != nil {
		ln.Close()
		return fmt.Errorf("opening store %s: %w", o.dataDir, err)
	}
	srv, err := server.New(server.Config{
		Addr: ln.Addr().String(), DataDir: absPath(o.dataDir), QueueDepth: o.queueDepth, MaxBodyBytes: o.maxBody,
		Greyhound: o.greyhound.config(), Kair: o.kair.config(), Incidents: incCfg, IncidentsOff: !o.incidents.on, Detect: detCfg,
		QueueBytes: int64(o.life.queueBytes), Logger: log, UI: ui.Handler(), Access: access, HTTP: httpOpts,
		Lifecycle: server.LifecycleConfig{RetentionAge: o.life.retentionAge, RetentionSize: int64(o.life.retentionSize),
			Interval: o.life.compactInterval},
		Notify: notifyCfg,
	}, st)
	if err == nil && tokens != nil {
		if err = tokens.Register(srv.Registry()); err != nil {
			srv.Close() // stop its writers before the store closes
		}
	}
	if err != nil {
		ln.Close()
		st.Close()
		return err
	}
	if tokens != nil {
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		go watchTokens(wctx, tokens)
	}
	ready(scheme + ln.Addr().String())
	serr := srv.Serve(ctx, ln)
	if cerr := st.Close(); serr == nil {
		serr = cerr
	}
	return serr
}

// load reads the token file and TLS key pair the flags name and returns
// the server's configuration.
func (o *securityOptions) load(log *slog.Logger) (server.Access, server.HTTPOptions, *auth.File, error) {
	a := server.Access{Insecure: o.insecure, MetricsPublic: o.metricsAuth == "none", HealthzPrivate: o.healthzAuth == "read",
		AllowedHosts: o.hosts()}
	h := server.HTTPOptions{ReadHeaderTimeout: o.readHeader, BodyTimeout: o.bodyTimeout, WriteTimeout: o.writeTimeout,
		IdleTimeout: o.idleTimeout, MinRate: o.minRate, MaxConns: o.maxConns, MaxHeaderBytes: o.maxHeaderBytes}
	var tokens *auth.File
	if o.tokens != "" {
		var err error
		if tokens, err = auth.Load(o.tokens, log); err != nil {
			return a, h, nil, err
		}
		a.Tokens = tokens
		log.Info("authentication on", "tokens", tokens.Current().Len(), "file", absPath(o.tokens))
	}
	if o.tlsCert != "" {
		var err error
		if h.TLS, err = server.LoadTLS(o.tlsCert, o.tlsKey); err != nil {
			return a, h, nil, err
		}
	}
	return a, h, tokens, nil
}

// watchTokens reloads the token file on SIGHUP and when it changes, until
// ctx is done.
func watchTokens(ctx context.Context, f *auth.File) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go f.Watch(ctx, tokenPoll)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = f.Reload() // a bad file is logged and the old tokens kept
		}
	}
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

func sameDir(a, b string) bool { return absPath(a) == absPath(b) }
