#!/usr/bin/env bash
# Lays out LibTorch for the `torch` feature in DEST (default .cache/libtorch):
#   DEST/include/...   C++ headers (torch-sys compiles its wrapper against them)
#   DEST/lib/...       libtorch_cpu, libc10, libgomp, and the two CUDA libraries that
#                      libtorch_cpu names as dependencies (nothing of CUDA runs on CPU)
#   DEST/build-version the version torch-sys checks
#
# Everything comes from PyPI wheels (torch, nvidia-cuda-runtime, nvidia-cuda-cupti), of which
# only those files are unpacked: no Python install of torch. Idempotent: a stamp naming the
# versions makes a second run a no-op.
set -euo pipefail

DEST=${1:-.cache/libtorch}
PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.13.0
# The CUDA 13.0 runtime pins of torch 2.13.0's `cuda-toolkit==13.0.3` requirement.
CUDART_VERSION=13.0.96
CUPTI_VERSION=13.0.85
STAMP="$DEST/.fetched-$TORCH_VERSION-$CUDART_VERSION-$CUPTI_VERSION"

if [[ -f "$STAMP" ]]; then
    exit 0
fi

WHEELS="$DEST.wheels"
mkdir -p "$WHEELS"
# The shared libraries are the same in every CPython build of the wheel; pinning one tag
# keeps the download independent of the local Python version.
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.11 --platform manylinux_2_28_x86_64 \
    -d "$WHEELS" "torch==$TORCH_VERSION"
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$WHEELS" \
    "nvidia-cuda-runtime==$CUDART_VERSION" "nvidia-cuda-cupti==$CUPTI_VERSION"

rm -rf "$DEST"
UNPACK="$DEST.unpack"
rm -rf "$UNPACK"
mkdir -p "$UNPACK"
EXTRACT="$PYTHON $(dirname "$0")/wheel_extract.py"
$EXTRACT "$WHEELS"/torch-"$TORCH_VERSION"-*.whl "$UNPACK" torch/include/ \
    torch/lib/libtorch_cpu.so torch/lib/libtorch.so torch/lib/libc10.so torch/lib/libgomp.so
$EXTRACT "$WHEELS"/nvidia_cuda_runtime-"$CUDART_VERSION"-*.whl "$UNPACK" \
    nvidia/cu13/lib/libcudart.so.13
$EXTRACT "$WHEELS"/nvidia_cuda_cupti-"$CUPTI_VERSION"-*.whl "$UNPACK" \
    nvidia/cu13/lib/libcupti.so.13

mkdir -p "$DEST/lib"
mv "$UNPACK/torch/include" "$DEST/include"
mv "$UNPACK"/torch/lib/* "$UNPACK"/nvidia/cu13/lib/* "$DEST/lib/"
rm -rf "$UNPACK"

# The wheel's libtorch.so is a stub that names libtorch_cpu and libtorch_cuda (470 MB, not
# fetched) as dependencies; torch-sys links `-ltorch`. A linker script of the same name
# resolves that link to libtorch_cpu alone, so no binary ever asks for libtorch_cuda.
rm "$DEST/lib/libtorch.so"
echo 'INPUT(libtorch_cpu.so)' >"$DEST/lib/libtorch.so"

echo "$TORCH_VERSION" >"$DEST/build-version"
rm -rf "$WHEELS"
touch "$STAMP"
echo "LibTorch $TORCH_VERSION in $DEST ($(du -sh "$DEST" | cut -f1))"
