#!/usr/bin/env bash
# The CUDA path on a real GPU, as one prepared run (docs/design.md, "Kernels").
#
#   bash bench/gpu_check.sh --prepare   # here, with network: fetches the Horovod sdist into .gpu/
#   bash bench/gpu_check.sh             # on the GPU machine: no network needed; results in $OUT
#
# On the GPU machine it needs nvidia-smi, a python3 with a CUDA build of torch, numba-cuda,
# cmake, g++, nvcc and the nvidia-nccl wheel, and leaves that torch alone: Horovod is built into
# /tmp/site and hvd_compress runs from this checkout through PYTHONPATH. Steps, each logged to
# $OUT/*.log, each allowed to fail without stopping the others (the summary says which did):
#   1. build Horovod 0.28.1 with our C++17 patch, CUDA and NCCL for the GPU collectives
#      (HOROVOD_GPU_OPERATIONS=NCCL: our compressed payloads travel by allgather and alltoall of
#      CUDA tensors, which NCCL runs on the device; Gloo would stage them through the host),
#      for the one architecture the machine has (CUDA 13 builds nothing older than sm_75, and
#      Horovod 0.28.1's default list starts at sm_35);
#   2. the CUDA kernel tests for real (tests/conftest.py only simulates without nvidia-smi);
#   3. each compressor's CUDA aggregate against its CPU aggregate (bench/gpu_check.py compare);
#   4. CUDA kernel timings at 25M and 100M fp32 elements (bench/gpu_check.py time);
#   5. training steps through hvd.DistributedOptimizer on CUDA tensors, horovodrun -np 1 and
#      -np 2 on the one GPU (NCCL may refuse two ranks on one device; the log says).
set -uo pipefail
cd "$(dirname "$0")/.."
version=0.28.1
sdist=.gpu/horovod-$version.tar.gz

if [ "${1:-}" = "--prepare" ]; then
    mkdir -p .gpu
    python3 -m pip download --quiet --no-deps --no-binary :all: "horovod==$version" -d .gpu
    ls -l "$sdist"
    exit 0
fi

OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=()
step() {  # step NAME COMMAND...: runs it, logs to $OUT/NAME.log, records pass or fail
    local name=$1; shift
    echo "== $name"
    if "$@" >"$OUT/$name.log" 2>&1; then status+=("$name: passed"); else status+=("$name: FAILED (see $name.log)"); fi
    tail -n 5 "$OUT/$name.log"
}

nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || { echo "no GPU here (nvidia-smi failed)"; exit 1; }
python3 -c 'import torch, numba; print("torch", torch.__version__, "cuda", torch.version.cuda,
torch.cuda.get_device_name(), "numba", numba.__version__)' | tee "$OUT/versions.txt"

build_horovod() {
    local work=/tmp/horovod-build nccl arch
    rm -rf "$work" && mkdir -p "$work/lib"
    tar xzf "$sdist" -C "$work"
    patch -d "$work/horovod-$version" -p1 < third_party/horovod/cxx17.patch
    nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))')
    ln -sf "$nccl"/lib/libnccl.so.* "$work/lib/libnccl.so"  # the wheel ships only the .so.2
    arch=$(python3 -c 'import torch; print("%d%d" % torch.cuda.get_device_capability())')
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_INCLUDE="$nccl/include" HOROVOD_NCCL_LIB="$work/lib" \
    HOROVOD_CUDA_HOME="$(dirname "$(dirname "$(command -v nvcc)")")" \
    HOROVOD_BUILD_ARCH_FLAGS="-gencode arch=compute_$arch,code=sm_$arch" \
    MAKEFLAGS=-j$(nproc) \
        python3 -m pip install --no-build-isolation --no-deps --target /tmp/site "$work/horovod-$version"
    LD_LIBRARY_PATH="$nccl/lib:${LD_LIBRARY_PATH:-}" PYTHONPATH=/tmp/site \
        python3 -c 'import horovod.torch as hvd; print("horovod", hvd.__file__, "nccl built:", hvd.nccl_built())'
}
step horovod_build build_horovod

nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))')/lib
export LD_LIBRARY_PATH="$nccl_lib:${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$PWD:/tmp/site:${PYTHONPATH:-}"
export NUMBA_ENABLE_CUDASIM=0

step cuda_kernel_tests python3 -m pytest -q tests/test_cuda_kernels.py -p no:cacheprovider
step compare python3 bench/gpu_check.py compare "$OUT"
step kernel_times python3 bench/gpu_check.py time "$OUT"
step train_np1 /tmp/site/bin/horovodrun -np 1 -H localhost:1 --gloo python3 bench/gpu_check.py step "$OUT"
step train_np2 /tmp/site/bin/horovodrun -np 2 -H localhost:2 --gloo python3 bench/gpu_check.py step "$OUT"

printf '%s\n' "${status[@]}" | tee "$OUT/summary.txt"
