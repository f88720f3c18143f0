// Command genvocab writes the generated copies of the stage vocabulary
// (see stagevec.Generated) under the repository root given as its argument.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: genvocab REPO_ROOT")
		os.Exit(2)
	}
	for rel, body := range stagevec.Generated() {
		p := filepath.Join(os.Args[1], rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
