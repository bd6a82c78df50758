#!/usr/bin/env bash
# Build the Rust ACP peers of the Rust SDK tests (tests/rust_peers/: an agent and a client on the crates.io crate
# agent-client-protocol) from the committed lock file, as a debug build (quicker cold than release, fast enough),
# into a target directory outside the clone that survives between CI runs:
# ${XDG_CACHE_HOME:-$HOME/.cache}/acp-otel/rust-peers/target (CARGO_TARGET_DIR wins when set). A warm run finds
# everything built and takes a second or two.
# Without cargo it says so and exits 0, so that the tests skip with the reason; under CI=true that is a failure.
# A failed build always fails. The last line of its standard output is the directory that holds the binaries.
set -euo pipefail
cd "$(dirname "$0")/../tests/rust_peers"
if ! command -v cargo >/dev/null 2>&1; then
    if [ "${CI:-}" = true ]; then
        echo "build_rust_peers: cargo is not installed (CI=true: the Rust SDK tests must run)" >&2
        exit 1
    fi
    echo "build_rust_peers: cargo is not installed: the Rust SDK tests will skip" >&2
    exit 0
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/acp-otel/rust-peers/target}"
start=$SECONDS
nice -n 10 cargo build --locked --quiet
echo "build_rust_peers: $(cargo --version), agent-client-protocol $(sed -n '/^name = "agent-client-protocol"$/{n;s/version = "\(.*\)"/\1/p;}' Cargo.lock), $((SECONDS - start)) s" >&2
echo "$CARGO_TARGET_DIR/debug"
