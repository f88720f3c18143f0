package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/notify"
)

// With a webhook configured the server runs a notifier: a change handed
// to NotifyIncident is delivered, signed, and its metrics are served; a
// server without a sink ignores changes.
func TestServerNotifiesIncidents(t *testing.T) {
	secret := []byte("0123456789abcdef-secret")
	var mu sync.Mutex
	var got []notify.Payload
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if err := notify.Verify(secret, r.Header, b, time.Now(), notify.DefaultTolerance); err != nil {
			t.Errorf("delivery does not verify: %v", err)
		}
		var p notify.Payload
		_ = json.Unmarshal(b, &p)
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	}))
	defer hook.Close()
	s, ts := start(t, newMemStore(), Config{Notify: notify.Config{Webhook: hook.URL, WebhookSecret: secret, ExternalURL: "https://l.example"}})
	s.NotifyIncident(notify.Change{Incident: incident.Incident{ID: "inc-1", Job: "j", State: incident.StateOpen}, To: incident.StateOpen})
	s.Close() // drains the queue
	mu.Lock()
	if len(got) != 1 || got[0].Incident.ID != "inc-1" || got[0].IncidentURL != "https://l.example/#/incidents/inc-1" {
		t.Errorf("deliveries %+v", got)
	}
	mu.Unlock()
	r := call{method: "GET", path: "/metrics"}.do(t, ts.URL)
	if !strings.Contains(string(r.body), `laggard_notify_sent_total{result="ok",sink="webhook"} 1`) {
		t.Errorf("metrics lack the delivery:\n%s", r.body)
	}

	off, _ := start(t, newMemStore(), Config{})
	off.NotifyIncident(notify.Change{To: incident.StateOpen}) // no sink: nothing, no panic
	if off.Notifier() != nil {
		t.Error("a notifier without a sink")
	}
	if _, err := New(Config{Logger: quiet, Notify: notify.Config{Webhook: "nope"}}, newMemStore()); err == nil {
		t.Error("a bad webhook URL is accepted")
	}
}
