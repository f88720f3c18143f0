package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/incident"
)

// findAlertmanager returns the Alertmanager binary (Debian's
// prometheus-alertmanager), skipping the test when there is none unless
// LAGGARD_REQUIRE_ALERTMANAGER=1 (CI) makes that a failure.
func findAlertmanager(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"prometheus-alertmanager", "alertmanager"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if p := "/usr/bin/prometheus-alertmanager"; fileExists(p) {
		return p
	}
	cannotRun(t, "no Alertmanager installed (apt-get install -y prometheus-alertmanager)")
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// cannotRun skips with why, or fails under LAGGARD_REQUIRE_ALERTMANAGER=1.
func cannotRun(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("LAGGARD_REQUIRE_ALERTMANAGER") == "1" {
		t.Fatal("LAGGARD_REQUIRE_ALERTMANAGER=1 but " + why)
	}
	t.Skip(why + "; set LAGGARD_REQUIRE_ALERTMANAGER=1 to fail instead")
}

// amNotification is what Alertmanager posts to its webhook receiver.
type amNotification struct {
	Status string `json:"status"`
	Alerts []struct {
		Status string            `json:"status"`
		Labels map[string]string `json:"labels"`
	} `json:"alerts"`
}

// realAlertmanager starts Alertmanager on a loopback port with a temp
// config and storage, routing every alert to receiver (send_resolved),
// and returns its base URL.
func realAlertmanager(t *testing.T, receiver string) string {
	bin := findAlertmanager(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "alertmanager.yml")
	err := os.WriteFile(conf, []byte(fmt.Sprintf(`route:
  receiver: laggard-test
  group_by: [incident]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: laggard-test
    webhook_configs:
      - url: %q
        send_resolved: true
`, receiver)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var lastErr string
	for attempt := range 3 {
		addr := freeLoopback(t)
		ctx, cancel := context.WithCancel(context.Background())
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, "--config.file="+conf, "--storage.path="+filepath.Join(dir, fmt.Sprint("data", attempt)),
			"--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=warn")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			cancel()
			cannotRun(t, fmt.Sprintf("%s does not start: %v", bin, err))
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		base := "http://" + addr
		if waitReady(base, exited) {
			t.Cleanup(func() { cancel(); <-exited })
			t.Logf("Alertmanager %s ready at %s", bin, base)
			return base
		}
		cancel()
		<-exited
		lastErr = strings.TrimSpace(out.String())
	}
	cannotRun(t, fmt.Sprintf("%s did not become ready: %s", bin, lastErr))
	return ""
}

func freeLoopback(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitReady(base string, exited <-chan struct{}) bool {
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			return false
		default:
		}
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return true
			}
		}
	}
	return false
}

// gettable is the part of GET /api/v2/alerts the test reads.
type gettable struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	Status      struct {
		State string `json:"state"`
	} `json:"status"`
}

func activeAlerts(t *testing.T, base, incidentID string) []gettable {
	t.Helper()
	resp, err := http.Get(base + "/api/v2/alerts?filter=" + url.QueryEscape(`incident="`+incidentID+`"`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var as []gettable
	if err := json.Unmarshal(b, &as); err != nil {
		t.Fatalf("GET /api/v2/alerts: %d %s: %v", resp.StatusCode, b, err)
	}
	return as
}

// The incident's alert reaches a real Alertmanager with its labels and
// annotations, Alertmanager notifies its receiver that it fires, and the
// resolution resolves it there: it leaves GET /api/v2/alerts and the
// receiver is told "resolved".
func TestRealAlertmanager(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Alertmanager")
	}
	var mu sync.Mutex
	var notes []amNotification
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n amNotification
		if err := json.NewDecoder(r.Body).Decode(&n); err == nil {
			mu.Lock()
			notes = append(notes, n)
			mu.Unlock()
		}
	}))
	defer recv.Close()
	base := realAlertmanager(t, recv.URL)
	told := func(status string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range notes {
			for _, a := range n.Alerts {
				if a.Status == status && a.Labels["incident"] == "inc-real" && a.Labels["alertname"] == AlertName {
					return true
				}
			}
		}
		return false
	}

	n, err := New(Config{Alertmanagers: []string{base}, ExternalURL: "https://laggard.example.com", BackoffMin: 10 * time.Millisecond},
		prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	defer func() { cancel(); <-done }()

	inc := testInc("inc-real", incident.StateOpen)
	inc.Opened.WallNS = time.Now().Add(-3 * time.Minute).UnixNano()
	n.Notify(Change{Incident: inc, To: incident.StateOpen})
	var got []gettable
	waitFor(t, "the alert in Alertmanager", func() bool { got = activeAlerts(t, base, "inc-real"); return len(got) == 1 })
	a := got[0]
	want := map[string]string{"alertname": AlertName, "incident": "inc-real", "job": "train-7", "state": "open",
		"scope": "ranks:3 hosts:h7", "cause": "rank:3", "category": "network", "severity": "warning"}
	if !mapsEqual(a.Labels, want) {
		t.Errorf("labels in Alertmanager %v, want %v", a.Labels, want)
	}
	if a.Status.State != "active" || a.Annotations["summary"] != inc.Headline ||
		a.Annotations["incident_url"] != "https://laggard.example.com/#/incidents/inc-real" {
		t.Errorf("alert in Alertmanager: state %q annotations %v", a.Status.State, a.Annotations)
	}
	if d := a.StartsAt.Sub(time.Unix(0, inc.Opened.WallNS)).Abs(); d > time.Millisecond {
		t.Errorf("startsAt %v, want the onset %v", a.StartsAt, time.Unix(0, inc.Opened.WallNS))
	}
	t.Logf("GET /api/v2/alerts: state=%s labels=%v summary=%q", a.Status.State, a.Labels, a.Annotations["summary"])
	waitFor(t, "Alertmanager's firing notification", func() bool { return told("firing") })
	t.Log("Alertmanager notified its receiver: firing")

	res := inc
	res.State = incident.StateResolved
	res.Resolved = &incident.Point{WallNS: time.Now().UnixNano()}
	n.Notify(Change{Incident: res, From: incident.StateOpen, To: incident.StateResolved})
	waitFor(t, "the alert to resolve in Alertmanager", func() bool { return len(activeAlerts(t, base, "inc-real")) == 0 })
	t.Log("GET /api/v2/alerts: the alert is gone (resolved)")
	waitFor(t, "Alertmanager's resolved notification", func() bool { return told("resolved") })
	t.Log("Alertmanager notified its receiver: resolved")
}
