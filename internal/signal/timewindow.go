package signal

import "fmt"

// One time rule for every signal that carries wall-clock timestamps
// (stack windows, OS-stat windows, imported profiles, collective calls):
// a timestamp lies between 2000-01-01 and the server's clock plus
// MaxClockSkewNS, and a window spans at most MaxWindowNS. Why a bound on
// the future: reports and scans anchor on a job's latest timestamp, so
// one window stamped in year 2200 (or 2^63−10 ns) becomes every later
// report's "latest" window and hides the real data, and it cannot be
// taken back. The clock is the caller's (ingest handlers pass time.Now),
// so this package stays free of clocks.
const (
	// MinTimeNS is 2000-01-01T00:00:00Z in Unix nanoseconds.
	MinTimeNS = int64(946_684_800) * 1e9
	// MaxTimeNS is 2200-01-01T00:00:00Z: the absolute bound of a stored
	// timestamp, whatever the clock said when it was written.
	MaxTimeNS = int64(7_258_118_400) * 1e9
	// MaxClockSkewNS is how far past the server's clock a timestamp may
	// lie: room for a node clock a little ahead, not for a wrong one.
	MaxClockSkewNS = int64(5*60) * 1e9
	// MaxWindowNS bounds one window (a stack or OS-stat record, an
	// imported profile): scans look back the longest stored window.
	MaxWindowNS = int64(3600) * 1e9
)

// CheckTime refuses a timestamp outside [MinTimeNS, nowNS+MaxClockSkewNS]
// (and past MaxTimeNS), naming field.
func CheckTime(field string, ns, nowNS int64) error {
	if ns < MinTimeNS || ns > MaxTimeNS {
		return FieldErrorf(field, "%d is not a Unix-epoch nanosecond time between 2000 and 2200", ns)
	}
	if nowNS > 0 && ns > nowNS && ns-nowNS > MaxClockSkewNS {
		return FieldErrorf(field, "%d is %s ahead of the server's clock (%d); at most %s is accepted (is the sender's clock wrong?)",
			ns, fmtNS(ns-nowNS), nowNS, fmtNS(MaxClockSkewNS))
	}
	return nil
}

// CheckWindow applies CheckTime to a window [start_ns, end_ns] and bounds
// its length by MaxWindowNS; errors name start_ns or end_ns.
func CheckWindow(start, end, nowNS int64) error {
	if err := CheckTime("start_ns", start, nowNS); err != nil {
		return err
	}
	if end < start {
		return FieldErrorf("end_ns", "window [%d, %d] is reversed", start, end)
	}
	if end-start > MaxWindowNS {
		return FieldErrorf("end_ns", "window [start_ns=%d, end_ns=%d] spans %s, more than the %s one record may cover: send it in parts",
			start, end, fmtNS(end-start), fmtNS(MaxWindowNS))
	}
	return CheckTime("end_ns", end, nowNS)
}

// fmtNS writes a positive duration in the largest whole unit that fits.
func fmtNS(ns int64) string {
	switch {
	case ns >= 365*86_400e9:
		return fmt.Sprintf("%.0f years", float64(ns)/(365*86_400e9))
	case ns >= 86_400e9:
		return fmt.Sprintf("%.1f days", float64(ns)/86_400e9)
	case ns >= 3_600e9:
		return fmt.Sprintf("%.1f h", float64(ns)/3_600e9)
	case ns >= 60e9:
		return fmt.Sprintf("%.1f min", float64(ns)/60e9)
	}
	return fmt.Sprintf("%.3f s", float64(ns)/1e9)
}
