package api_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"flywheel/internal/api"
	"flywheel/internal/httpx"
)

// Connections that announce large bodies and send nothing take no memory for
// them and are closed once the body read timeout passes, with a key or
// without (refused at once, or after waiting for a small body to discard).
func TestStalledBodiesAreBoundedAndClosed(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := newEnv(t, envOpts{bodyTimeout: timeout})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	type stalled struct {
		conn  net.Conn
		keyed bool
	}
	var conns []stalled
	for i := 0; i < 16; i++ {
		c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		auth := ""
		if i < 8 {
			auth = "Authorization: Bearer " + e.alice + "\r\n"
		}
		path := "/v1/preview/training-jobs"
		if i%2 == 1 {
			path = "/v1/preview/sft-training-jobs"
		}
		size := 256 << 20
		if i >= 12 {
			// Small enough that the server would wait to discard it after
			// answering 401: the body timeout ends that wait too.
			size = 1000
		}
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", path, auth, size)
		conns = append(conns, stalled{c, auth != ""})
	}
	time.Sleep(timeout / 2)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 32<<20 {
		t.Errorf("heap grew by %d bytes for 16 stalled 256 MB bodies", grew)
	}
	start := time.Now()
	for i, s := range conns {
		_ = s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		rd := bufio.NewReader(s.conn)
		if s.keyed {
			// The keyed ones were waiting for their body: nothing was
			// answered, the connection is just closed.
			if n, err := io.Copy(io.Discard, rd); err != nil && !isReset(err) {
				t.Errorf("conn %d: %v after %d bytes", i, err, n)
			}
			continue
		}
		res, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatalf("conn %d: %v", i, err)
		}
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("conn %d: status %d, want 401", i, res.StatusCode)
		}
		if _, err := io.Copy(io.Discard, rd); err != nil && !isReset(err) {
			t.Errorf("conn %d: %v", i, err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stalled connections closed after %v (timeout %v)", d, timeout)
	}
	// The server serves on.
	if r := e.do("GET", "/v1/health", "", nil); r.status != 200 {
		t.Fatalf("health after stalls: %d", r.status)
	}
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset")
}

// A slow but live upload goes on past the timeout, as long as bytes keep
// coming; a long handler after its body is read is not cut either.
func TestSlowLiveBodyAndLongResponse(t *testing.T) {
	// Gaps of a quarter of the timeout: a stall of 3/4 of it (a loaded
	// machine under -race) still passes.
	const timeout = time.Second
	slow := api.RegistrarFunc(func(rt *httpx.Routes) {
		rt.In(httpx.OpenAIAPI).HandleFunc("POST /v1/slow-echo", func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			w.WriteHeader(200)
			for i := 0; i < 4; i++ { // a stream outliving the body timeout
				time.Sleep(timeout / 2)
				fmt.Fprintf(w, "%d:", i)
				w.(http.Flusher).Flush()
			}
			_, _ = w.Write(b)
		})
	})
	e := newEnv(t, envOpts{bodyTimeout: timeout, extra: []api.Registrar{slow}})
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < 8; i++ { // 8 x timeout/4: well past the timeout in all
			time.Sleep(timeout / 4)
			fmt.Fprintf(pw, "chunk%d;", i)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", e.url+"/v1/slow-echo", pr)
	req.Header.Set("Authorization", "Bearer "+e.alice)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := "0:1:2:3:chunk0;chunk1;chunk2;chunk3;chunk4;chunk5;chunk6;chunk7;"
	if res.StatusCode != 200 || string(b) != want {
		t.Fatalf("status %d body %q, want %q", res.StatusCode, b, want)
	}
}

// Invented HTTP methods are one "other" label, not a series each.
func TestMetricsMethodLabelBounded(t *testing.T) {
	e := newEnv(t, envOpts{})
	series := func() (n int, body string) {
		r := e.do("GET", "/metrics", "", nil)
		for _, l := range strings.Split(string(r.raw), "\n") {
			if strings.HasPrefix(l, "flywheel_http_requests_total{") || strings.HasPrefix(l, "flywheel_http_request_duration_seconds_count{") {
				n++
			}
		}
		return n, string(r.raw)
	}
	for i := 0; i < 2; i++ { // the "other" series exist after the first
		e.do(fmt.Sprintf("WARMUP%d", i), "/v1/health", "", nil)
		e.do(fmt.Sprintf("WARMUP%d", i), "/v1/nowhere", "", nil)
	}
	n0, _ := series()
	for i := 0; i < 40; i++ {
		e.do(fmt.Sprintf("INVENTED%d", i), "/v1/health", "", nil)
		e.do(fmt.Sprintf("INVENTED%d", i), "/v1/nowhere", "", nil)
	}
	n1, body := series()
	if n1 > n0+2 { // +2: the first /metrics scrape itself (its counter and its histogram)
		t.Errorf("40 invented methods added %d series", n1-n0)
	}
	if strings.Contains(body, "INVENTED") || strings.Contains(body, "WARMUP") {
		t.Errorf("a raw method reached a label")
	}
	if !strings.Contains(body, `method="other"`) {
		t.Errorf("no method=\"other\" series")
	}
}
