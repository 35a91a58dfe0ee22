#!/usr/bin/env bash
# Builds a Horovod 0.28.1 wheel (PyTorch + Gloo, CPU, no MPI) that works with torch >= 2.1,
# and installs it into the given Python. The wheel is cached: a second run installs it in seconds.
#
# Why a patch: 0.28.1 (the last release) compiles its torch extension and the bundled gloo as
# C++14, while torch >= 2.1 headers require C++17. Upstream fixed this after the release
# ("Compile using C++17 when using PyTorch 2.1", #3998) but never published it.
set -euo pipefail

python=${1:?usage: build_wheel.sh PYTHON}
here=$(cd "$(dirname "$0")" && pwd)
version=0.28.1
cache=${HVD_COMPRESS_WHEEL_CACHE:-$HOME/.cache/hvd_compress/wheels}
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
# A wheel is bound to the torch ABI it was compiled against: key the cache by it.
wheel_dir="$cache/horovod-$version-torch-$torch_version"

if "$python" -c "import horovod, horovod.torch; assert horovod.__version__ == '$version'" 2>/dev/null; then
    exit 0
fi

if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
    for tool in cmake g++ make; do
        command -v "$tool" >/dev/null || {
            echo "error: building Horovod needs '$tool'; install it (Debian: apt-get install cmake g++ make)" >&2
            exit 1
        }
    done
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$python" -m pip download --quiet --no-deps --no-binary :all: "horovod==$version" -d "$work"
    tar xzf "$work/horovod-$version.tar.gz" -C "$work"
    patch -d "$work/horovod-$version" -p1 < "$here/cxx17.patch"
    echo "building Horovod $version against torch $torch_version (about 3 minutes on 2 cores)..."
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=GLOO \
    MAKEFLAGS=-j$(nproc) \
        "$python" -m pip wheel --quiet --no-build-isolation --no-deps "$work/horovod-$version" -w "$work/dist"
    mkdir -p "$wheel_dir"
    cp "$work"/dist/horovod-*.whl "$wheel_dir/"
fi
"$python" -m pip install --quiet --no-deps "$wheel_dir"/horovod-*.whl
