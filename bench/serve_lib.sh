# Sourced by the scripts that drive a real `flywheel serve` over HTTP (.ci/race.sh, bench/race/*.sh).
#
# flywheel_serve BIN LOG [serve flags...] starts `BIN serve` on a loopback port the kernel hands out
# as free (a random one may be taken: the server would exit and the client meet "connection
# refused"), its output in LOG, and sets srv (its pid) and port. It returns once the server answers
# /v1/health, or fails, printing the log's end, when the server exits or 60 s pass.
flywheel_serve() {
	local bin=$1 log=$2
	shift 2
	port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
	"$bin" serve --addr "127.0.0.1:$port" "$@" >"$log" 2>&1 &
	srv=$!
	for _ in $(seq 300); do
		kill -0 "$srv" 2>/dev/null || break
		if curl -sf "127.0.0.1:$port/v1/health" >/dev/null; then return 0; fi
		sleep 0.2
	done
	echo "flywheel serve on 127.0.0.1:$port did not become ready (it exited or 60 s passed); its log:" >&2
	tail -n 80 "$log" >&2
	return 1
}
