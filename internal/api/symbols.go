package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/symbolize"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// SymbolStore is the central symbol store of deferred symbolization
// (SysOM-AI §3.4): agents ship raw addresses with Build-IDs and upload
// each binary (or its debug file) once, in chunks, when the server lacks
// it. *symbolize.Store implements it.
type SymbolStore interface {
	Has(buildID string) bool
	PutChunk(buildID string, part, parts int, r io.Reader) (done bool, err error)
	// Remove deletes a Build-ID's symbols (errors.Is ErrNotFound when
	// none): the first upload of a Build-ID wins, so an admin removes a
	// poisoned one and the next upload (or local debug file) replaces it.
	Remove(buildID string) error
}

// MaxSymbolPart bounds one uploaded part (§4: "chunked transfer (64 MB
// segments) to bound peak memory on the node").
const MaxSymbolPart = 64 << 20

// symbolID is the route's Build-ID, or a 400 naming it: the store's key
// rule (symbolize.ValidBuildID: lowercase hex, an even number of digits),
// so HEAD, POST and the store never disagree about one id.
func (a *API) symbolID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("buildid")
	if !symbolize.ValidBuildID(id) || len(id) > stack.MaxBuildIDLen {
		a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("buildid", "must be lowercase hex of an even number of digits, 2..%d, got %q", stack.MaxBuildIDLen, signal.Clip(id)))
		return "", false
	}
	if a.d.Symbols == nil {
		a.fail(w, r, http.StatusNotImplemented, errors.New("this server has no symbol store"))
		return "", false
	}
	return id, true
}

// headSymbols answers whether the server holds symbols for a Build-ID
// (HEAD /api/v1/symbols/{buildid}: 200 or 404, no body), so an agent
// uploads each binary once.
func (a *API) headSymbols(w http.ResponseWriter, r *http.Request) {
	id, ok := a.symbolID(w, r)
	if !ok {
		return
	}
	if a.d.Symbols.Has(id) {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusNotFound)
}

// postSymbols stores one part of a Build-ID's ELF (POST
// /api/v1/symbols/{buildid}?part=N&parts=M, application/octet-stream, at
// most MaxSymbolPart bytes) and answers {"done": true} once every part is
// in and the file was verified (its Build-ID note matches) and indexed.
// A bad upload is 400, a part over the limit 413, the store's quota 507.
func (a *API) postSymbols(w http.ResponseWriter, r *http.Request) {
	id, ok := a.symbolID(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	nums := [2]int{0, 1}
	for i, name := range []string{"part", "parts"} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || (i == 1 && n < 1) {
			a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf(name, "must be a non-negative integer (parts ≥ 1), got %q", signal.Clip(v)))
			return
		}
		nums[i] = n
	}
	part, parts := nums[0], nums[1]
	if part >= parts {
		a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("part", "%d is not below parts (%d)", part, parts))
		return
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		a.fail(w, r, http.StatusUnsupportedMediaType, fmt.Errorf("unsupported Content-Encoding %q: send the file's bytes", signal.Clip(enc)))
		return
	}
	if r.ContentLength > MaxSymbolPart {
		a.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: part of %d bytes, the limit is %d; send smaller parts", laggardv1.ErrTooLarge, r.ContentLength, MaxSymbolPart))
		return
	}
	// The store reads the part to disk; one byte past the limit tells an
	// oversized chunked body from a full one.
	body := &capReader{r: r.Body, n: MaxSymbolPart}
	done, err := a.d.Symbols.PutChunk(id, part, parts, body)
	switch {
	case body.over:
		a.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: part larger than %d bytes; send smaller parts", laggardv1.ErrTooLarge, MaxSymbolPart))
		return
	case err == nil:
	case errors.Is(err, symbolize.ErrQuota):
		a.fail(w, r, http.StatusInsufficientStorage, err)
		return
	case errors.Is(err, symbolize.ErrBadUpload):
		a.fail(w, r, http.StatusBadRequest, &signal.FieldError{Field: "body", Msg: err.Error()})
		return
	default:
		a.fail(w, r, http.StatusInternalServerError, fmt.Errorf("storing symbols: %w", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"done": done})
}

// deleteSymbols removes a Build-ID's symbol file (DELETE
// /api/v1/symbols/{buildid}, admin scope): 204, or 404 when none is
// stored. The way to clear a squatted or corrupt upload (docs/format/symbols.md).
func (a *API) deleteSymbols(w http.ResponseWriter, r *http.Request) {
	id, ok := a.symbolID(w, r)
	if !ok {
		return
	}
	err := a.d.Symbols.Remove(id)
	switch {
	case err == nil:
		a.d.Log.Info("symbols removed", "build_id", id)
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, symbolize.ErrNotFound):
		a.fail(w, r, http.StatusNotFound, err)
	default:
		a.fail(w, r, http.StatusInternalServerError, fmt.Errorf("removing symbols: %w", err))
	}
}

// capReader reads at most n bytes of r and one more to notice a longer
// body (over is then set and reading stops with an error).
type capReader struct {
	r    io.Reader
	n    int64
	over bool
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.over {
		return 0, laggardv1.ErrTooLarge
	}
	if int64(len(p)) > c.n+1 {
		p = p[:c.n+1]
	}
	k, err := c.r.Read(p)
	c.n -= int64(k)
	if c.n < 0 {
		c.over = true
		return k, laggardv1.ErrTooLarge
	}
	return k, err
}
