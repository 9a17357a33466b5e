package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"flywheel/internal/atomicfile"
)

// Storage keeps the bytes the database's rows point at: request bodies and
// uploads (one object each) and checkpoints (one folder each), at the
// absolute paths Layout names under the data dir; the rows store those
// paths. The request path, the upload and download routes, the job queue
// and the checkpoint lifecycle go through it, so another kind of storage
// replaces one implementation.
//
// SharedFS is the implementation: the data dir itself, on a filesystem every
// node mounts at the same path (one node's local disk, or NFS, CephFS, EFS
// for several). An object store would implement it over a local cache,
// since some readers need local files: the engine memory-maps adapters from
// a checkpoint folder, the trainer reads an upload and writes a work folder
// by path.
type Storage interface {
	// Create starts the object at path: what is written goes to a
	// temporary object, published whole by Commit (durably) or
	// CommitUnsynced, or dropped by Abort (a no-op after a commit).
	Create(path string) (Object, error)
	// Open reads the object at path and returns its size; an error wraps
	// fs.ErrNotExist when it is missing.
	Open(path string) (io.ReadCloser, int64, error)
	// Remove removes the object or folder at path; a missing one is not an
	// error.
	Remove(path string) error
	// EmptyDir makes path an empty folder, removing what it held: a work
	// folder that a writer fills by path (the trainer, the step-0 adapter).
	EmptyDir(path string) error
	// PublishDir makes the complete folder src the folder dst in one step,
	// replacing a stale dst (left by a crash between a publish and its
	// row's commit: a folder whose row exists is never replaced).
	PublishDir(src, dst string) error
	// List lists the entries of folder dir (none when it is missing).
	List(dir string) ([]fs.DirEntry, error)
}

// Object is an object being written (see Storage.Create).
type Object interface {
	io.Writer
	// TempName is a local file holding what was written so far, for
	// checks that read it back before the commit.
	TempName() string
	Commit() error
	CommitUnsynced() error
	Abort()
}

// SharedFS is the Storage of a data dir on a filesystem: objects are
// written to a temporary file and renamed into place (atomicfile), folders
// are published by rename, files are FileMode and folders DirMode.
type SharedFS struct{}

var _ Storage = SharedFS{}

// Create implements Storage.
func (SharedFS) Create(path string) (Object, error) {
	f, err := atomicfile.Create(path, FileMode)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Open implements Storage.
func (SharedFS) Open(path string) (io.ReadCloser, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// Remove implements Storage.
func (SharedFS) Remove(path string) error {
	if err := os.RemoveAll(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// EmptyDir implements Storage.
func (SharedFS) EmptyDir(path string) error {
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("empty %s: %w", path, err)
	}
	return os.MkdirAll(path, DirMode)
}

// PublishDir implements Storage.
func (SharedFS) PublishDir(src, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("remove stale folder: %w", err)
	}
	return os.Rename(src, dst)
}

// List implements Storage.
func (SharedFS) List(dir string) ([]fs.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return entries, err
}

// SharedSweepAge is how old a leftover must be before a node of a shared
// data dir removes it at start-up: older than any request body or upload
// another node may still be writing.
const SharedSweepAge = time.Hour

// Old reports whether the entry was last modified more than
// SharedSweepAge ago.
func Old(e fs.DirEntry) bool {
	info, err := e.Info()
	return err == nil && time.Since(info.ModTime()) > SharedSweepAge
}

// Sweep removes, at start-up, the entries of folder dir that drop selects
// (by name): crash leftovers. On a data dir shared with other nodes
// (shared) only entries older than SharedSweepAge are considered, as a
// recent one may be another node's work in progress. It returns the names
// removed and the first removal error; an unreadable dir sweeps nothing.
func Sweep(s Storage, dir string, shared bool, drop func(name string) bool) (removed []string, err error) {
	entries, lerr := s.List(dir)
	if lerr != nil {
		return nil, nil
	}
	for _, e := range entries {
		if shared && !Old(e) || !drop(e.Name()) {
			continue
		}
		if rerr := s.Remove(filepath.Join(dir, e.Name())); rerr != nil {
			if err == nil {
				err = fmt.Errorf("remove %s: %w", e.Name(), rerr)
			}
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, err
}

// ReadAll reads the whole object at path from s.
func ReadAll(s Storage, path string) ([]byte, error) {
	r, size, err := s.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var b bytes.Buffer
	b.Grow(int(size) + bytes.MinRead)
	_, err = b.ReadFrom(r)
	return b.Bytes(), err
}
