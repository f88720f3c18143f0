package main

import "testing"

func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"0", 0, false},
		{"-1", -1, false},
		{"1048576", 1 << 20, false},
		{"512MiB", 512 << 20, false},
		{"1.5GiB", 3 << 29, false},
		{"20GB", 20e9, false},
		{" 2g ", 2 << 30, false},
		{"10kb", 10_000, false},
		{"7B", 7, false},
		{"", 0, true},
		{"lots", 0, true},
		{"-5MiB", 0, true},
		{"1e30TiB", 0, true},
		{"MiB", 0, true},
	} {
		var b byteSize
		err := b.Set(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("Set(%q) = %d, want an error", tc.in, b)
			}
			continue
		}
		if err != nil || int64(b) != tc.want {
			t.Errorf("Set(%q) = %d, %v; want %d", tc.in, b, err, tc.want)
		}
	}
}
