package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The bytes the database's rows point at (request bodies, uploads,
// checkpoint and learner-version folders) are files under the data dir, at
// the absolute paths Layout names; the rows store those paths. There is no
// storage abstraction in front of them: the engine memory-maps adapters
// from a checkpoint folder, the trainer reads an upload and writes its
// work folder by path, and the dashboard reads a checkpoint's
// trajectories, so every reader needs a local file. With several nodes the
// data dir is a filesystem every node mounts at the same path (NFS,
// CephFS, EFS). The functions below are the few file operations whose
// rules matter to the rows' invariants: publishing a complete folder in
// one step, emptying a work folder, and sweeping crash leftovers.
// Single files are written with atomicfile (mode FileMode).

// EmptyDir makes path an empty folder (DirMode), removing what it held: a
// work folder that a writer fills by path (the trainer, the step-0
// adapter).
func EmptyDir(path string) error {
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("empty %s: %w", path, err)
	}
	return os.MkdirAll(path, DirMode)
}

// PublishDir makes the complete folder src the folder dst in one step
// (a rename), replacing a stale dst (left by a crash between a publish and
// its row's commit: a folder whose row exists is never replaced).
func PublishDir(src, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("remove stale folder: %w", err)
	}
	return os.Rename(src, dst)
}

// ListDir lists the entries of folder dir (none when it is missing).
func ListDir(dir string) ([]fs.DirEntry, error) {
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

// OldFile is Old for the file at path.
func OldFile(path string) bool {
	info, err := os.Stat(path)
	return err == nil && time.Since(info.ModTime()) > SharedSweepAge
}

// Sweep removes, at start-up, the entries of folder dir that drop selects
// (by name): crash leftovers. On a data dir shared with other nodes
// (shared) only entries older than SharedSweepAge are considered, as a
// recent one may be another node's work in progress. It returns the names
// removed and the first removal error; an unreadable dir sweeps nothing.
func Sweep(dir string, shared bool, drop func(name string) bool) (removed []string, err error) {
	entries, lerr := ListDir(dir)
	if lerr != nil {
		return nil, nil
	}
	for _, e := range entries {
		if shared && !Old(e) || !drop(e.Name()) {
			continue
		}
		if rerr := os.RemoveAll(filepath.Join(dir, e.Name())); rerr != nil {
			if err == nil {
				err = fmt.Errorf("remove %s: %w", e.Name(), rerr)
			}
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, err
}
