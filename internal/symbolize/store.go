package symbolize

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Errors callers map to HTTP statuses.
var (
	// ErrQuota: accepting the bytes would exceed the store's quota.
	ErrQuota = errors.New("symbol store quota exceeded")
	// ErrBadUpload: the assembled upload is not an ELF with the key's
	// Build-ID, or a chunk is malformed; the upload was discarded.
	ErrBadUpload = errors.New("bad symbol upload")
	// ErrNotFound: no symbol file for the Build-ID.
	ErrNotFound = errors.New("no symbols for build-id")
)

// Upload limits (§4: "chunked transfer (64 MB segments) to bound peak
// memory on the node").
const (
	DefaultMaxChunk   = 64 << 20
	DefaultMaxUpload  = 4 << 30
	DefaultStagingTTL = time.Hour
	maxParts          = 1 << 12
)

// StoreOptions configures a Store; zero fields take defaults.
type StoreOptions struct {
	// Quota bounds the bytes of symbol files plus staged uploads; ≤ 0 is
	// unlimited. Chunks being received (at most MaxChunk each) are
	// counted once they are complete.
	Quota int64
	// MaxChunk bounds one part of an upload; MaxUpload all parts of one.
	MaxChunk, MaxUpload int64
	// StagingTTL: an upload with no new part for this long is discarded.
	StagingTTL time.Duration
	// DebugDirs are searched for separate debug files by Build-ID
	// (<dir>/.build-id/ab/cdef….debug) and by .gnu_debuglink; nil means
	// /usr/lib/debug, an empty non-nil slice disables the search.
	DebugDirs []string
	// MaxSectionBytes bounds the inflated debug sections one build reads
	// (BuildOptions); default: Quota/8 clamped to [64 MiB, 2 GiB].
	MaxSectionBytes int64
	// Builds bounds concurrent index builds (each may hold up to
	// MaxSectionBytes of DWARF in memory); default 2.
	Builds int
	// MaxStagedPerID and MaxStaged bound the bytes of unfinished uploads
	// of one Build-ID and of all of them; defaults MaxUpload and Quota/4
	// (at least MaxUpload), so staged junk can never fill the quota.
	MaxStagedPerID, MaxStaged int64
	Now                       func() time.Time
}

// Store is a directory of <buildid>.sym files plus the staging area of
// chunked uploads. Safe for concurrent use; uploads of one Build-ID are
// serialized, different Build-IDs proceed in parallel.
type Store struct {
	dir  string
	opts StoreOptions

	mu     sync.Mutex
	used   int64
	staged int64 // bytes of staging/ (a part of used)
	keys   map[string]*keyLock
	lastGC time.Time
	builds chan struct{}
	hooks  []func(id string) // called after Remove (Resolver caches)
}

func (s *Store) onRemove(f func(id string)) {
	s.mu.Lock()
	s.hooks = append(s.hooks, f)
	s.mu.Unlock()
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// OpenStore opens (creating) a symbol store in dir with a byte quota.
func OpenStore(dir string, quota int64) (*Store, error) {
	return OpenStoreWith(dir, StoreOptions{Quota: quota})
}

// OpenStoreWith opens a store with explicit options.
func OpenStoreWith(dir string, opts StoreOptions) (*Store, error) {
	if opts.MaxChunk <= 0 {
		opts.MaxChunk = DefaultMaxChunk
	}
	if opts.MaxUpload <= 0 {
		opts.MaxUpload = DefaultMaxUpload
	}
	if opts.StagingTTL <= 0 {
		opts.StagingTTL = DefaultStagingTTL
	}
	if opts.DebugDirs == nil {
		opts.DebugDirs = []string{"/usr/lib/debug"}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxSectionBytes <= 0 {
		opts.MaxSectionBytes = DefaultMaxSectionBytes
		if opts.Quota > 0 {
			opts.MaxSectionBytes = min(max(opts.Quota/8, 64<<20), DefaultMaxSectionBytes)
		}
	}
	if opts.Builds <= 0 {
		opts.Builds = 2
	}
	if opts.MaxStagedPerID <= 0 {
		opts.MaxStagedPerID = opts.MaxUpload
	}
	if opts.MaxStaged <= 0 {
		opts.MaxStaged = 1 << 62
		if opts.Quota > 0 {
			opts.MaxStaged = max(opts.Quota/4, opts.MaxUpload)
		}
	}
	s := &Store{dir: dir, opts: opts, keys: map[string]*keyLock{}, builds: make(chan struct{}, opts.Builds)}
	for _, d := range []string{dir, s.stagingDir(), s.tmpDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// Temp files are leftovers of a crash mid-write: never valid.
	if ents, err := os.ReadDir(s.tmpDir()); err == nil {
		for _, e := range ents {
			os.RemoveAll(filepath.Join(s.tmpDir(), e.Name()))
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".sym") {
			if fi, err := e.Info(); err == nil {
				s.used += fi.Size()
			}
		}
	}
	staged, _ := dirUsage(s.stagingDir())
	s.used += staged
	s.staged = staged
	s.gcStaging(true)
	return s, nil
}

func (s *Store) stagingDir() string { return filepath.Join(s.dir, "staging") }
func (s *Store) tmpDir() string     { return filepath.Join(s.dir, "tmp") }
func (s *Store) symPath(id string) string {
	return filepath.Join(s.dir, id+".sym")
}

// Used is the bytes the store accounts against its quota.
func (s *Store) Used() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// ValidBuildID reports whether id is a Build-ID key: lowercase hex, an
// even number of digits, 2 to 128.
func ValidBuildID(id string) bool {
	if len(id) < 2 || len(id) > 2*maxBuildIDRaw || len(id)%2 != 0 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Has reports whether symbols for buildID are stored.
func (s *Store) Has(buildID string) bool {
	if !ValidBuildID(buildID) {
		return false
	}
	_, err := os.Stat(s.symPath(buildID))
	return err == nil
}

// Open opens the symbol file of buildID; close the returned Closer when
// done with the Index (it unmaps the file).
func (s *Store) Open(buildID string) (*Index, io.Closer, error) {
	if !ValidBuildID(buildID) {
		return nil, nil, fmt.Errorf("build-id %q: not lowercase hex", clip(buildID))
	}
	m, size, err := openMapped(s.symPath(buildID))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("%w %s", ErrNotFound, buildID)
		}
		return nil, nil, err
	}
	ix, err := OpenIndex(m, size)
	if err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("%s.sym: %w", buildID, err)
	}
	return ix, m, nil
}

func (s *Store) lock(id string) func() {
	s.mu.Lock()
	k := s.keys[id]
	if k == nil {
		k = &keyLock{}
		s.keys[id] = k
	}
	k.refs++
	s.mu.Unlock()
	k.mu.Lock()
	return func() {
		k.mu.Unlock()
		s.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(s.keys, id)
		}
		s.mu.Unlock()
	}
}

// reserve accounts n more bytes (negative releases), refusing past quota.
func (s *Store) reserve(n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > 0 && s.opts.Quota > 0 && s.used+n > s.opts.Quota {
		return fmt.Errorf("%w: %d + %d bytes > %d", ErrQuota, s.used, n, s.opts.Quota)
	}
	s.used += n
	return nil
}

// PutChunk stores part (0-based, 0 ≤ part < parts) of the upload of
// buildID's ELF (the binary or its debug file). Parts may arrive in any
// order and be resent; when the last missing part arrives the parts are
// read as one ELF, its Build-ID checked against the key, the symbol file
// built and verified and moved into place atomically, and the raw parts
// deleted: done is true. A Build-ID already stored returns done at once.
// A bad upload is discarded and the error wraps ErrBadUpload.
func (s *Store) PutChunk(buildID string, part, parts int, r io.Reader) (done bool, err error) {
	if !ValidBuildID(buildID) {
		return false, fmt.Errorf("%w: build-id %q is not lowercase hex of 2..128 digits", ErrBadUpload, clip(buildID))
	}
	if parts < 1 || parts > maxParts {
		return false, fmt.Errorf("%w: parts %d outside [1, %d]", ErrBadUpload, parts, maxParts)
	}
	if part < 0 || part >= parts {
		return false, fmt.Errorf("%w: part %d outside [0, %d)", ErrBadUpload, part, parts)
	}
	if s.Has(buildID) {
		return true, nil
	}
	// A debug file on the server's own node beats any upload: an upload
	// cannot squat a Build-ID the operator's system already provides.
	if ok, err := s.FromDebugDirs(buildID); ok && err == nil {
		return true, nil
	}
	s.gcStaging(false)
	// Hold a full chunk's worth of quota and staging room before writing
	// a byte: nothing an ingest token sends is stored uncounted.
	if err := s.reserveStaged(s.opts.MaxChunk); err != nil {
		return false, err
	}
	defer s.releaseStaged(s.opts.MaxChunk)
	tmp, err := os.CreateTemp(s.tmpDir(), "chunk-*")
	if err != nil {
		return false, err
	}
	n, err := io.Copy(tmp, io.LimitReader(r, s.opts.MaxChunk+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if err != nil {
		return false, fmt.Errorf("part %d: %w", part, err)
	}
	if n > s.opts.MaxChunk {
		return false, fmt.Errorf("%w: part %d exceeds %d bytes", ErrBadUpload, part, s.opts.MaxChunk)
	}
	if n == 0 {
		return false, fmt.Errorf("%w: part %d is empty", ErrBadUpload, part)
	}

	unlock := s.lock(buildID)
	defer unlock()
	if s.Has(buildID) { // a concurrent upload finished meanwhile
		return true, nil
	}
	// Staged per (Build-ID, parts): two nodes may upload different files
	// of one build (the binary, its debug file) at once; different part
	// counts never mix, and whichever upload completes first wins.
	dir := filepath.Join(s.stagingDir(), buildID, strconv.Itoa(parts))
	have, staged, err := s.stagedParts(dir)
	if err != nil {
		return false, err
	}
	old := have[part]
	if staged-old+n > s.opts.MaxUpload {
		s.discardAll(buildID)
		return false, fmt.Errorf("%w: upload exceeds %d bytes", ErrBadUpload, s.opts.MaxUpload)
	}
	// All uploads of one Build-ID (any part count) share one bound, so one
	// id cannot hold several MaxUpload-sized stagings.
	if idTotal, _ := dirUsage(filepath.Join(s.stagingDir(), buildID)); idTotal-old+n > s.opts.MaxStagedPerID {
		return false, fmt.Errorf("%w: staged uploads of %s exceed %d bytes", ErrQuota, buildID, s.opts.MaxStagedPerID)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, strconv.Itoa(part))); err != nil {
		return false, err
	}
	s.accountStaged(n - old) // within the MaxChunk held above
	have[part] = n
	if len(have) < parts {
		return false, nil
	}
	err = s.complete(buildID, dir, parts)
	s.discardAll(buildID)
	if err != nil {
		return false, err
	}
	return true, nil
}

// stagedParts lists the parts staged in dir: part → bytes.
func (s *Store) stagedParts(dir string) (map[int]int64, int64, error) {
	have := map[int]int64{}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return have, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var total int64
	for _, e := range ents {
		p, err1 := strconv.Atoi(e.Name())
		fi, err2 := e.Info()
		if err1 != nil || err2 != nil {
			continue
		}
		have[p] = fi.Size()
		total += fi.Size()
	}
	return have, total, nil
}

// discardAll removes every staged upload of id. Caller holds id's lock.
func (s *Store) discardAll(id string) {
	dir := filepath.Join(s.stagingDir(), id)
	total, _ := dirUsage(dir)
	os.RemoveAll(dir)
	s.accountStaged(-total)
}

// reserveStaged holds n bytes of quota and of the staging bound.
func (s *Store) reserveStaged(n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.Quota > 0 && s.used+n > s.opts.Quota {
		return fmt.Errorf("%w: %d + %d bytes > %d", ErrQuota, s.used, n, s.opts.Quota)
	}
	if s.staged+n > s.opts.MaxStaged {
		return fmt.Errorf("%w: staged uploads %d + %d bytes > %d", ErrQuota, s.staged, n, s.opts.MaxStaged)
	}
	s.used += n
	s.staged += n
	return nil
}

func (s *Store) releaseStaged(n int64) { s.accountStaged(-n) }

// accountStaged adds n (negative releases) without a bound check.
func (s *Store) accountStaged(n int64) {
	s.mu.Lock()
	s.used += n
	s.staged += n
	s.mu.Unlock()
}

// dirUsage sums file sizes under dir and finds the newest modification.
func dirUsage(dir string) (int64, time.Time) {
	var total int64
	var newest time.Time
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
				if fi.ModTime().After(newest) {
					newest = fi.ModTime()
				}
			}
		}
		return nil
	})
	return total, newest
}

// complete reads the staged parts as one ELF (no concatenated copy) and
// installs its symbol file.
func (s *Store) complete(buildID, dir string, parts int) error {
	mr := &multiReaderAt{}
	defer mr.Close()
	for p := range parts {
		f, err := os.Open(filepath.Join(dir, strconv.Itoa(p)))
		if err != nil {
			return err
		}
		if err := mr.add(f); err != nil {
			return err
		}
	}
	f, err := elf.NewFile(mr)
	if err != nil {
		return fmt.Errorf("%w: %s: not an ELF file: %v", ErrBadUpload, buildID, err)
	}
	return s.install(buildID, f)
}

// install builds, verifies and atomically installs buildID's symbol file
// from files (the binary and, optionally, its debug file). Caller holds
// the key lock.
func (s *Store) install(buildID string, files ...*elf.File) error {
	got, err := ELFBuildID(files[0])
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadUpload, buildID, err)
	}
	if got != buildID {
		return fmt.Errorf("%w: the ELF's build-id %q differs from the key %s", ErrBadUpload, got, buildID)
	}
	tmp, err := os.CreateTemp(s.tmpDir(), "sym-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	var buf bytes.Buffer
	s.builds <- struct{}{} // each build may hold MaxSectionBytes of DWARF
	_, err = BuildWith(&buf, BuildOptions{MaxSectionBytes: s.opts.MaxSectionBytes}, files...)
	<-s.builds
	if err != nil {
		tmp.Close()
		return fmt.Errorf("%w: %s: %v", ErrBadUpload, buildID, err)
	}
	ix, err := OpenIndex(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err == nil {
		err = ix.Verify()
	}
	if err != nil {
		tmp.Close()
		return fmt.Errorf("built symbol file does not verify: %w", err)
	}
	if err := s.reserve(int64(buf.Len())); err != nil {
		tmp.Close()
		return err
	}
	_, err = tmp.Write(buf.Bytes())
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.symPath(buildID))
	}
	if err != nil {
		s.reserve(-int64(buf.Len()))
		return err
	}
	return nil
}

// gcStaging discards uploads idle for StagingTTL (checked at most once a
// minute unless forced).
func (s *Store) gcStaging(force bool) {
	now := s.opts.Now()
	s.mu.Lock()
	if !force && now.Sub(s.lastGC) < time.Minute {
		s.mu.Unlock()
		return
	}
	s.lastGC = now
	s.mu.Unlock()
	ents, err := os.ReadDir(s.stagingDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		id := e.Name()
		unlock := s.lock(id)
		total, newest := dirUsage(filepath.Join(s.stagingDir(), id))
		if total == 0 || now.Sub(newest) > s.opts.StagingTTL {
			s.discardAll(id)
		}
		unlock()
	}
}

// AddFile indexes the ELF at path under its own Build-ID (CLI `laggard
// symbols add`). A stripped binary is joined with its separate debug file
// when one is found in DebugDirs (by Build-ID or .gnu_debuglink).
func (s *Store) AddFile(path string) (buildID string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	id, err := ELFBuildID(f)
	if err != nil {
		return "", err
	}
	if id == "" {
		return "", fmt.Errorf("%s: no GNU build-id note; laggard keys symbols by build-id", path)
	}
	unlock := s.lock(id)
	defer unlock()
	if s.Has(id) {
		return id, nil
	}
	files := []*elf.File{f}
	if f.Section(".symtab") == nil || !hasDWARF(f) {
		if dp := s.debugFile(id, path, f); dp != "" && dp != path {
			if df, err := elf.Open(dp); err == nil {
				defer df.Close()
				if did, _ := ELFBuildID(df); did == id {
					files = append(files, df)
				}
			}
		}
	}
	if err := s.install(id, files...); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return id, nil
}

// FromDebugDirs indexes buildID from a local debug file
// (<dir>/.build-id/ab/cdef….debug) when the server's node has one; false
// when none is found.
func (s *Store) FromDebugDirs(buildID string) (bool, error) {
	if !ValidBuildID(buildID) {
		return false, fmt.Errorf("build-id %q: not lowercase hex", clip(buildID))
	}
	if s.Has(buildID) {
		return true, nil
	}
	p := s.debugFile(buildID, "", nil)
	if p == "" {
		return false, nil
	}
	f, err := elf.Open(p)
	if err != nil {
		return false, fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close()
	unlock := s.lock(buildID)
	defer unlock()
	if s.Has(buildID) {
		return true, nil
	}
	if err := s.install(buildID, f); err != nil {
		return false, fmt.Errorf("%s: %w", p, err)
	}
	return true, nil
}

// debugFile finds the separate debug file of a binary: by Build-ID under
// each debug dir, then by .gnu_debuglink next to the binary, in its
// .debug/ folder, and under each debug dir (the gdb search order).
func (s *Store) debugFile(id, binPath string, f *elf.File) string {
	for _, d := range s.opts.DebugDirs {
		p := filepath.Join(d, ".build-id", id[:2], id[2:]+".debug")
		if fileExists(p) {
			return p
		}
	}
	if f == nil || binPath == "" {
		return ""
	}
	sec := f.Section(".gnu_debuglink")
	if sec == nil {
		return ""
	}
	b, err := sec.Data()
	if err != nil {
		return ""
	}
	name, _, ok := bytes.Cut(b, []byte{0})
	if !ok || len(name) == 0 || bytes.ContainsRune(name, '/') {
		return ""
	}
	dir := filepath.Dir(binPath)
	cands := []string{filepath.Join(dir, string(name)), filepath.Join(dir, ".debug", string(name))}
	if abs, err := filepath.Abs(dir); err == nil {
		for _, d := range s.opts.DebugDirs {
			cands = append(cands, filepath.Join(d, abs, string(name)))
		}
	}
	for _, p := range cands {
		if fileExists(p) {
			return p
		}
	}
	return ""
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// Remove deletes buildID's symbol file (operator clean-up, quota relief).
func (s *Store) Remove(buildID string) error {
	if !ValidBuildID(buildID) {
		return fmt.Errorf("build-id %q: not lowercase hex", clip(buildID))
	}
	unlock := s.lock(buildID)
	defer unlock()
	p := s.symPath(buildID)
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%w %s", ErrNotFound, buildID)
	}
	if err := os.Remove(p); err != nil {
		return err
	}
	s.reserve(-fi.Size())
	s.mu.Lock()
	hooks := slices.Clone(s.hooks)
	s.mu.Unlock()
	for _, h := range hooks {
		h(buildID)
	}
	return nil
}

// multiReaderAt reads consecutive files as one.
type multiReaderAt struct {
	files []*os.File
	offs  []int64 // start offset of each file
	size  int64
}

func (m *multiReaderAt) add(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	m.files = append(m.files, f)
	m.offs = append(m.offs, m.size)
	m.size += fi.Size()
	return nil
}

func (m *multiReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		if pos >= m.size {
			return n, io.EOF
		}
		i := sort.Search(len(m.offs), func(i int) bool { return m.offs[i] > pos }) - 1
		k, err := m.files[i].ReadAt(p[n:min(len(p), n+int(m.partEnd(i)-pos))], pos-m.offs[i])
		n += k
		if err != nil && !errors.Is(err, io.EOF) {
			return n, err
		}
		if k == 0 {
			return n, io.ErrUnexpectedEOF
		}
	}
	return n, nil
}

func (m *multiReaderAt) partEnd(i int) int64 {
	if i+1 < len(m.offs) {
		return m.offs[i+1]
	}
	return m.size
}

func (m *multiReaderAt) Close() error {
	for _, f := range m.files {
		f.Close()
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
