//go:build race

package server

// raceOn: the race detector slows everything ~5-10x; timing bounds widen.
const raceOn = true
