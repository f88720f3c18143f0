package main

import (
	"strings"
	"testing"
	"time"
)

// -kair-trigger, -kair-cooldown and -kair-steps: valid values map onto
// control.KairConfig; others are refused naming the flag; the zero value
// (demo) is valid and means the defaults.
func TestKairServeFlags(t *testing.T) {
	for _, tc := range []struct {
		o    kairOptions
		bad  string
		off  bool
		cool time.Duration
	}{
		{kairOptions{}, "", false, 0},
		{kairOptions{trigger: "on", cooldown: time.Minute, steps: 5}, "", false, time.Minute},
		{kairOptions{trigger: "off", cooldown: 10 * time.Minute, steps: 64}, "", true, 10 * time.Minute},
		{kairOptions{trigger: "yes"}, "kair-trigger", false, 0},
		{kairOptions{trigger: "on", cooldown: time.Millisecond}, "kair-cooldown", false, 0},
		{kairOptions{trigger: "on", steps: 65}, "kair-steps", false, 0},
	} {
		err := tc.o.validate()
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%+v: %v", tc.o, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%+v: %v, want an error naming %s", tc.o, err, tc.bad)
		case tc.bad == "":
			if c := tc.o.config(); c.Off != tc.off || c.Cooldown != tc.cool || c.Steps != tc.o.steps {
				t.Errorf("%+v: config %+v", tc.o, c)
			}
		}
	}
}
