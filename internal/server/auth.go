package server

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/auth"
	"github.com/laggard-dev/laggard/internal/signal"
)

// Access configures who may call the server (docs/security.md).
type Access struct {
	// Tokens verifies bearer tokens. Nil serves without authentication,
	// which Serve allows only on a loopback address unless Insecure.
	Tokens auth.Verifier
	// Insecure allows serving a non-loopback address without Tokens.
	Insecure bool
	// MetricsPublic serves /metrics without a token (default: read scope).
	MetricsPublic bool
	// HealthzPrivate requires the read scope for /healthz (default public:
	// load balancers probe it without credentials).
	HealthzPrivate bool
	// AllowedHosts are the Host header names served (ports ignored); "*"
	// allows any. Empty: see hostPolicy.
	AllowedHosts []string
}

// access is what a route needs from the caller.
type access uint8

const (
	// public needs nothing (the UI's static files).
	public access = iota
	// anyToken needs a valid token of any scope: unknown API paths, so a
	// stranger learns nothing, and a token holder gets the API's 404/405.
	anyToken
	needRead
	// needIngestJob needs ingest for the route's {id}.
	needIngestJob
	needAdmin
	// needIngestAny needs an ingest scope for any job: symbol uploads are
	// keyed by Build-ID, verified against the ELF and shared by every job
	// (SysOM-AI §3.4), so any agent's token may send them.
	needIngestAny
)

// routeAccess is what each route pattern needs. A route added to the mux
// must be listed here (or registered with Server.handle); a pattern missing
// from both needs admin, so a forgotten route fails closed.
var routeAccess = map[string]access{
	"GET /api/v1/jobs":                                needRead,
	"GET /api/v1/jobs/{id}":                           needRead,
	"PUT /api/v1/jobs/{id}":                           needIngestJob,
	"POST /api/v1/jobs/{id}/ranks":                    needIngestJob,
	"POST /api/v1/jobs/{id}/vectors":                  needIngestJob,
	"POST /api/v1/jobs/{id}/collectives":              needIngestJob,
	"GET /api/v1/jobs/{id}/collectives":               needRead,
	"GET /api/v1/jobs/{id}/comms":                     needRead,
	"GET /api/v1/jobs/{id}/report":                    needRead,
	"GET /api/v1/jobs/{id}/export":                    needRead,
	"GET /api/v1/vocabulary":                          needRead,
	"GET /api/v1/jobs/{id}/greyhound":                 needRead,
	"GET /api/v1/jobs/{id}/sysom":                     needRead,
	"GET /api/v1/jobs/{id}/flamegraph":                needRead,
	"GET /api/v1/jobs/{id}/flamegraph/diff":           needRead,
	"GET /api/v1/jobs/{id}/profile":                   needRead,
	"GET /api/v1/jobs/{id}/osstats":                   needRead,
	"POST /api/v1/jobs/{id}/greyhound/validate":       needIngestJob, // admin implies it
	"POST /api/v1/jobs/{id}/stacks":                   needIngestJob,
	"POST /api/v1/jobs/{id}/osstats":                  needIngestJob,
	"POST /api/v1/jobs/{id}/profiles":                 needIngestJob,
	"HEAD /api/v1/symbols/{buildid}":                  needIngestAny,
	"POST /api/v1/symbols/{buildid}":                  needIngestAny,
	"DELETE /api/v1/symbols/{buildid}":                needAdmin,
	"GET /api/v1/jobs/{id}/validation":                needIngestJob,
	"POST /api/v1/jobs/{id}/validation/{vid}/results": needIngestJob,
	"DELETE /api/v1/jobs/{id}":                        needAdmin,
	// KAIR (issue 9): reads need read; asking for or cancelling a capture
	// is like greyhound/validate; the poll and the trace upload are the
	// job's client.
	"GET /api/v1/jobs/{id}/captures":               needRead,
	"GET /api/v1/jobs/{id}/captures/{cid}":         needRead,
	"GET /api/v1/jobs/{id}/kair":                   needRead,
	"GET /api/v1/jobs/{id}/kair/timeline":          needRead,
	"POST /api/v1/jobs/{id}/captures":              needIngestJob, // admin implies it
	"DELETE /api/v1/jobs/{id}/captures/{cid}":      needIngestJob,
	"GET /api/v1/jobs/{id}/captures/pending":       needIngestJob,
	"POST /api/v1/jobs/{id}/captures/{cid}/traces": needIngestJob,
	// Incidents and the fleet view (issue 17) are reads like the job
	// reports: a job's ingest token does not read them.
	"GET /api/v1/incidents":      needRead,
	"GET /api/v1/incidents/{id}": needRead,
	"GET /api/v1/hosts":          needRead,

	"/api/":        anyToken,
	"/":            public,
	"":             anyToken, // the mux's own 404/405/redirects
	"GET /metrics": needRead, // MetricsPublic makes it public
	"GET /healthz": public,   // HealthzPrivate makes it needRead
}

// handle registers h on mux at pattern with what it needs: the way for a
// route outside api.Register to declare its scope.
func (s *Server) handle(mux *http.ServeMux, pattern string, a access, h http.Handler) {
	s.routes[pattern] = a
	mux.Handle(pattern, h)
}

// authMetrics counts refused requests.
type authMetrics struct {
	failures *prometheus.CounterVec
}

func newAuthMetrics(reg prometheus.Registerer) (*authMetrics, error) {
	c, err := newReasonCounter(reg, "http", "auth_failures_total",
		"Requests refused by authentication (missing, malformed, unknown token: 401) or authorization (scope: 403).",
		"missing", "malformed", "unknown", "scope")
	return &authMetrics{failures: c}, err
}

// routeNeed returns what r needs, given the pattern the mux matched.
func (s *Server) routeNeed(pattern string, r *http.Request) (access, auth.Need) {
	a, ok := s.routes[pattern]
	if !ok {
		a = needAdmin
	}
	switch {
	case pattern == "GET /metrics" && s.cfg.Access.MetricsPublic:
		a = public
	case pattern == "GET /healthz" && s.cfg.Access.HealthzPrivate:
		a = needRead
	}
	switch a {
	case needRead:
		return a, auth.Need{Kind: auth.Read}
	case needIngestJob:
		return a, auth.Need{Kind: auth.Ingest, Job: pathValue(pattern, r, "id")}
	case needIngestAny:
		return a, auth.Need{Kind: auth.Ingest}
	case needAdmin:
		return a, auth.Need{Kind: auth.Admin}
	}
	return a, auth.Need{}
}

// pathValue extracts wildcard {name} of pattern from r's path the way the
// mux does (one escaped segment, unescaped). The guard runs before the mux
// dispatches, when r.PathValue is not yet set.
func pathValue(pattern string, r *http.Request, name string) string {
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		pattern = pattern[i+1:]
	}
	want := "{" + name + "}"
	segs := strings.Split(strings.TrimPrefix(pattern, "/"), "/")
	path := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	for i, seg := range segs {
		if seg == want && i < len(path) {
			v, err := url.PathUnescape(path[i])
			if err != nil {
				return path[i]
			}
			return v
		}
	}
	return ""
}

// bearer returns the token of an "Authorization: Bearer" header; ok is
// false when the header is present but not a bearer token.
func bearer(r *http.Request) (token string, present, ok bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false, false
	}
	scheme, tok, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", true, false
	}
	tok = strings.TrimSpace(tok)
	return tok, true, tok != ""
}

// authorize checks r's token against what its route needs and answers
// 401 or 403 itself when it falls short; it reports whether to go on.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, pattern string) bool {
	tokens := s.cfg.Access.Tokens
	if tokens == nil {
		return true
	}
	a, need := s.routeNeed(pattern, r)
	if a == public {
		return true
	}
	tok, present, ok := bearer(r)
	var p *auth.Principal
	if ok {
		p, ok = tokens.Lookup(tok)
	}
	if !ok {
		reason, msg := "unknown", "invalid bearer token"
		challenge := `Bearer realm="laggard", error="invalid_token"`
		switch {
		case !present:
			reason, msg, challenge = "missing", "authentication required: send Authorization: Bearer <token>", `Bearer realm="laggard"`
		case tok == "":
			reason, msg = "malformed", "the Authorization header is not \"Bearer <token>\""
		}
		s.am.failures.WithLabelValues(reason).Inc()
		w.Header().Set("WWW-Authenticate", challenge)
		s.refuse(w, r, http.StatusUnauthorized, msg, "reason", reason)
		return false
	}
	if a == anyToken || p.Allows(need) || (a == needIngestAny && hasIngest(p)) {
		return true
	}
	s.am.failures.WithLabelValues("scope").Inc()
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="laggard", error="insufficient_scope", scope=%q`, need.String()))
	s.refuse(w, r, http.StatusForbidden, fmt.Sprintf("token %q lacks %s (it has %s)", signal.Clip(p.Name), need.Describe(), p.ScopeList()),
		"reason", "scope", "token", p.Name)
	return false
}

// refuse writes an API-style JSON error and logs it at debug.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, msg string, kv ...any) {
	if s.log.Enabled(r.Context(), slog.LevelDebug) {
		s.log.Debug("request refused", append([]any{"method", r.Method, "path", r.URL.Path, "status", status,
			"remote", r.RemoteAddr, "err", msg}, kv...)...)
	}
	writeError(w, status, msg)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: msg}) // a failed write means the client left
}

// hasIngest reports whether p may ingest for some job (needIngestAny).
func hasIngest(p *auth.Principal) bool {
	for _, sc := range p.Scopes {
		if sc.Kind == auth.Ingest || sc.Kind == auth.Admin {
			return true
		}
	}
	return false
}
