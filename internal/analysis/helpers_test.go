package analysis

import (
	"errors"
	"net/url"
	"reflect"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

func isField(err error, field string) bool {
	var fe *signal.FieldError
	return errors.As(err, &fe) && fe.Field == field
}

func parseQuery(s string) (url.Values, error) { return url.ParseQuery(s) }

func sameRequest(a, b Request) bool { return reflect.DeepEqual(a, b) }

// multiSource serves several MemSources by job id.
type multiSource []*MemSource

func (m multiSource) pick(id string) Source {
	for _, s := range m {
		if s.job.ID == id {
			return s
		}
	}
	return m[0] // answers not found for id
}

func (m multiSource) Job(id string) (*signal.Job, error)      { return m.pick(id).Job(id) }
func (m multiSource) Stats(id string) (store.JobStats, error) { return m.pick(id).Stats(id) }
func (m multiSource) Scan(id string, from, to int64, fn func(*stagevec.Vector) error) error {
	return m.pick(id).Scan(id, from, to, fn)
}
func (m multiSource) LastSteps(id string, n int) (int64, int64, bool, error) {
	return m.pick(id).LastSteps(id, n)
}

// countingSource counts scans.
type countingSource struct {
	Source
	scans int
}

func (c *countingSource) Scan(id string, from, to int64, fn func(*stagevec.Vector) error) error {
	c.scans++
	return c.Source.Scan(id, from, to, fn)
}
