package optrace

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
)

func good() Event {
	return Event{Name: "aten::mm", Cat: CPUOp, TID: 7, Device: -1, StartNS: 1_000, DurNS: 50, Step: 3, Seq: -1}
}

func TestCategoryText(t *testing.T) {
	for _, c := range Categories() {
		b, err := c.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Category
		if err := back.UnmarshalText(b); err != nil || back != c {
			t.Errorf("%v: round trip gave %v, %v", c, back, err)
		}
		if c.String() != string(b) {
			t.Errorf("String %q vs text %q", c.String(), b)
		}
	}
	if _, err := CatInvalid.MarshalText(); err == nil {
		t.Error("invalid category marshalled")
	}
	var c Category
	if err := c.UnmarshalText([]byte("bogus")); err == nil {
		t.Error("bogus category parsed")
	}
	if !GPUKernel.OnDevice() || CPUOp.OnDevice() {
		t.Error("OnDevice")
	}
}

func TestEventJSONRoundTrip(t *testing.T) {
	e := good()
	e.Cat, e.Device, e.Stream, e.TID = Collective, 0, 21, 0
	e.Comm, e.Seq, e.Correlation, e.FlowID = "pg0", 12, 78, 78
	e.Args = []Arg{{Key: "dtype", Value: "Float"}}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"cat":"collective"`) {
		t.Errorf("category not text: %s", b)
	}
	var back Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Name != e.Name || back.Cat != e.Cat || back.Comm != e.Comm || back.Seq != e.Seq || len(back.Args) != 1 {
		t.Errorf("round trip %+v", back)
	}
}

func TestValidateNamesField(t *testing.T) {
	tests := []struct {
		field string
		mut   func(*Event)
	}{
		{"name", func(e *Event) { e.Name = "" }},
		{"name", func(e *Event) { e.Name = strings.Repeat("x", MaxNameLen+1) }},
		{"cat", func(e *Event) { e.Cat = 0 }},
		{"cat", func(e *Event) { e.Cat = numCats }},
		{"device", func(e *Event) { e.Device = -2 }},
		{"device", func(e *Event) { e.Device = MaxDevice }},
		{"start_ns", func(e *Event) { e.StartNS = MaxAbsNS + 1 }},
		{"dur_ns", func(e *Event) { e.DurNS = -1 }},
		{"dur_ns", func(e *Event) { e.DurNS = MaxDurNS + 1 }},
		{"step", func(e *Event) { e.Step = -2 }},
		{"seq", func(e *Event) { e.Seq = MaxSeq + 1 }},
		{"comm", func(e *Event) { e.Seq = 3 }},
		{"comm", func(e *Event) { e.Comm = strings.Repeat("c", MaxCommLen+1) }},
		{"args", func(e *Event) { e.Args = make([]Arg, MaxArgs+1) }},
		{"args[1]", func(e *Event) { e.Args = []Arg{{}, {Key: strings.Repeat("k", MaxArgLen+1)}} }},
	}
	for _, tc := range tests {
		e := good()
		if err := e.Validate(); err != nil {
			t.Fatalf("good event: %v", err)
		}
		tc.mut(&e)
		err := e.Validate()
		var fe *signal.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("want field %q, got %v", tc.field, err)
		}
	}
}

func TestTraceValidate(t *testing.T) {
	tr := Trace{Rank: 2, Events: []Event{good(), good()}}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	tr.Events[1].DurNS = -5
	var fe *signal.FieldError
	if err := tr.Validate(); !errors.As(err, &fe) || fe.Field != "events[1].dur_ns" {
		t.Errorf("got %v", err)
	}
	tr.Events[1].DurNS = 0
	tr.Rank = -1
	if err := tr.Validate(); !errors.As(err, &fe) || fe.Field != "rank" {
		t.Errorf("got %v", err)
	}
	tr.Rank, tr.ClockOffsetNS = 0, -MaxAbsNS-1
	if err := tr.Validate(); !errors.As(err, &fe) || fe.Field != "clock_offset_ns" {
		t.Errorf("got %v", err)
	}
	e := good()
	if e.EndNS() != 1_050 {
		t.Errorf("EndNS %d", e.EndNS())
	}
}
