// Package pyclient embeds the pure-Python laggard client and its examples so
// the laggard binary stays self-contained: `laggard demo` writes them to a
// temporary directory and runs the DDP demo trainer from there.
package pyclient

import "embed"

// FS holds laggard/*.py and laggard/integrations/*.py (the client package)
// and examples/*.py (the demo trainer), rooted at this directory.
//
//go:embed laggard/*.py laggard/integrations/*.py examples/*.py
var FS embed.FS
