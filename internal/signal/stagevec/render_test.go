package stagevec

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The Python client and the UI carry generated copies of the vocabulary;
// this fails when one was edited by hand or the Go source changed without
// `go generate ./internal/signal/stagevec`.
func TestGeneratedVocabularyIsCurrent(t *testing.T) {
	for rel, want := range Generated() {
		got, err := os.ReadFile(filepath.Join("..", "..", "..", rel))
		if err != nil {
			t.Fatalf("%s: %v (run go generate ./internal/signal/stagevec)", rel, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale or hand-edited: run go generate ./internal/signal/stagevec", rel)
		}
	}
}

func TestResolveAliases(t *testing.T) {
	s := DefaultSchema()
	for in, want := range map[string]string{"data": StageData, StageData: StageData, "forward": StageForward, "optimizer": StageOptim} {
		if got, ok := Resolve(s, in); !ok || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if _, ok := Resolve(s, "fwd"); ok {
		t.Error("an unknown name must not resolve")
	}
	custom := s
	custom.Stages = []string{"a", StageOther}
	if _, ok := Resolve(custom, "data"); ok {
		t.Error("an alias must not resolve to a stage the schema lacks")
	}
}
