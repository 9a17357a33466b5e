package api_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
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

// callBatch is an upsert_batch of n calls, numbered from first (start and
// end of each), whose inputs are about size bytes each, and the calls' ids.
func callBatch(first, n, size int) (map[string]any, []string) {
	var batch []any
	var ids []string
	for i := first; i < first+n; i++ {
		id := fmt.Sprintf("0192f000-0000-7000-8000-%012d", i)
		ids = append(ids, id)
		batch = append(batch,
			map[string]any{"mode": "start", "req": map[string]any{"project_id": "alice/disk", "id": id, "op_name": "op",
				"started_at": "2026-11-27T00:00:00Z", "attributes": map[string]any{}, "inputs": map[string]any{"text": callText(i, size), "i": i}}},
			map[string]any{"mode": "end", "req": map[string]any{"project_id": "alice/disk", "id": id,
				"ended_at": "2026-11-27T00:00:01Z", "output": i, "summary": map[string]any{}}})
	}
	return map[string]any{"batch": batch}, ids
}

// callText is call i's input text: size bytes that do not compress (so
// that they take as much room in the database as they say).
func callText(i, size int) string {
	b := make([]byte, size*3/4)
	r := rand.New(rand.NewPCG(uint64(i), 1))
	for k := range b {
		b[k] = byte(r.Uint32())
	}
	return base64.StdEncoding.EncodeToString(b)
}

// readsBack checks that the calls of callBatch(first, len(ids), size) read
// back identical; post sends alice's requests (nil: e.callStore).
func (e *env) readsBack(post func(path string, body any) resp, first int, ids []string, size int) {
	e.t.Helper()
	if post == nil {
		post = func(path string, body any) resp { return e.callStore(e.alice, path, body) }
	}
	for k, id := range ids {
		c := e.must(post("/call/read", map[string]any{"project_id": "alice/disk", "id": id}), 200)
		call, _ := c.body["call"].(map[string]any)
		in, _ := call["inputs"].(map[string]any)
		if in["text"] != callText(first+k, size) || in["i"] != float64(first+k) || call["output"] != float64(first+k) {
			e.t.Fatalf("call %s: %.300s", id, c.raw)
		}
	}
}

// refusedFull checks that upsert_batch of batch is 507 with a reason saying
// the disk is full and keeps none of the batch's calls ids.
func (e *env) refusedFull(batch map[string]any, ids []string) {
	e.t.Helper()
	r := e.callStore(e.alice, "/call/upsert_batch", batch)
	if r.status != 507 || !strings.Contains(fmt.Sprint(r.body["reason"]), "disk is full") {
		e.t.Fatalf("upsert_batch on a full disk: %d %.300s", r.status, r.raw)
	}
	e.noneKept(ids)
}

// noneKept checks that none of the calls ids reads back (a missing call
// reads {"call": null}, as Weave answers).
func (e *env) noneKept(ids []string) {
	e.t.Helper()
	for _, id := range ids {
		if r := e.callStore(e.alice, "/call/read", map[string]any{"project_id": "alice/disk", "id": id}); r.status != 200 || r.body["call"] != nil {
			e.t.Fatalf("call %s of the failed batch reads %d %.200s, want {\"call\": null} (nothing of it kept)", id, r.status, r.raw)
		}
	}
}

// With the call store's SQLite file on a full disk, an upsert_batch fails
// with 507 and a reason saying the disk is full, keeps none of the batch's
// calls, stored calls still read back, and once space returns the same
// batch is stored whole.
func TestFullDiskCallStore(t *testing.T) {
	disk := fullDisk(t, "8m")
	e := newEnv(t, envOpts{dataDir: disk, wandb: true}) // the SQLite file (flywheel.db) is on the tmpfs
	before, beforeIDs := callBatch(0, 1, 100)
	e.must(e.callStore(e.alice, "/call/upsert_batch", before), 200)
	filler := fill(t, disk)

	// 16 calls of 64 KiB: more than SQLite's write-ahead log already holds
	batch, ids := callBatch(100, 16, 64<<10)
	e.refusedFull(batch, ids)
	e.readsBack(nil, 0, beforeIDs, 100)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	e.must(e.callStore(e.alice, "/call/upsert_batch", batch), 200)
	e.readsBack(nil, 100, ids, 64<<10)
}

// pgServer is a PostgreSQL server a test runs.
type pgServer struct {
	url  string
	ctl  func(args ...string) error // pg_ctl as the postgres user, -D the data dir
	data string
}

// startPostgres runs a PostgreSQL server (as the postgres user: PostgreSQL
// refuses root) whose data dir is data/pg and whose write-ahead log is wal
// ("": a folder of its own off data's filesystem), on a free loopback port.
// The test is skipped, saying why, where PostgreSQL is not installed.
func startPostgres(t *testing.T, data, wal string) *pgServer {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		t.Skip("PostgreSQL's server full disk needs PostgreSQL installed (/usr/lib/postgresql/*/bin)")
	}
	slices.Sort(bins)
	bin := filepath.Dir(bins[len(bins)-1])
	aux, err := os.MkdirTemp("", "pg-aux-") // socket and WAL, reachable by the postgres user
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(aux) })
	if wal == "" {
		wal = aux + "/wal"
	}
	for _, d := range []string{aux, data, filepath.Dir(wal)} {
		if out, err := exec.Command("chown", "postgres", d).CombinedOutput(); err != nil {
			t.Skipf("no postgres user to run PostgreSQL as: %v %s", err, out)
		}
	}
	for _, dir := range []string{data, wal} {
		for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o711); err != nil { // t.TempDir's folders are 0700
				t.Fatal(err)
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	asPostgres := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("runuser", append([]string{"-u", "postgres", "--"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	asPostgres(bin+"/initdb", "-D", data+"/pg", "--waldir", wal, "-A", "trust", "-U", "postgres", "-E", "UTF8")
	pg := &pgServer{url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), data: data + "/pg"}
	pg.ctl = func(args ...string) error {
		args = append([]string{"-u", "postgres", "--", bin + "/pg_ctl", "-D", pg.data, "-l", aux + "/server.log", "-w", "-o",
			fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off", port, aux)}, args...)
		if out, err := exec.Command("runuser", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("pg_ctl %v: %w\n%s", args[len(args)-1], err, out)
		}
		return nil
	}
	if err := pg.ctl("start"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pg.ctl("-m", "immediate", "stop")
		if t.Failed() {
			b, _ := os.ReadFile(aux + "/server.log")
			t.Logf("PostgreSQL's log:\n%s", b)
		}
	})
	return pg
}

// With PostgreSQL's data dir on a full disk, the server cannot write what a
// large statement needs (disk_full, SQLSTATE 53100): an upsert_batch of 4
// MiB is 507 saying the disk is full and keeps none of the batch, reads
// still work, nothing stored before is lost, and once space returns the
// same batch is stored whole, with no restart of anything.
func TestFullDiskPostgresServer(t *testing.T) {
	disk := fullDisk(t, "64m")
	pg := startPostgres(t, disk, "")
	e := newEnv(t, envOpts{database: pg.url, wandb: true})
	before, beforeIDs := callBatch(0, 4, 1<<10)
	e.must(e.callStore(e.alice, "/call/upsert_batch", before), 200)
	model := e.createModel("m")
	filler := fill(t, disk)

	batch, ids := callBatch(100, 64, 64<<10)
	e.refusedFull(batch, ids)
	e.readsBack(nil, 0, beforeIDs, 1<<10)
	e.must(e.do("GET", "/v1/preview/models/"+model, e.alice, nil), 200)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	e.must(e.callStore(e.alice, "/call/upsert_batch", batch), 200)
	e.readsBack(nil, 100, ids, 64<<10)
	e.readsBack(nil, 0, beforeIDs, 1<<10)
	r := e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, rlBody(model, 2)), 200)
	if job := e.waitJob(e.alice, r.body["id"].(string)); job["status"] != "COMPLETED" {
		t.Fatalf("job once space returned: %v", job)
	}
}

// With PostgreSQL's write-ahead log on a full disk the server cannot log a
// write: it PANICs and stops. Every request meanwhile fails clearly (507 for
// the write that found the disk full, 503 while the server is down, never a
// 500); once space returns and the server is started again, everything
// that was answered 200 reads back identical and writes work again.
func TestFullDiskPostgresWAL(t *testing.T) {
	disk := fullDisk(t, "24m") // the one 16 MiB WAL segment initdb makes, and no room for another
	pg := startPostgres(t, t.TempDir(), disk+"/wal")
	e := newEnv(t, envOpts{database: pg.url, wandb: true})
	var stored [][]string
	var failed []string
	first, statuses := 0, map[int]int{}
	for len(stored) < 100 {
		batch, ids := callBatch(first, 16, 64<<10)
		r := e.callStore(e.alice, "/call/upsert_batch", batch)
		statuses[r.status]++
		if r.status != 200 {
			if r.status != 507 && r.status != 503 {
				t.Fatalf("upsert_batch as the WAL filled: %d %.300s", r.status, r.raw)
			}
			failed = ids
			break
		}
		stored = append(stored, ids)
		first += 16
	}
	if len(stored) == 100 {
		t.Fatalf("100 batches of 1 MiB did not fill a 24 MiB WAL disk")
	}
	for range 3 { // the server is down (or refuses to log): no 500
		r := e.callStore(e.alice, "/call/read", map[string]any{"project_id": "alice/disk", "id": stored[0][0]})
		statuses[r.status]++
		if r.status != 503 && r.status != 200 {
			t.Fatalf("read while the WAL disk is full: %d %.300s", r.status, r.raw)
		}
	}
	t.Logf("statuses as the WAL filled: %v (%d batches stored)", statuses, len(stored))

	// Space returns. A client retries a 503 (the server recovering, a
	// pooled connection the crash closed) as during any database restart;
	// the operator starts the server if it stopped.
	if out, err := exec.Command("mount", "-o", "remount,size=256m", disk).CombinedOutput(); err != nil {
		t.Fatalf("growing the tmpfs: %v %s", err, out)
	}
	starts := 0
	post := func(path string, body any) resp {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			r := e.callStore(e.alice, path, body)
			if r.status != 503 || time.Now().After(deadline) {
				return r
			}
			if pg.ctl("status") != nil {
				starts++
				if err := pg.ctl("start"); err != nil {
					t.Log(err)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for i, ids := range stored {
		e.readsBack(post, 16*i, ids, 64<<10)
	}
	// the batch that failed was kept whole or not at all
	kept := 0
	for _, id := range failed {
		if r := e.must(post("/call/read", map[string]any{"project_id": "alice/disk", "id": id}), 200); r.body["call"] != nil {
			kept++
		}
	}
	if kept != 0 && kept != len(failed) {
		t.Fatalf("%d of the failed batch's %d calls kept", kept, len(failed))
	}
	batch, ids := callBatch(first+16, 16, 64<<10)
	e.must(post("/call/upsert_batch", batch), 200)
	e.readsBack(post, first+16, ids, 64<<10)
	t.Logf("the server was started again %d times after space returned", starts)
}
