package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// HTTPOptions bound what one connection may cost and configure TLS. Zero
// fields take the defaults in setDefaults.
type HTTPOptions struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout time.Duration
	// BodyTimeout is the time to read a request body, plus one second per
	// MinRate bytes read (default 30s): a 64 MiB batch at 64 KiB/s has
	// 17 minutes, a body trickled at 1 byte/s is cut after 30s.
	BodyTimeout time.Duration
	// WriteTimeout is the time to compute and write a response, plus one
	// second per MinRate bytes written (default 2m: reports take seconds,
	// exports stream as long as the client reads).
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long (default 2m).
	IdleTimeout time.Duration
	// MinRate is the slowest body upload or response download, in bytes
	// per second, that keeps extending the deadlines (default 64 KiB/s).
	MinRate int64
	// MaxConns bounds open connections (default 4096); further ones wait
	// in the kernel's accept queue. Each client process (training rank)
	// keeps one, so size it above the ranks of all jobs sending at once.
	MaxConns int
	// MaxHeaderBytes bounds a request's headers (default 64 KiB).
	MaxHeaderBytes int
	// TLS, if set, serves HTTPS with this configuration (certificates
	// included).
	TLS *tls.Config
}

func (o *HTTPOptions) setDefaults() {
	setDefault(&o.ReadHeaderTimeout, 10*time.Second)
	setDefault(&o.BodyTimeout, 30*time.Second)
	setDefault(&o.WriteTimeout, 2*time.Minute)
	setDefault(&o.IdleTimeout, 2*time.Minute)
	setDefault(&o.MinRate, 64<<10)
	setDefault(&o.MaxConns, 4096)
	setDefault(&o.MaxHeaderBytes, 64<<10)
}

// LoadTLS returns a TLS configuration serving the certificate chain in
// certFile with its key in keyFile (PEM), TLS 1.2 or later.
func LoadTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}

// IsLoopback reports whether addr is a loopback address (127.0.0.0/8,
// ::1): reachable only from this machine.
func IsLoopback(addr net.Addr) bool {
	if a, ok := addr.(*net.TCPAddr); ok {
		return a.IP.IsLoopback()
	}
	return false
}

// ErrExposed is returned by Serve for a non-loopback address without
// tokens when Access.Insecure is not set.
var ErrExposed = errors.New("refusing to serve a non-loopback address without authentication")

// httpServer returns the http.Server for ln and the listener to serve,
// limited to MaxConns connections. With HTTP.TLS the caller serves it
// with ServeTLS.
func (s *Server) httpServer(ln net.Listener) (*http.Server, net.Listener) {
	o := s.cfg.HTTP
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		// ReadTimeout and WriteTimeout stay 0: guard's deadlines bound
		// bodies and responses by size (see Server.deadlines).
		IdleTimeout:    o.IdleTimeout,
		MaxHeaderBytes: o.MaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	if o.TLS != nil {
		hs.TLSConfig = o.TLS.Clone()
	}
	// Below TLS, so a handshake in progress holds a slot too.
	return hs, netutil.LimitListener(ln, o.MaxConns)
}
