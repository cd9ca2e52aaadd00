#!/bin/bash
# `make image-check`: builds deploy/Dockerfile's runtime stage on a Debian base image made with
# debootstrap (no registry is needed), adds a server binary and libonnxruntime.so from the host
# where the Dockerfile's onnx stage puts its own, and runs tests/image against it.
#
# Needs root (or sudo) for apt-get, dockerd and debootstrap. Installs docker.io and debootstrap
# when missing, starts dockerd when no daemon answers (and stops it again at the end), and keeps
# the base image's tarball in $CACHE so that a rerun skips debootstrap.
#
# Environment: BIN (the server binary, for the ONNX backend alone as in the default image; unset,
# `cargo build --bin tensorport` builds it), ORT_LIB (libonnxruntime.so, of the version the
# Dockerfile's ORT_VERSION names; default: PY's onnxruntime), PY (Python with pytest,
# tritonclient and onnxruntime), CACHE, DOCKER (the docker client), DEBIAN_MIRROR.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
CACHE=${CACHE:-.cache/image-check}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
BASE_TARBALL=$CACHE/debian-$SUITE-minbase.tar
BASE_IMAGE=tensorport-image-check/debian:$SUITE
RUNTIME_IMAGE=tensorport-image-check/runtime:latest
SERVER_IMAGE=tensorport-image-check/server:latest
CLIENT_IMAGE=tensorport-image-check/python:latest
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)

step() { echo "==> $*"; }
fail() { echo "image-check: $*" >&2; exit 1; }

if [ -z "${BIN:-}" ]; then
    step "building the server for the ONNX backend alone (the default image's binary)"
    cargo build --bin tensorport
    BIN=$(cargo metadata --format-version 1 --no-deps \
        | $PY -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/debug/tensorport
fi
ORT_VERSION=$(sed -n 's/^ARG ORT_VERSION=//p' deploy/Dockerfile)
if [ -z "${ORT_LIB:-}" ]; then
    ort_package=$($PY -c 'import onnxruntime, os; print(os.path.dirname(onnxruntime.__file__))')
    ORT_LIB=$(ls "$ort_package"/capi/libonnxruntime.so.* 2>/dev/null | head -n 1)
fi
[ -x "$BIN" ] || fail "no server binary at $BIN (cargo build --bin tensorport)"
[ -f "$ORT_LIB" ] || fail "no libonnxruntime.so (set ORT_LIB)"
[ "$(basename "$ORT_LIB")" = "libonnxruntime.so.$ORT_VERSION" ] \
    || fail "$ORT_LIB is not ONNX Runtime $ORT_VERSION, the version deploy/Dockerfile installs"
if ldd "$BIN" | grep -Eq 'libtorch|libtensorflow'; then
    fail "$BIN links LibTorch or TensorFlow; the default image serves ONNX alone (cargo build --bin tensorport)"
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    step "installing docker.io and debootstrap (Debian's packages)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        docker.io debootstrap debian-archive-keyring >/dev/null
fi
# Debian's client, when another docker (a newer client without its build plugin) comes first.
DOCKER=${DOCKER:-$(command -v /usr/bin/docker || command -v docker)}
export DOCKER

mkdir -p "$CACHE"
started_daemon=""
stop_daemon() {
    if [ -n "$started_daemon" ]; then
        step "stopping the docker daemon this check started"
        $SUDO kill "$started_daemon" 2>/dev/null || true
        for _ in $(seq 60); do $SUDO kill -0 "$started_daemon" 2>/dev/null || break; sleep 0.5; done
    fi
}
trap stop_daemon EXIT
if ! $SUDO "$DOCKER" version >/dev/null 2>&1; then
    step "starting dockerd (log: $CACHE/dockerd.log)"
    $SUDO sh -c "nohup dockerd >'$CACHE/dockerd.log' 2>&1 & echo \$!" >"$CACHE/dockerd.pid"
    started_daemon=$(cat "$CACHE/dockerd.pid")
    for _ in $(seq 120); do
        $SUDO "$DOCKER" version >/dev/null 2>&1 && break
        $SUDO kill -0 "$started_daemon" 2>/dev/null || fail "dockerd exited: $(tail -n 5 "$CACHE/dockerd.log")"
        sleep 0.5
    done
    $SUDO "$DOCKER" version >/dev/null 2>&1 \
        || fail "dockerd did not answer within a minute: $(tail -n 5 "$CACHE/dockerd.log")"
fi
# The legacy builder throughout: BuildKit would fetch the Dockerfile's syntax frontend from Docker
# Hub. It builds every stage before the target, which is why the runtime stage comes first.
docker() { $SUDO env DOCKER_BUILDKIT=0 "$DOCKER" "$@"; }

if [ ! -s "$BASE_TARBALL" ]; then
    step "debootstrap: Debian $SUITE (minbase) from $DEBIAN_MIRROR into $BASE_TARBALL (once)"
    rootfs=$(mktemp -d)
    $SUDO debootstrap --variant=minbase "$SUITE" "$rootfs" "$DEBIAN_MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
        || { $SUDO rm -rf "$rootfs"; fail "debootstrap failed: $(tail -n 5 "$CACHE/debootstrap.log")"; }
    # The downloaded packages and package lists, as in Debian's own slim images.
    $SUDO tar -C "$rootfs" --exclude='./var/cache/apt/archives/*.deb' --exclude='./var/lib/apt/lists/*' \
        -cf "$BASE_TARBALL.partial" .
    $SUDO rm -rf "$rootfs"
    mv "$BASE_TARBALL.partial" "$BASE_TARBALL"
    docker image rm -f "$BASE_IMAGE" >/dev/null 2>&1 || true
fi
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    step "importing $BASE_TARBALL as $BASE_IMAGE"
    docker import "$BASE_TARBALL" "$BASE_IMAGE" >/dev/null
fi

# The runtime stage takes nothing from the build context, so an empty one does.
context=$(mktemp -d)
trap 'rm -rf "$context"; stop_daemon' EXIT
step "building deploy/Dockerfile's runtime stage on $BASE_IMAGE"
mkdir "$context/runtime"
docker build --quiet --network host -f deploy/Dockerfile --target runtime \
    --build-arg RUNTIME_IMAGE="$BASE_IMAGE" -t "$RUNTIME_IMAGE" "$context/runtime" >/dev/null

# The onnx stage's own lines on top of the runtime stage, each COPY --from=STAGE taking the file
# of the same name from the host instead.
step "adding $BIN and $(basename "$ORT_LIB") where the onnx stage puts its own"
mkdir "$context/server"
{
    echo "FROM $RUNTIME_IMAGE"
    awk '/^FROM runtime AS onnx/ { on = 1; next } on && /^FROM / { on = 0 } on' deploy/Dockerfile \
        | sed -E 's#^COPY --from=[^ ]+ ([^ ]*/)?([^ /]+) #COPY \2 #'
} >"$context/server/Dockerfile"
for file in tensorport libonnxruntime.so; do
    grep -q "^COPY $file " "$context/server/Dockerfile" \
        || fail "deploy/Dockerfile's onnx stage copies no $file from another stage"
done
strip -o "$context/server/tensorport" "$BIN" 2>/dev/null || cp "$BIN" "$context/server/tensorport"
cp "$ORT_LIB" "$context/server/libonnxruntime.so"
docker build --quiet -t "$SERVER_IMAGE" "$context/server" >/dev/null

step "building the shared-memory client's image ($BASE_IMAGE and Debian's python3)"
mkdir "$context/client"
printf '%s\n' "FROM $BASE_IMAGE" \
    'RUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*' \
    >"$context/client/Dockerfile"
docker build --quiet --network host -t "$CLIENT_IMAGE" "$context/client" >/dev/null

step "running tests/image against $SERVER_IMAGE"
# The client container imports tritonclient and numpy from this Python's packages, mounted.
SITE_PACKAGES=$($PY -c 'import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))')
TENSORPORT_IMAGE=$SERVER_IMAGE TENSORPORT_CLIENT_IMAGE=$CLIENT_IMAGE \
    TENSORPORT_CLIENT_SITE_PACKAGES=$(readlink -f "$SITE_PACKAGES") DOCKER_SUDO="$SUDO" \
    $PY -m pytest tests/image -q -p no:cacheprovider
