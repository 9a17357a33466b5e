package app_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"flywheel/internal/app"
	"flywheel/internal/jobs"
)

// The http.Server of Serve times out connections that stall: headers that
// never finish, an idle kept-alive connection, and a body that never comes.
func TestServeTimesOutStalledConnections(t *testing.T) {
	const key = "fw_app_test_key_0123456789"
	const timeout = 300 * time.Millisecond
	a := newApp(t, app.Config{DataDir: t.TempDir(), BootstrapKey: key, Workers: jobs.DefaultWorkers,
		ReadHeaderTimeout: timeout, IdleTimeout: timeout, BodyReadTimeout: timeout})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	defer func() {
		cancel()
		<-served
		a.Close()
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	closedSoon := func(name string, rd io.Reader, start time.Time) {
		t.Helper()
		_, _ = io.Copy(io.Discard, rd) // returns at EOF (or reset)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: connection held for %v", name, d)
		}
	}

	start := time.Now()
	headers := dial()
	fmt.Fprint(headers, "GET /v1/health HTTP/1.1\r\nHost: x\r\n") // never finished
	body := dial()
	fmt.Fprintf(body, "POST /v1/preview/training-jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", key, 256<<20)
	idle := dial()
	fmt.Fprint(idle, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
	idleRd := bufio.NewReader(idle)
	res, err := http.ReadResponse(idleRd, nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("health: %v %v", res, err)
	}
	_, _ = io.Copy(io.Discard, res.Body)

	closedSoon("unfinished headers", headers, start)
	closedSoon("stalled body", body, start)
	closedSoon("idle keep-alive", idleRd, start)
}
