package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// callStore posts a call-store request with Basic auth, as the Weave SDK does.
func (e *env) callStore(key, path string, body any) resp {
	e.t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", e.url+path, bytes.NewReader(data))
	req.SetBasicAuth("api", key)
	req.Header.Set("Content-Type", "application/json")
	return e.send(req)
}

// callBatch is an upsert_batch of n calls (start and end of each) whose
// inputs are about size bytes each, and the calls' ids.
func callBatch(n, size int) (map[string]any, []string) {
	var batch []any
	var ids []string
	for i := range n {
		id := fmt.Sprintf("0192f000-0000-7000-8000-%012d", i)
		ids = append(ids, id)
		batch = append(batch,
			map[string]any{"mode": "start", "req": map[string]any{"project_id": "alice/disk", "id": id, "op_name": "op",
				"started_at": "2026-11-27T00:00:00Z", "attributes": map[string]any{}, "inputs": map[string]any{"text": strings.Repeat("x", size), "i": i}}},
			map[string]any{"mode": "end", "req": map[string]any{"project_id": "alice/disk", "id": id,
				"ended_at": "2026-11-27T00:00:01Z", "output": i, "summary": map[string]any{}}})
	}
	return map[string]any{"batch": batch}, ids
}

// With the call store's SQLite file on a full disk, an upsert_batch fails
// with 507 and a reason saying the disk is full, keeps none of the batch's
// calls (each reads as missing: {"call": null}, as Weave answers), stored calls still read back, and once space
// returns the same batch is stored whole.
func TestFullDiskCallStore(t *testing.T) {
	disk := fullDisk(t, "8m")
	e := newEnv(t, envOpts{dataDir: disk, wandb: true}) // the SQLite file (flywheel.db) is on the tmpfs
	first := map[string]any{"batch": []any{map[string]any{"mode": "start", "req": map[string]any{"project_id": "alice/disk",
		"id": "0192f000-0000-7000-8000-999999999999", "op_name": "op", "started_at": "2026-11-27T00:00:00Z", "attributes": map[string]any{}, "inputs": map[string]any{"a": 1}}}}}
	e.must(e.callStore(e.alice, "/call/upsert_batch", first), 200)
	filler := fill(t, disk)

	// 16 calls of 64 KiB: more than SQLite's write-ahead log already holds
	batch, ids := callBatch(16, 64<<10)
	r := e.callStore(e.alice, "/call/upsert_batch", batch)
	if r.status != 507 || !strings.Contains(fmt.Sprint(r.body["reason"]), "disk is full") {
		t.Fatalf("upsert_batch on a full disk: %d %.300s", r.status, r.raw)
	}
	for _, id := range ids {
		if r := e.callStore(e.alice, "/call/read", map[string]any{"project_id": "alice/disk", "id": id}); r.status != 200 || r.body["call"] != nil {
			t.Fatalf("call %s of the failed batch reads %d %.200s, want {\"call\": null} (nothing of it kept)", id, r.status, r.raw)
		}
	}
	e.must(e.callStore(e.alice, "/call/read", map[string]any{"project_id": "alice/disk", "id": "0192f000-0000-7000-8000-999999999999"}), 200)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	e.must(e.callStore(e.alice, "/call/upsert_batch", batch), 200)
	for i, id := range ids {
		c := e.must(e.callStore(e.alice, "/call/read", map[string]any{"project_id": "alice/disk", "id": id}), 200)
		call, _ := c.body["call"].(map[string]any)
		in, _ := call["inputs"].(map[string]any)
		if in["text"] != strings.Repeat("x", 64<<10) || in["i"] != float64(i) || call["output"] != float64(i) {
			t.Fatalf("call %s once space returned: %.300s", id, c.raw)
		}
	}
}
