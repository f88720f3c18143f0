package server

import (
	"fmt"
	"path/filepath"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/symbolize"
)

// DefaultSymbolQuota bounds <data dir>/symbols when the server opens it:
// symbol indexes are a few percent of the uploaded ELF, so this holds the
// binaries and libraries of many images (SysOM-AI §3.4).
const DefaultSymbolQuota = int64(20) << 30

// startSysom wires SysOM-AI's analysis: the central symbol store (cfg's,
// else <DataDir>/symbols, which then also serves the upload routes) and a
// Resolver over it. Without a stack keyspace, or without a symbol store
// and a data directory, the SysOM-AI routes answer 404.
func (s *Server) startSysom(cfg *Config, st Store) error {
	src, ok := st.(analysis.SysomSource)
	if !ok {
		return nil
	}
	syms, _ := cfg.Symbols.(*symbolize.Store)
	if cfg.Symbols == nil && cfg.DataDir != "" {
		dir := filepath.Join(cfg.DataDir, "symbols")
		opened, err := symbolize.OpenStore(dir, DefaultSymbolQuota)
		if err != nil {
			return fmt.Errorf("opening the symbol store %s: %w", dir, err)
		}
		syms, cfg.Symbols = opened, opened
	}
	if syms == nil {
		s.log.Info("SysOM-AI analysis off: no symbol store (set Config.Symbols or DataDir)")
		return nil
	}
	// LocalDebug: a Build-ID no agent uploaded may still be installed on
	// the server (/usr/lib/debug), as on a node built from one image.
	s.resolver = symbolize.NewResolver(syms, symbolize.ResolverOptions{LocalDebug: true})
	var err error
	s.sysom, err = analysis.NewSysom(src, s.resolver, analysis.DefaultSysomConfig(), analysis.SysomLimits{})
	return err
}

// sysomAPI is the API's view of the adapter (nil interface when off).
func (s *Server) sysomAPI() api.Sysom {
	if s.sysom == nil {
		return nil
	}
	return s.sysom
}

// Sysom returns the SysOM-AI adapter (nil when off).
func (s *Server) Sysom() *analysis.Sysom { return s.sysom }

func (s *Server) closeSysom() {
	if s.resolver != nil {
		s.resolver.Close()
	}
}
