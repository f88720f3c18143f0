package signal

import (
	"errors"
	"math"
	"testing"
)

func TestCheckWindow(t *testing.T) {
	now := int64(1_800_000_000) * 1e9
	cases := []struct {
		name       string
		start, end int64
		field      string // "" = accepted
	}{
		{"now", now - 5e9, now, ""},
		{"a node clock 4 min ahead", now + 4*60e9, now + 4*60e9 + 5e9, ""},
		{"an hour long", now - 3600e9, now, ""},
		{"before 2000", 1e9, 2e9, "start_ns"},
		{"zero", 0, 5e9, "start_ns"},
		{"an hour ahead", now + 3600e9, now + 3605e9, "start_ns"},
		{"ends in the future", now - 1e9, now + 600e9, "end_ns"},
		{"year 2200", MaxTimeNS - 10e9, MaxTimeNS - 5e9, "start_ns"},
		{"2^63-10", math.MaxInt64 - 10, math.MaxInt64, "start_ns"},
		{"reversed", now, now - 1, "end_ns"},
		{"longer than an hour", now - 3601e9, now, "end_ns"},
	}
	for _, c := range cases {
		err := CheckWindow(c.start, c.end, now)
		var fe *FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v, want accepted", c.name, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%s: %v, want a FieldError naming %s", c.name, err, c.field)
		}
	}
	// Without a clock (nowNS 0) only the absolute bounds apply.
	if err := CheckTime("t", MaxTimeNS-1, 0); err != nil {
		t.Errorf("no clock: %v", err)
	}
}
