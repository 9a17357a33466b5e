package safetensors

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A mapped file truncated or overwritten in place (by another process, or
// by this one) does not take the process down: the lease break moves the
// mapping to memory first, and the F32 view reads the loaded values.
func TestTruncatedWhileMapped(t *testing.T) {
	for _, how := range []string{"truncate in process", "cp over it"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "model.safetensors")
			vals := make([]float32, 1<<16) // several pages
			for i := range vals {
				vals[i] = float32(i)
			}
			if err := WriteFile(path, []WriteTensor{{Name: "w", Shape: []int{len(vals)}, Data: vals}}, nil); err != nil {
				t.Fatal(err)
			}
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if !f.Guarded() {
				t.Skip("no file lease on this file system")
			}
			view, err := f.Tensor("w").Float32()
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				switch how {
				case "truncate in process":
					done <- os.Truncate(path, 0)
				default:
					other := filepath.Join(dir, "other")
					os.WriteFile(other, []byte("short"), 0o644)
					done <- exec.Command("cp", other, path).Run()
				}
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the writer was held for 20 s: the lease was not released")
			}
			if st, _ := os.Stat(path); st.Size() >= 8 && how == "truncate in process" {
				t.Fatalf("file not truncated: %d bytes", st.Size())
			}
			for i := range vals { // would be SIGBUS without the guard
				if view[i] != vals[i] {
					t.Fatalf("value %d = %v after the truncate, want %v", i, view[i], vals[i])
				}
			}
			if f.Guarded() {
				t.Error("still guarded after the lease break")
			}
		})
	}
}
