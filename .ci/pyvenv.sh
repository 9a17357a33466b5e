# Sourced by the .ci scripts that run Python clients from PyPI.
#
# ci_venv PYTHON LOCK DIR NAME prints the path of a venv of PYTHON with the pip lock LOCK installed,
# cached as DIR/NAME-<hash of the lock and the interpreter's version>: a rerun with the same lock is
# instant, a changed lock builds a new venv and removes the stale ones of NAME. Progress goes to stderr.
ci_venv() {
    local py="$1" req="$2" dir="$3" name="$4" key venv
    key="$( (cat "$req"; "$py" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)"
    venv="$dir/$name-$key"
    if [ ! -f "$venv/.installed" ]; then
        echo "-- creating $venv" >&2
        rm -rf "$venv"
        mkdir -p "$dir"
        "$py" -m venv "$venv"
        timeout 900 "$venv/bin/pip" install -q --disable-pip-version-check --no-input -r "$req" >&2
        touch "$venv/.installed"
        find "$dir" -maxdepth 1 -name "$name-*" ! -name "$name-$key" -exec rm -rf {} +
    fi
    echo "$venv"
}
