"""`flywheel serve` on a free loopback port with a temporary data dir, for the
Python client checks (clients/weave-python, clients/openai-python).

The server writes its admin key at first start (FLYWHEEL_BOOTSTRAP_API_KEY is
cleared); FLYWHEEL_DATABASE, when set in the environment, puts the store on
that database (PostgreSQL in CI). The server dies with the check however the
check ends (PR_SET_PDEATHSIG) and its data dir is removed by stop().
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Server:
    """`flywheel serve` on a free loopback port with a temporary data dir.

    key: the bootstrap API key (FLYWHEEL_BOOTSTRAP_API_KEY), or None to let the
    server write one (read back as admin_key). extra: more `serve` flags."""

    def __init__(self, binary: str, *extra: str, key: str | None = None, log_level: str = "warn") -> None:
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="flywheel-pycheck-")
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(self.dir, "server.log")
        self.log = open(self.log_path, "wb")
        self.args = [binary, "serve", "--addr", f"127.0.0.1:{self.port}", "--data-dir", self.data,
                     "--log-level", log_level, *extra]
        self.env = {**os.environ, "FLYWHEEL_BOOTSTRAP_API_KEY": key or ""}
        self.key_file = None if key else os.path.join(self.data, "admin-api-key")
        self.start()
        self.wait_healthy()
        self.admin_key = key
        if self.key_file:
            with open(self.key_file) as f:
                self.admin_key = f.read().strip()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent,
        )

    def kill9_and_restart(self) -> None:
        """kill -9 the server, then start it again on the same port and data dir."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=15)
        self.log.write(b"--- kill -9 and restart ---\n")
        self.start()
        self.wait_healthy()

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"flywheel serve exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.base + "/v1/health", timeout=2) as r:
                    if r.status == 200 and (self.key_file is None or os.path.exists(self.key_file)):
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError("flywheel serve did not become healthy in 60 s:\n" + self.tail())

    def get(self, path: str) -> tuple[int, object]:
        """GET with the admin key as a Bearer token."""
        req = urllib.request.Request(self.base + path, headers={"Authorization": f"Bearer {self.admin_key}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def create_key(self, user: str) -> str:
        """A key of a new user (its own entity), made with `flywheel keys create`."""
        return subprocess.run([self.binary, "keys", "create", "--data-dir", self.data, "--user", user],
                              check=True, capture_output=True, text=True, timeout=60,
                              env=os.environ).stdout.strip()

    def post(self, path: str, body: dict, key: str | None = None) -> tuple[int, object]:
        """POST JSON with Basic auth (password = key, the admin's by default)."""
        import base64
        auth = base64.b64encode(f"api:{key or self.admin_key}".encode()).decode()
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Basic {auth}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def tail(self, n: int = 8000) -> str:
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read()[-n:].decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def watchdog(server: Server, seconds: float):
    """A started timer that fails the check (exit 1, server stopped) when it
    is still running after seconds: a hung SDK call fails CI instead of
    stalling it. Cancel it when done."""
    import threading

    def fire() -> None:
        print(f"FAIL the check did not finish in {seconds:.0f} s", flush=True)
        server.stop()
        os._exit(1)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()
    return t


class Checks:
    """Counts checks; a failed one is printed with its detail and fails the run."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, name: str, cond: bool, detail: object = None) -> None:
        if cond:
            self.passed += 1
            print(f"ok   {name}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {name}" + ("" if detail is None else f": {detail!r}"[:2000]), flush=True)
