// Package atomicfile writes files so that readers, and the process after a
// crash, see either the old content or the complete new content, never a
// part: the bytes go to a temporary file in the destination's folder, which
// is then renamed over the destination. It is the one place in flywheel that
// writes a file this way.
//
// Temporary names start with TempPrefix, so start-up sweeps and directory
// listings (which skip hidden entries) recognise leftovers of a crash.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// TempPrefix starts the name of every temporary file (hidden, and
// recognisable as a crash's leftover).
const TempPrefix = ".tmp-"

// File is a file being written: a temporary file beside its destination
// that Commit publishes and Abort drops. Not safe for concurrent use.
type File struct {
	f    *os.File
	path string
	perm fs.FileMode
	done bool
}

// Create opens a temporary file beside path (creating path's folder when
// missing) for the content of path, which Commit will give mode perm.
func Create(path string, perm fs.FileMode) (*File, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, TempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &File{f: f, path: path, perm: perm}, nil
}

// Write appends b to the temporary file.
func (f *File) Write(b []byte) (int, error) {
	n, err := f.f.Write(b)
	if err != nil {
		err = fmt.Errorf("write %s: %w", f.path, err)
	}
	return n, err
}

// TempName is the temporary file's path, for reading back what was written
// before deciding to commit.
func (f *File) TempName() string { return f.f.Name() }

// Commit flushes the content to disk, then renames the temporary file over
// the destination: the new content survives a power loss once Commit
// returns. On error the temporary file is removed and the destination is
// unchanged.
func (f *File) Commit() error { return f.commit(true) }

// CommitUnsynced is Commit without the flush to disk: the file survives a
// crash of the process but not necessarily a power loss (like a commit of
// the database, which runs with synchronous=NORMAL). For large bodies on a
// request path, where an fsync would cost more than the guarantee is worth.
func (f *File) CommitUnsynced() error { return f.commit(false) }

func (f *File) commit(sync bool) error {
	if f.done {
		return fmt.Errorf("write %s: %w", f.path, errors.New("already committed or aborted"))
	}
	f.done = true
	tmp := f.f.Name()
	err := f.f.Chmod(f.perm)
	if err == nil && sync {
		err = f.f.Sync()
	}
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, f.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	return nil
}

// Abort closes and removes the temporary file, leaving the destination as
// it was. It does nothing after Commit, so it can be deferred.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.f.Close()
	os.Remove(f.f.Name())
}

// WriteFile writes data to path with mode perm through a temporary file,
// flushed to disk and renamed into place.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Commit()
}
