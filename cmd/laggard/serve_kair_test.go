package main

import (
	"strings"
	"testing"
	"time"
)

// -kair-cooldown, -kair-steps, -incidents and -detect-interval: valid
// values map onto the server's configuration; others are refused naming
// the flag; the zero value is valid and means the defaults.
func TestKairServeFlags(t *testing.T) {
	for _, tc := range []struct {
		o   kairOptions
		bad string
	}{
		{kairOptions{}, ""},
		{kairOptions{cooldown: time.Minute, steps: 5}, ""},
		{kairOptions{cooldown: 10 * time.Minute, steps: 64}, ""},
		{kairOptions{cooldown: time.Millisecond}, "kair-cooldown"},
		{kairOptions{steps: 65}, "kair-steps"},
	} {
		err := tc.o.validate()
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%+v: %v", tc.o, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%+v: %v, want an error naming %s", tc.o, err, tc.bad)
		case tc.bad == "":
			if c := tc.o.config(); c.Steps != tc.o.steps {
				t.Errorf("%+v: config %+v", tc.o, c)
			}
			if ic, _ := (incidentOptions{on: true}).config(tc.o.cooldown); ic.Escalation.CaptureCooldown != tc.o.cooldown {
				t.Errorf("%+v: capture cool-down %v", tc.o, ic.Escalation.CaptureCooldown)
			}
		}
	}
	for _, tc := range []struct {
		o    incidentOptions
		bad  bool
		want time.Duration
	}{
		{incidentOptions{on: true, detectInterval: 30 * time.Second}, false, 30 * time.Second},
		{incidentOptions{on: true, detectInterval: 5 * time.Second}, false, 5 * time.Second},
		{incidentOptions{on: true}, false, -1}, // 0: off
		{incidentOptions{detectInterval: time.Millisecond}, true, 0},
		{incidentOptions{detectInterval: 2 * time.Hour}, true, 0},
	} {
		err := tc.o.validate()
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "detect-interval") {
				t.Errorf("%+v: %v, want an error naming detect-interval", tc.o, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", tc.o, err)
		}
		if _, dc := tc.o.config(0); dc.Interval != tc.want {
			t.Errorf("%+v: detect interval %v, want %v", tc.o, dc.Interval, tc.want)
		}
	}
}
