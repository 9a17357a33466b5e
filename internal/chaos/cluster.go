// Package chaos is a soak harness: a cluster of `flywheel serve` processes
// (the built binary) on one PostgreSQL database and one shared data dir runs
// mixed load (RL client loops, streaming chat, call-store ingestion and
// reads) while faults are injected on a seeded schedule (kill -9 and
// restart, SIGTERM, PostgreSQL restarts, a node paused past its lease, a
// client leaving mid-stream); at the end it checks invariants and reports.
// cmd/flywheel-soak runs it; .ci/soak.sh runs a short soak in CI.
package chaos

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// node is one `flywheel serve` process of the cluster.
type node struct {
	name string
	addr string // loopback host:port, the same across restarts
	bin  string
	args []string
	env  []string
	logf *os.File

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
	peakKB int64 // largest VmRSS seen
}

func (n *node) url() string { return "http://" + n.addr }

// start runs the process and waits for /v1/health.
func (n *node) start() error {
	n.mu.Lock()
	cmd := exec.Command(n.bin, append([]string{"serve", "--addr", n.addr, "--node-id", n.name}, n.args...)...)
	cmd.Env = n.env
	cmd.Stdout, cmd.Stderr = n.logf, n.logf
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		return fmt.Errorf("%s: %w", n.name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	n.cmd, n.exited, n.paused = cmd, exited, false
	n.mu.Unlock()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if res, err := http.Get(n.url() + "/v1/health"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited at start (see %s)", n.name, n.logf.Name())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not become healthy in 90 s (see %s)", n.name, n.logf.Name())
}

// signal sends sig to the running process (none: no-op).
func (n *node) signal(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && n.cmd.Process != nil {
		n.cmd.Process.Signal(sig)
		switch sig {
		case syscall.SIGSTOP:
			n.paused = true
		case syscall.SIGCONT:
			n.paused = false
		}
	}
}

// stop sends sig and waits for the exit (SIGKILL after timeout).
func (n *node) stop(sig syscall.Signal, timeout time.Duration) {
	n.signal(syscall.SIGCONT)
	n.signal(sig)
	n.mu.Lock()
	exited := n.exited
	n.mu.Unlock()
	if exited == nil {
		return
	}
	select {
	case <-exited:
	case <-time.After(timeout):
		n.signal(syscall.SIGKILL)
		<-exited
	}
}

// sampleRSS records the process's resident memory.
func (n *node) sampleRSS() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			n.peakKB = max(n.peakKB, kb)
		}
	}
}

// freeAddr picks a free loopback port.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// runShell runs a shell command line (the PostgreSQL restart command).
func runShell(line string) error {
	cmd := exec.Command("bash", "-c", line)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", line, err, out.String())
	}
	return nil
}
