package api_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fullDisk mounts a tmpfs of size bytes at a new folder (root only; the test
// is skipped, saying why, where the machine cannot mount) and returns it.
func fullDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("a full disk needs a small filesystem: mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes a file until the filesystem is full and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return path
		}
	}
}

// entries lists a folder's names (none when it does not exist).
func entries(dir string) []string {
	es, _ := os.ReadDir(dir)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// On a full data disk an upload and a job submission fail with 507
// insufficient_storage, leave no file behind, and succeed once space
// returns (the job then runs and publishes its checkpoint).
func TestFullDisk(t *testing.T) {
	disk := fullDisk(t, "8m")
	e := newEnv(t, envOpts{dataDir: disk, database: filepath.Join(t.TempDir(), "flywheel.db")})
	id := e.createModel("m")
	filesBefore, requestsBefore := entries(filepath.Join(disk, "files")), entries(filepath.Join(disk, "requests"))
	filler := fill(t, disk)

	data := strings.Repeat(`{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}`+"\n", 2000)
	for name, r := range map[string]resp{
		"upload": upload(t, e, e.alice, "train.jsonl", data),
		"job":    e.do("POST", "/v1/preview/training-jobs", e.alice, rlBody(id, 200)),
	} {
		if r.status != 507 || r.errCode() != "insufficient_storage" || !strings.Contains(string(r.raw), "disk is full") {
			t.Fatalf("%s on a full disk: %d %s", name, r.status, r.raw)
		}
	}
	if got := entries(filepath.Join(disk, "files")); len(got) != len(filesBefore) {
		t.Errorf("files left by the failed upload: %v", got)
	}
	if got := entries(filepath.Join(disk, "requests")); len(got) != len(requestsBefore) {
		t.Errorf("request bodies left by the failed submission: %v", got)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	e.must(upload(t, e, e.alice, "train.jsonl", data), 200)

	// The disk fills while a job trains: writing its checkpoint fails, the
	// job FAILS saying why, and no step (nor a work folder) is left.
	e.trainer.gate = make(chan struct{})
	r := e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, rlBody(id, 2)), 200)
	e.waitStatus(e.alice, r.body["id"].(string), "RUNNING")
	filler = fill(t, disk)
	close(e.trainer.gate)
	job := e.waitJob(e.alice, r.body["id"].(string))
	if job["status"] != "FAILED" || !strings.Contains(job["error_message"].(string), "no space left on device") {
		t.Fatalf("job on a disk that filled: %v", job)
	}
	if got := entries(filepath.Join(disk, "checkpoints", id)); strings.Join(got, ",") != "step-0" {
		t.Errorf("the model's folder after the failed publish: %v", got)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	e.trainer.gate = nil
	r = e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, rlBody(id, 2)), 200)
	if job := e.waitJob(e.alice, r.body["id"].(string)); job["status"] != "COMPLETED" {
		t.Fatalf("job after space returned: %v", job)
	}
	if got := entries(filepath.Join(disk, "checkpoints", id)); strings.Join(got, ",") != "step-0,step-1" {
		t.Errorf("the model's folder once space returned: %v", got)
	}
}
