// Package demo runs laggard's end-to-end demonstration: a real PyTorch DDP
// job on CPU (gloo) instrumented with the Python client, with a delay
// injected on a hidden rank, followed by the diagnosis.
package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// FindPython returns an interpreter that can import torch with gloo.
// Debian's python3-torch lives under /usr/bin/python3, which a pyenv or
// virtualenv python3 earlier on PATH does not see, so both are tried.
func FindPython(ctx context.Context, explicit string) (string, error) {
	cands := []string{}
	if explicit != "" {
		cands = append(cands, explicit)
	} else {
		if env := os.Getenv("LAGGARD_PYTHON"); env != "" {
			cands = append(cands, env)
		}
		cands = append(cands, "/usr/bin/python3", "python3", "python")
	}
	var tried []string
	for _, c := range cands {
		path, err := exec.LookPath(c)
		if err != nil {
			tried = append(tried, c+": not found")
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		out, err := exec.CommandContext(cctx, path, "-c",
			"import torch, torch.distributed as d; assert d.is_gloo_available(); print(torch.__version__)").CombinedOutput()
		cancel()
		if err == nil {
			return path, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %s", path, lastLine(string(out))))
	}
	return "", errors.New("no Python with PyTorch (gloo) found; install it with `apt-get install -y python3-torch` " +
		"or point LAGGARD_PYTHON / -python at an interpreter that has torch. Tried: " + strings.Join(tried, "; "))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
