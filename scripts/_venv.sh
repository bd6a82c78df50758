# Sourced by scripts/demo.sh and scripts/test.sh: make .venv (once) with a supported Python and install
# what is asked for, skipping the install when nothing it depends on changed since the last one.
#   [VENV=.venv-other] ensure_venv STAMP_NAME PIP_ARGS...
# Python: $PYTHON if set, else the first of python3.11, python3.12, python3.13, python3.10, python3 that is
# 3.10 - 3.13 (for another VENV: .venv's). The install is redone when pyproject.toml, the pip arguments or the
# interpreter change.

_supported() {
    "$1" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 13) else 1)' 2>/dev/null
}

pick_python() {
    if [ -n "${PYTHON:-}" ]; then
        if ! _supported "$PYTHON"; then
            echo "$0: PYTHON=$PYTHON is not Python 3.10 - 3.13" >&2
            return 1
        fi
        echo "$PYTHON"
        return 0
    fi
    local candidate
    for candidate in python3.11 python3.12 python3.13 python3.10 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && _supported "$candidate"; then
            echo "$candidate"
            return 0
        fi
    done
    echo "$0: no Python 3.10 - 3.13 found (tried python3.11, python3.12, python3.13, python3.10, python3; set PYTHON=...)" >&2
    return 1
}

ensure_venv() {
    local stamp_name="$1"
    shift
    local venv="${VENV:-.venv}"
    if [ ! -x "$venv/bin/python" ] || ! _supported "$venv/bin/python"; then
        local python
        if [ "$venv" != .venv ] && [ -x .venv/bin/python ]; then
            python=.venv/bin/python
        else
            python="$(pick_python)" || return 1
        fi
        rm -rf "$venv"
        "$python" -m venv "$venv"
    fi
    local stamp="$venv/.acp-otel-${stamp_name}.stamp"
    local want
    want="$("$venv/bin/python" -c 'import sys; print(sys.version)'; cat pyproject.toml; printf '%s\n' "$@")"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
    # setuptools says, on every editable install of a package that is not in a src/ directory, that a folder
    # named like the package in the working directory would take precedence: true, and nothing to act on here.
    PYTHONWARNINGS="ignore:Editable installation:UserWarning" "$venv/bin/python" -m pip install -q "$@"
    printf '%s' "$want" >"$stamp"
}
