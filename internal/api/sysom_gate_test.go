package api

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
)

// blockSysom holds every Report until release closes.
type blockSysom struct {
	fakeSysom
	entered chan struct{}
	release chan struct{}
}

func (b *blockSysom) Report(ctx context.Context, req analysis.SysomRequest) (*analysis.SysomReport, error) {
	b.entered <- struct{}{}
	<-b.release
	var f fakeSysom
	return f.Report(ctx, req)
}

// More heavy reads than MaxHeavyReads at once: the extra one is answered
// 503 with Retry-After instead of piling onto the CPUs (review finding 10).
func TestSysomHeavyReadsGated(t *testing.T) {
	b := &blockSysom{entered: make(chan struct{}, MaxHeavyReads), release: make(chan struct{})}
	base := sysomServer(t, b)
	var wg sync.WaitGroup
	for range MaxHeavyReads {
		wg.Go(func() {
			if a := send(t, "GET", base+"sj/sysom", "", nil); a.status != 200 {
				t.Errorf("held read: %d %s", a.status, a.raw)
			}
		})
	}
	for range MaxHeavyReads {
		<-b.entered
	}
	req, _ := http.NewRequest("GET", base+"sj/sysom", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the gate: %d Retry-After=%q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(b.release)
	wg.Wait()
}
