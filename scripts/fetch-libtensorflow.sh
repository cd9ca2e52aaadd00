#!/bin/bash
# Fetches the TensorFlow 2.13 C API for the `tensorflow` Cargo feature, from the PyPI wheel
# tensorflow-cpu==2.13.0 (the only place a registry publishes it): the C API lives inside
# libtensorflow_cc.so.2, next to libtensorflow_framework.so.2. Nothing else of the wheel is kept.
#
# Usage: fetch-libtensorflow.sh [DEST] [PYTHON]   (DEST defaults to .cache/libtensorflow)
#
# DEST then holds the two libraries, the names the linker looks for (libtensorflow.so,
# libtensorflow_framework.so) and a tensorflow.pc. tensorflow-sys's build script asks pkg-config
# for `tensorflow` before it tries to download anything, and .cargo/config.toml puts DEST on
# PKG_CONFIG_PATH, so `cargo build --features tensorflow` finds it with nothing exported.
# Re-running is a no-op once DEST/.complete names this version.
set -euo pipefail
VERSION=2.13.0
DEST=$(realpath -m "${1:-.cache/libtensorflow}")
PY=${2:-python3}
STAMP="$DEST/.complete"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$VERSION" ]; then
    echo "libtensorflow $VERSION already in $DEST"
    exit 0
fi

# tensorflow-sys builds curl-sys, which needs OpenSSL's headers; pkg-config reads tensorflow.pc.
if ! dpkg -s libssl-dev >/dev/null 2>&1 || ! command -v pkg-config >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        libssl-dev pkg-config >/dev/null
fi

WHEELS="$DEST/wheel"
rm -rf "$DEST"
mkdir -p "$WHEELS"
# Linux x86_64 and CPython 3.11 name one wheel; the libraries inside do not depend on the Python.
"$PY" -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    --python-version 3.11 -d "$WHEELS" "tensorflow-cpu==$VERSION"

"$PY" "$(dirname "$0")/wheel_extract.py" "$WHEELS"/tensorflow_cpu-"$VERSION"-*.whl "$WHEELS" \
    tensorflow/libtensorflow_cc.so.2 tensorflow/libtensorflow_framework.so.2
mv "$WHEELS"/tensorflow/libtensorflow_cc.so.2 "$WHEELS"/tensorflow/libtensorflow_framework.so.2 "$DEST"/
rm -rf "$WHEELS"

ln -sf libtensorflow_cc.so.2 "$DEST/libtensorflow.so"
ln -sf libtensorflow_framework.so.2 "$DEST/libtensorflow_framework.so"
cat > "$DEST/tensorflow.pc" <<EOF
prefix=$DEST
libdir=\${prefix}

Name: tensorflow
Description: TensorFlow C API (from the tensorflow-cpu $VERSION wheel)
Version: $VERSION
Libs: -L\${libdir} -ltensorflow -ltensorflow_framework
Cflags:
EOF
echo "$VERSION" > "$STAMP"
echo "libtensorflow $VERSION in $DEST ($(du -sh --apparent-size "$DEST" | cut -f1))"
