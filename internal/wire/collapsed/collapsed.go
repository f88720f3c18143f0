// Package collapsed reads and writes folded ("collapsed") stacks, the
// text format of Brendan Gregg's stackcollapse scripts, py-spy --format
// raw and many flame-graph tools: one line per distinct stack, frames
// root first separated by ';', then a space and the sample count:
//
//	main;train_step;forward;matmul 12
//
// so perf and py-spy users can feed laggard (issue 8 item 8).
package collapsed

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// MaxLineBytes bounds one line: MaxFrames names of a few hundred bytes.
const MaxLineBytes = 1 << 20

// Import reads folded stacks as one batch of rank's samples (Kind Symbol
// frames, leaf first). Blank lines and lines starting with '#' are
// skipped. The batch has no window (StartNS, EndNS 0): the caller sets it
// and then calls Validate. Errors name the line ("line 3") and are
// *signal.FieldError, or wrap laggardv1.ErrTooLarge past the caps.
func Import(r io.Reader, rank int) (*stack.Batch, error) {
	if rank < -1 || rank > stack.MaxRank {
		return nil, signal.FieldErrorf("rank", "%d outside [-1, %d]", rank, stack.MaxRank)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	b := &stack.Batch{}
	frames := 0
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		field := "line " + strconv.Itoa(n)
		sp := strings.LastIndexAny(line, " \t")
		if sp < 0 {
			return nil, signal.FieldErrorf(field, "no sample count: expected \"a;b;c COUNT\"")
		}
		count, err := strconv.ParseInt(line[sp+1:], 10, 64)
		if err != nil || count < 0 || count > stack.MaxCount {
			return nil, signal.FieldErrorf(field, "count %q is not an integer in [0, %d]", signal.Clip(line[sp+1:]), stack.MaxCount)
		}
		path := strings.TrimRight(line[:sp], " \t")
		if path == "" {
			return nil, signal.FieldErrorf(field, "no frames before the count")
		}
		if count == 0 {
			continue
		}
		if len(b.Samples) == stack.MaxSamples {
			return nil, fmt.Errorf("%w: more than %d stacks", laggardv1.ErrTooLarge, stack.MaxSamples)
		}
		names := strings.Split(path, ";")
		s := stack.Sample{Rank: rank, Count: count}
		if len(names) > stack.MaxFrames { // keep the leaf end
			names, s.Truncated = names[len(names)-stack.MaxFrames:], true
		}
		s.Frames = make([]stack.Frame, len(names))
		for i, name := range names {
			name = strings.TrimSpace(name) // "a; b" from hand-edited files, a stray \r
			if name == "" {
				return nil, signal.FieldErrorf(field, "frame %d is empty", i+1)
			}
			if len(name) > stack.MaxNameLen {
				return nil, signal.FieldErrorf(field, "frame %d is longer than %d bytes", i+1, stack.MaxNameLen)
			}
			s.Frames[len(names)-1-i] = stack.Frame{Kind: stack.Symbol, Mapping: -1, Func: name}
		}
		frames += len(s.Frames)
		if frames > laggardv1.MaxBatchFrames {
			return nil, fmt.Errorf("%w: more than %d frames", laggardv1.ErrTooLarge, laggardv1.MaxBatchFrames)
		}
		b.Samples = append(b.Samples, s)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%w: a line is longer than %d bytes", laggardv1.ErrTooLarge, MaxLineBytes)
		}
		if errors.Is(err, laggardv1.ErrTooLarge) {
			return nil, err
		}
		return nil, &signal.FieldError{Field: "body", Msg: "reading: " + signal.Clip(err.Error())}
	}
	return b, nil
}

// Export writes p's stacks as folded lines, root first, in p's order. A
// ';' inside a name would split the frame on reading back, so it is
// written as ':'; line breaks become spaces, surrounding space is
// trimmed (Import trims it too) and an empty name is written "?". A root
// frame whose name starts with '#' would read back as a comment line: it
// is written with the '#' as '_'.
func Export(w io.Writer, p *stack.Profile) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	names := make([]string, len(p.Funcs))
	for i, f := range p.Funcs {
		names[i] = strings.TrimSpace(strings.NewReplacer(";", ":", "\n", " ", "\r", " ").Replace(f.Name))
		if names[i] == "" {
			names[i] = "?"
		}
	}
	for _, s := range p.Stacks {
		if s.Count <= 0 || len(s.Frames) == 0 {
			continue
		}
		for j, k := range s.Frames {
			name := "?"
			if k >= 0 && int(k) < len(names) {
				name = names[k]
			}
			if j > 0 {
				bw.WriteByte(';')
			} else if name[0] == '#' {
				bw.WriteByte('_')
				name = name[1:]
			}
			bw.WriteString(name)
		}
		bw.WriteByte(' ')
		bw.WriteString(strconv.FormatInt(s.Count, 10))
		if err := bw.WriteByte('\n'); err != nil {
			return err
		}
	}
	return bw.Flush()
}
