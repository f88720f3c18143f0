package notify

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/laggard-dev/laggard/internal/incident"
)

// Webhook headers (docs/format/notify.md).
const (
	// HeaderSignature is "sha256=" and the hex HMAC-SHA256, keyed by the
	// shared secret, of the timestamp header's value, ".", and the body.
	HeaderSignature = "X-Laggard-Signature"
	// HeaderTimestamp is the Unix time (seconds) of this attempt; a
	// receiver refuses one too far from its clock (a replay).
	HeaderTimestamp = "X-Laggard-Timestamp"
	// HeaderDelivery is the delivery's id, the same on every retry: a
	// receiver that saw it already drops the repeat.
	HeaderDelivery = "X-Laggard-Delivery"
	// HeaderEvent is the payload's event.
	HeaderEvent = "X-Laggard-Event"
)

// WebhookSchema versions the webhook body.
const WebhookSchema = "laggard.notify.webhook/v1"

// MinSecretBytes is the shortest webhook secret accepted.
const MinSecretBytes = 16

// DefaultTolerance is how far a webhook timestamp may be from the
// receiver's clock in Verify's examples and tests.
const DefaultTolerance = 5 * time.Minute

// Payload is one webhook delivery's body.
type Payload struct {
	Schema string `json:"schema"`
	// Event: incident.opened, incident.recovering, incident.reopened (a
	// relapse in the hold-down window), incident.resolved or
	// incident.updated (the state is the same; the cause, scope,
	// confidence or headline changed).
	Event    string         `json:"event"`
	Delivery string         `json:"delivery"`
	From     incident.State `json:"from"`
	To       incident.State `json:"to"`
	// AtNS is when laggard handed the change over (Unix ns).
	AtNS        int64             `json:"at_ns"`
	IncidentURL string            `json:"incident_url,omitempty"`
	Incident    incident.Incident `json:"incident"`
	// EvidenceOmitted counts the evidence left out to keep the body
	// under the size bound (incident_url serves it whole).
	EvidenceOmitted int `json:"evidence_omitted,omitempty"`
}

// Event names a change.
func Event(c Change) string {
	switch {
	case c.From == c.To:
		return "incident.updated"
	case c.To == incident.StateResolved:
		return "incident.resolved"
	case c.From == "":
		return "incident.opened"
	case c.To == incident.StateRecovering:
		return "incident.recovering"
	case c.To == incident.StateOpen:
		return "incident.reopened"
	}
	return "incident." + string(c.To)
}

// Sign returns the signature header value of body sent at timestamp ts
// (the timestamp header's value).
func Sign(secret []byte, ts string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a delivery's signature and that its timestamp is within
// tolerance of now: what a receiver written in Go does with each request.
func Verify(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	ts, sig := h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if ts == "" || sig == "" {
		return fmt.Errorf("missing %s or %s", HeaderTimestamp, HeaderSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%s %q: not Unix seconds", HeaderTimestamp, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)).Abs(); d > tolerance {
		return fmt.Errorf("%s is %s from now (more than %s): a replay or a wrong clock", HeaderTimestamp, d.Round(time.Second), tolerance)
	}
	if !hmac.Equal([]byte(sig), []byte(Sign(secret, ts, body))) {
		return errors.New("signature mismatch")
	}
	return nil
}

// ReadSecretFile reads a webhook secret: the file's content without
// surrounding white space, at least MinSecretBytes long.
func ReadSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := strings.TrimSpace(string(b))
	if len(s) < MinSecretBytes {
		return nil, fmt.Errorf("%s: the secret is %d bytes; use at least %d random bytes (openssl rand -hex 32)", path, len(s), MinSecretBytes)
	}
	return []byte(s), nil
}

// hookTarget posts to the generic webhook.
type hookTarget struct {
	n   *Notifier
	url string
	mu  sync.Mutex
	// shown is what the last delivery showed of each unresolved
	// incident: an update that changes none of it is not sent.
	shown map[string]string
}

func (t *hookTarget) batchSize() int          { return 1 }
func (t *hookTarget) resend(time.Time) []item { return nil }

// shownOf is what a receiver sees change in an update.
func shownOf(inc *incident.Incident) string {
	b, _ := json.Marshal([]any{inc.State, inc.Cause, inc.Scope, inc.Category, inc.Confidence, inc.Headline})
	return string(b)
}

func (t *hookTarget) items(c Change, now time.Time) []item {
	inc := &c.Incident
	shown := shownOf(inc)
	t.mu.Lock()
	if c.From == c.To && t.shown[inc.ID] == shown {
		t.mu.Unlock()
		return nil
	}
	if c.To == incident.StateResolved {
		delete(t.shown, inc.ID)
	} else {
		t.shown[inc.ID] = shown
		for id := range t.shown {
			if len(t.shown) <= t.n.cfg.MaxTracked {
				break
			}
			delete(t.shown, id) // at worst one repeated update
		}
	}
	t.mu.Unlock()
	p := Payload{Schema: WebhookSchema, Event: Event(c), Delivery: newDelivery(), From: c.From, To: c.To, AtNS: now.UnixNano(),
		IncidentURL: IncidentURL(t.n.cfg.ExternalURL, inc.ID), Incident: *inc}
	body, err := json.Marshal(p)
	if err == nil && int64(len(body)) > t.n.cfg.MaxWebhookBytes {
		p.EvidenceOmitted, p.Incident.Evidence = len(inc.Evidence), nil
		body, err = json.Marshal(p)
	}
	if err == nil && int64(len(body)) > t.n.cfg.MaxWebhookBytes {
		err = fmt.Errorf("%d bytes without its evidence, more than the %d-byte bound", len(body), t.n.cfg.MaxWebhookBytes)
	}
	if err != nil {
		t.n.m.dropped.WithLabelValues("webhook").Inc()
		t.n.log.Warn("incident webhook not sent: cannot encode it", "incident", inc.ID, "err", err)
		return nil
	}
	return []item{{incident: inc.ID, body: body, size: int64(len(body)), delivery: p.Delivery, event: p.Event}}
}

func (t *hookTarget) post(ctx context.Context, batch []item) (time.Duration, bool, error) {
	it := batch[0]
	// Signed at each attempt: the timestamp is the attempt's, so a
	// receiver's replay window does not refuse a late retry.
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	h := http.Header{}
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderDelivery, it.delivery)
	h.Set(HeaderEvent, it.event)
	if len(t.n.cfg.WebhookSecret) > 0 {
		h.Set(HeaderSignature, Sign(t.n.cfg.WebhookSecret, ts, it.body))
	}
	return t.n.send(ctx, t.url, it.body, h)
}

// newDelivery returns a random delivery id.
func newDelivery() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}
