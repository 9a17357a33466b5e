package safetensors

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Weights overwritten under a running server.
//
// A file's F32 tensors are used in place, in its shared mapping. If another
// process truncates the file (truncate, cp over it, a download writing in
// place), reading a page past the new end raises SIGBUS, which Go cannot
// recover from: the process dies. To survive it, Open takes a read lease
// (fcntl F_SETLEASE) on the mapped file. Whoever then opens the file for
// writing or truncates it is held by the kernel (for up to
// /proc/sys/fs/lease-break-time seconds, 45 by default) while this process
// is told with SIGIO; the guard then copies the mapped bytes into anonymous
// shared memory (a memfd) and maps that over the very same addresses
// (MAP_FIXED, atomic for readers: every page reads the same bytes before
// and after), and only then lets the writer go. The loaded model keeps
// serving the weights it loaded, now from memory, and a warning says to
// restart to load the new ones. Replacing the file by rename (a new inode)
// needs none of this: the mapping keeps the old inode.
//
// A lease needs the file to be owned by this user (or CAP_LEASE) and not
// open for writing, and a file system that supports leases; when it cannot
// be taken the file is mapped as before, unguarded (docs/security.md).

var guards struct {
	once  sync.Once
	mu    sync.Mutex
	files map[*File]bool
}

// Guarded reports whether f holds a lease that protects its mapping
// against truncation (see above).
func (f *File) Guarded() bool {
	f.gmu.Lock()
	defer f.gmu.Unlock()
	return f.lease != nil
}

// guard takes a read lease on fd, f's mapped file; it keeps fd open (the
// lease lives with it) and returns true, or returns false and leaves fd to
// the caller.
func (f *File) guard(fd *os.File) bool {
	guards.once.Do(func() {
		guards.files = map[*File]bool{}
		ch := make(chan os.Signal, 16)
		signal.Notify(ch, syscall.SIGIO)
		go func() {
			for range ch {
				breakLeases()
			}
		}()
	})
	if _, err := unix.FcntlInt(fd.Fd(), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		return false
	}
	f.lease = fd
	guards.mu.Lock()
	guards.files[f] = true
	guards.mu.Unlock()
	return true
}

// breakLeases detaches every guarded file whose lease is being broken.
func breakLeases() {
	guards.mu.Lock()
	files := make([]*File, 0, len(guards.files))
	for f := range guards.files {
		files = append(files, f)
	}
	guards.mu.Unlock()
	for _, f := range files {
		size, err := f.detachIfBreaking()
		if size == 0 && err == nil {
			continue
		}
		if err != nil {
			slog.Error("safetensors: weights file changed on disk and its mapping could not be moved to memory; the process may crash",
				"file", filepath.Base(f.Path), "err", err)
		} else {
			slog.Warn("safetensors: weights file is being written on disk; the loaded weights were moved to memory and keep serving; restart to load the new weights",
				"file", filepath.Base(f.Path), "bytes", size)
		}
	}
}

// detachIfBreaking moves f's mapping into anonymous shared memory at the
// same addresses when its lease is being broken, then releases the lease so
// the writer proceeds. It returns the bytes moved, 0 when there was nothing
// to do.
func (f *File) detachIfBreaking() (int, error) {
	f.gmu.Lock()
	defer f.gmu.Unlock()
	if f.lease == nil {
		return 0, nil
	}
	if t, err := unix.FcntlInt(f.lease.Fd(), unix.F_GETLEASE, 0); err == nil && t == unix.F_RDLCK {
		return 0, nil // not this file's lease
	}
	defer f.unguardLocked()
	if len(f.mapped) == 0 {
		return 0, nil
	}
	return len(f.mapped), f.moveToMemory()
}

// moveToMemory maps a memfd holding a copy of f's bytes over f's mapping.
func (f *File) moveToMemory() error {
	mfd, err := unix.MemfdCreate("safetensors:"+filepath.Base(f.Path), unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("memfd: %w", err)
	}
	mem := os.NewFile(uintptr(mfd), "memfd")
	defer mem.Close() // the new mapping keeps the memory
	if _, err := mem.Write(f.mapped); err != nil {
		return fmt.Errorf("copy to memory: %w", err)
	}
	addr := uintptr(unsafe.Pointer(&f.mapped[0]))
	r, _, errno := unix.Syscall6(unix.SYS_MMAP, addr, uintptr(len(f.mapped)), unix.PROT_READ,
		unix.MAP_SHARED|unix.MAP_FIXED, uintptr(mfd), 0)
	if errno != 0 {
		return fmt.Errorf("map memory: %w", errno)
	}
	if r != addr {
		return fmt.Errorf("map memory: mapped at %#x, not %#x", r, addr)
	}
	return nil
}

// unguard releases f's lease (at Close).
func (f *File) unguard() {
	f.gmu.Lock()
	defer f.gmu.Unlock()
	f.unguardLocked()
}

func (f *File) unguardLocked() {
	if f.lease == nil {
		return
	}
	_, _ = unix.FcntlInt(f.lease.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
	f.lease.Close()
	f.lease = nil
	guards.mu.Lock()
	delete(guards.files, f)
	guards.mu.Unlock()
}
