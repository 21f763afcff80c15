#!/usr/bin/env bash
# One run on a lent GPU machine (issue 33): every GPU path of the book, in one call.
#
#   bash tools/gpu_run.sh            # writes into $OUT (the device tool's folder) or /tmp/gpu_out
#
# The machine has its own torch (a CUDA build) and no network: the packages it
# lacks travel as wheels in .whl/ (fetched here by tools/gpu_wheels.sh; carry
# .whl in the device call), installed into /tmp/site. In order, each step bounded by a timeout so
# that a hang costs one step, not the run:
#   1. what the machine is: nvidia-smi, torch, CUDA, NCCL;
#   2. python -m ddp_lab.gpu_check: every check one GPU allows, the results file
#      into $OUT (those that need two GPUs say so in the file);
#   3. the GPU's roofline (issue 43, Chapter 14b): matmul FLOP/s in fp32, TF32,
#      bf16 and fp16 across sizes, and a 1 GiB device copy, into
#      $OUT/roofline_cuda.json (python -m ddp_lab.bench roofline --device cuda);
#   4. pytest: the GPU tests, and nbval of every notebook with GPU cells, to see
#      what this torch on a GPU does with them (the committed outputs come from
#      a CPU machine, so some cells are expected to differ: the log says which).
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheels did not install"; exit 1; }
  export PYTHONPATH="/tmp/site:$PWD"
fi
echo "=== 1. the machine ($(date -u +%FT%TZ))"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
nvidia-smi topo -m
nproc
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"

echo "=== 2. python -m ddp_lab.gpu_check ($(date -u +%T))"
SECONDS=0
timeout 240 python3 -m ddp_lab.gpu_check --timeout 150 --out "$OUT/"
echo "gpu_check: exit status $?, ${SECONDS} s"

echo "=== 3. the roofline: python -m ddp_lab.bench roofline --device cuda ($(date -u +%T))"
SECONDS=0
timeout 100 python3 -m ddp_lab.bench roofline --device cuda --out "$OUT/roofline_cuda.json"
echo "roofline: exit status $?, ${SECONDS} s"

echo "=== 4. pytest: GPU tests and nbval of the notebooks with GPU cells ($(date -u +%T))"
SECONDS=0
timeout 230 python3 -m pytest -p no:cacheprovider -n 8 -q --tb=short -rfEs --junitxml="$OUT/junit.xml" \
  tests/test_gpu_check.py tests/test_step_profile.py tests/test_train_gpu.py tests/test_devices.py \
  book/part1_foundations/03_process_groups.ipynb book/part2_communication/04_point_to_point.ipynb \
  book/part2_communication/05_collectives.ipynb book/part2_communication/06_ring_allreduce.ipynb \
  book/part3_ddp/08b_ddp_in_practice.ipynb book/part3_ddp/08c_uneven_batchnorm_compile.ipynb \
  book/part3_ddp/09_data_distribution.ipynb \
  book/part4_running/11_torchrun.ipynb book/part4_running/14_gpus.ipynb labs/lab5_torchrun.ipynb \
  >"$OUT/pytest.txt" 2>&1
echo "pytest: exit status $?, ${SECONDS} s"
tail -n 40 "$OUT/pytest.txt"
echo "=== done ($(date -u +%T))"
