#!/bin/bash
# The real-size end-to-end measurement on the H200 (issues 14, 15), in two device calls, from the
# repository root there, with $OUT set:
#   DEADLINE=540 bash benchmarks/gpu/e2e_device.sh 1 .gpu/e2e/run    # cuvil modules, torch eager + reduce-overhead, profiles,
#                                                                   # then td without kernels
#   DEADLINE=540 bash benchmarks/gpu/e2e_device.sh 2 .gpu/e2e/run    # torch.compile default, max-autotune, the profiles of
#                                                                   # the paths without kernels
# RUN: a folder build.py pack made (cases + _params/), carried with .gpu/common (the runtime wheel).
# Work is ordered by importance; nothing new starts past DEADLINE (seconds from the start, minus
# reserves), every result file is rewritten after each item, and each step runs under `timeout`, so
# a hang costs that step only. $OUT gets: results-e2e-partN.json, profiles-partN.json, partN.log.
#
# Environment (defaults are the H200 run; the CPU dry run overrides them, see benchmarks/README.md):
#   COMMON (.gpu/common)  CASES  VARIANTS1/VARIANTS2  PROFILES1/PROFILES2 (empty: none)  MAX_AUTOTUNE
#   TORCH_MODES1/TORCH_MODES2  PY (python3)  IREE_SITE (set: use that runtime, install nothing)
#   BENCH_TORCH_DEVICE (cuda)  TORCH_REPS (200)  ALT_FLAGS (part 1: the cuvil variants again with these runtime flags)
set -u
PART=${1:?usage: e2e_device.sh 1|2 RUN}
RUN=${2:?usage: e2e_device.sh 1|2 RUN}
T0=$(date +%s)
DEADLINE=${DEADLINE:-540}
COMMON=${COMMON:-.gpu/common}
PY=${PY:-python3}
CASES=${CASES:-gpt2-12l-b1,llama-2048-b8,gpt2-12l-b8,llama-2048-b1,bert-base-b8}
VARIANTS1=${VARIANTS1:-cuvil_h200_td,cuvil_h200_nokern,cuvil_h200}
VARIANTS2=${VARIANTS2-cuvil_h200_td_nokern}
PROFILES1=${PROFILES1-gpt2-12l-b1:cuvil_h200_td,llama-2048-b8:cuvil_h200_td}
PROFILES2=${PROFILES2-gpt2-12l-b1:cuvil_h200_nokern,gpt2-12l-b1:cuvil_h200_td_nokern}
MAX_AUTOTUNE=${MAX_AUTOTUNE-gpt2-12l-b1,llama-2048-b8}
TORCH_MODES1=${TORCH_MODES1:-eager,compile_reduce_overhead}
TORCH_MODES2=${TORCH_MODES2:-compile_default}
export PYTHONUNBUFFERED=1 TORCH_FP32=none
LOG=$OUT/part$PART.log
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $LOG; }

# the IREE runtime (wheel) and cuvil_mlir's runtime side (profiler), as benchmarks/gpu/device_run.sh does
if [ -z "${IREE_SITE:-}" ]; then
  SITE=/tmp/iree-site
  rm -rf $SITE && $PY -m pip install -q --no-index --no-deps --no-compile --target $SITE $COMMON/whl/*.whl >> $LOG 2>&1 \
    || { say "FAILED: installing the IREE runtime wheel from $COMMON/whl"; exit 1; }
  export IREE_SITE=$SITE
fi
CV=/tmp/cv-e2e
rm -rf $CV && mkdir -p $CV && cp -r cuvil_mlir $CV/ && cp -r dialects $CV/cuvil_mlir/dialects && cp -r lowering $CV/cuvil_mlir/lowering \
  && cp -r targets $CV/cuvil_mlir/targets || { say "FAILED: staging cuvil_mlir"; exit 1; }
export PYTHONPATH=$CV:$IREE_SITE
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,pstate --format=csv
  $PY -c "import torch, numpy, sys; print('torch', torch.__version__, torch.version.cuda, 'numpy', numpy.__version__, sys.version.split()[0])"
  which ncu || ls /usr/local/cuda/bin/ncu; } >> $LOG 2>&1
export PATH=$PATH:/usr/local/cuda/bin
say "part $PART: setup done, $(left) s left"

# run_on_h200.py: $1 = seconds kept for what follows; the rest: its arguments
measure() {
  local keep=$1; shift
  local budget=$(( $(left) - keep ))
  if [ $budget -lt 30 ]; then say "skipped (no time): $*"; return; fi
  # new items stop $budget - 75 s in (an item runs up to ~75 s: a torch.compile, a module's check + benchmark)
  timeout -k 10 $budget $PY benchmarks/gpu/run_on_h200.py $RUN --common $COMMON --out $OUT --deadline $(( budget > 150 ? budget - 75 : budget / 2 )) "$@" \
    2>&1 | grep -v "^ \|^{\|^}\|^\[\|^Traceback" >> $LOG
  say "measured ($*): rc ${PIPESTATUS[0]}"
}
profile() {
  local keep=$1 cases=$2
  [ -z "$cases" ] && return
  local budget=$(( $(left) - keep ))
  if [ $budget -lt 40 ]; then say "skipped (no time): profiles $cases"; return; fi
  COLUMNS=200 timeout -k 10 $budget $PY benchmarks/gpu/e2e_profile.py $RUN --cases $cases --out $OUT/profiles-part$PART.json \
    --deadline $(( budget - 60 )) >> $LOG 2>&1
  say "profiled ($cases): rc $?"
}

if [ "$PART" = 1 ]; then
  # the product's best path and the path before the kernels, with the torch modes that matter most
  TORCH_MODES=$TORCH_MODES1 measure 160 --name e2e-part1 --cases $CASES --variants $VARIANTS1
  # the same modules under other IREE runtime flags (ALT_FLAGS, e.g. --cuda_use_streams=false: CUDA graphs)
  [ -n "${ALT_FLAGS:-}" ] && IREE_BENCH_FLAGS="$ALT_FLAGS" measure 120 --name e2e-part1-alt --no-torch --cases $CASES --variants $VARIANTS1
  profile 100 "$PROFILES1"
  # what the kernels alone change (the target description without them), if time is left
  [ -n "$VARIANTS2" ] && measure 5 --name e2e-part1-tdoff --no-torch --cases $CASES --variants $VARIANTS2
elif [ "$PART" = 2 ]; then
  TORCH_MODES=$TORCH_MODES2 measure 300 --name e2e-part2 --no-iree --cases $CASES
  [ -n "$MAX_AUTOTUNE" ] && TORCH_MODES=compile_max_autotune TORCH_MAX_AUTOTUNE=$MAX_AUTOTUNE \
    measure 45 --name e2e-part2-autotune --no-iree --cases $MAX_AUTOTUNE
  profile 5 "$PROFILES2"
  measure 5 --name e2e-part2-tdoff --no-torch --cases $CASES --variants $VARIANTS2   # only if part 1 had no time for it
else
  echo "part $PART: expected 1 or 2"; exit 2
fi
say "part $PART done"
tail -n 40 $LOG
ls -la $OUT
