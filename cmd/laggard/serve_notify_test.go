package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each notification flag's mistake is an error naming the flag, before
// anything is served (issue 17 item 4).
func TestServeNotifyFlagErrors(t *testing.T) {
	t.Chdir(t.TempDir())
	short := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-alertmanager", "am:9093"}, "-alertmanager am:9093: want an http:// or https:// URL"},
		{[]string{"-alertmanager", "http://a:1,ftp://b"}, "-alertmanager ftp://b: want an http:// or https:// URL"},
		{[]string{"-webhook", "http://"}, "-webhook http:: no host"},
		{[]string{"-webhook-secret-file", short}, "-webhook-secret-file needs -webhook"},
		{[]string{"-webhook", "http://h/x", "-webhook-secret-file", short}, "the secret is 3 bytes; use at least 16"},
		{[]string{"-webhook", "http://h/x", "-webhook-secret-file", "/does/not/exist"}, "no such file"},
		{[]string{"-external-url", "laggard.example.com"}, "-external-url laggard.example.com: want an http:// or https:// URL"},
	} {
		args := append([]string{"serve", "-addr", "127.0.0.1:0"}, c.args...)
		code, _, errs := runDone(t, args...)
		if code != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("laggard %v: exit %d, stderr lacks %q:\n%s", args, code, c.want, errs)
		}
	}
}

func TestNotifyOptionsConfig(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("  0123456789abcdef0123  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := notifyOptions{alertmanager: "http://am1:9093, http://am2:9093", webhook: "https://hooks.example/x", secretFile: secret}
	c, err := o.config("http://box:7070")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Alertmanagers) != 2 || c.Alertmanagers[1] != "http://am2:9093" || string(c.WebhookSecret) != "0123456789abcdef0123" ||
		c.ExternalURL != "http://box:7070" {
		t.Errorf("config %+v", c)
	}
	if c, _ := (&notifyOptions{}).config("http://box:7070"); c.Enabled() || c.ExternalURL != "" {
		t.Errorf("no sink: %+v", c)
	}
	host, _ := os.Hostname()
	if got := listenURL("https://", &net.TCPAddr{IP: net.IPv4zero, Port: 7070}); got != "https://"+net.JoinHostPort(host, "7070") {
		t.Errorf("listen URL of 0.0.0.0: %s", got)
	}
	if got := listenURL("http://", &net.TCPAddr{IP: net.IPv6loopback, Port: 1}); got != "http://[::1]:1" {
		t.Errorf("listen URL of ::1: %s", got)
	}
}
