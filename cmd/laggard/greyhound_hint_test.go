package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The greyhound command shares the API client with sysom/symbols/profile;
// its 404 and 401 answers keep their hints.
func TestGreyhoundErrorHints(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   string
	}{
		{http.StatusNotFound, "laggard.init(collectives=True) or the NCCL shim"},
		{http.StatusUnauthorized, "give a token: -token-file or $LAGGARD_TOKEN"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			w.Write([]byte(`{"error":"no such thing"}`))
		}))
		var out, errb bytes.Buffer
		err := runGreyhound(context.Background(), []string{"-server", srv.URL, "j1"}, &out, &errb)
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), "no such thing") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("status %d: error %v, want the server's message and %q", tc.status, err, tc.want)
		}
	}
}
