#!/bin/bash
# Issue 18 on the GPU machine: compile_causal_lm packages (built here by benchmarks/gpu/generate_h200.py build)
# checked against HF eager on the GPU (GPT-2, Llama, Mistral, Qwen2) and timed against HF generate
# eager / static cache + torch.compile (Llama-1B width, fp16, B=1,8 x context 128,2048). From the repo root there:
#   DEADLINE=480 bash benchmarks/gpu/generate_device.sh .gpu/gen/pkgs     ($OUT set; writes generate.json, run.log)
# Carry the packages folder and .gpu/common (the IREE runtime wheel). A GPU fault (an illegal address) ends the
# run's process (exit 75) and it starts again with the next item, the faulted target left out of the timing; the
# first faulted target's smallest reproducer (prefill + one decode) then runs under compute-sanitizer
# (sanitizer.log). PROFILE=1x128,8x2048: then `cuvil profile` of those timing packages' decode step (profile-*.json);
# PHASES=1x128,8x128: a decode step's host-side phases; HOST=1x128,8x128 (HOST_FLAGS): generate's step split on the
# host; SKIP_RUN=1: only those. DRY=1: a CPU dry run here (packages built with --targets cpu --tiny; torch on the CPU, PY=venv).
set -u
export PYTHONUNBUFFERED=1
START=$(date +%s); DEADLINE=${DEADLINE:-480}
PKGS=${1:?usage: generate_device.sh PACKAGES_DIR}; COMMON=${COMMON:-.gpu/common}; OUT=${OUT:?set OUT}
PY=${PY:-python3}; DEVICE=cuda
if [ -z "${DRY:-}" ]; then
  SITE=/tmp/iree-site; CV=/tmp/cv
  rm -rf $SITE && $PY -m pip install -q --no-index --no-deps --no-compile --target $SITE $COMMON/whl/*.whl || { echo "pip install of the IREE runtime failed"; exit 1; }
  rm -rf $CV && mkdir -p $CV && cp -r cuvil_mlir $CV/ && cp -r dialects $CV/cuvil_mlir/dialects && cp -r lowering $CV/cuvil_mlir/lowering && cp -r targets $CV/cuvil_mlir/targets
  export PYTHONPATH=$CV:$SITE IREE_SITE=$SITE PATH=$PATH:/usr/local/cuda/bin
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,pstate --format=csv | tee $OUT/nvidia-smi.txt
else
  DEVICE=cpu
fi
$PY -c "import cuvil_mlir, transformers, torch; print('cuvil_mlir', cuvil_mlir.__file__, 'transformers', transformers.__version__, 'torch', torch.__version__)" 2>&1 | tail -1
for attempt in $(seq 1 $([ -n "${SKIP_RUN:-}" ] && echo 0 || echo 12)); do
  LEFT=$((DEADLINE - ($(date +%s) - START) - 20))
  [ $LEFT -lt 40 ] && { echo "deadline: no time left for attempt $attempt"; break; }
  timeout -k 10 $((LEFT + 15)) $PY benchmarks/gpu/generate_h200.py run $PKGS --out $OUT --device $DEVICE --deadline $LEFT \
    ${GEN_ARGS:-} >> $OUT/run.log 2>&1
  rc=$?
  echo "attempt $attempt: exit $rc after $(( $(date +%s) - START )) s" | tee -a $OUT/run.log
  [ $rc -eq 75 ] && continue   # a GPU fault: a fresh process goes on with the next item
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && continue  # died: the JSON records the item, go on
  break
done
# the first fault, reproduced under compute-sanitizer (which kernel, which address)
FAULT=$($PY -c "import json,sys; d=json.load(open('$OUT/generate.json')); c=[r for r in d['checks'] if r.get('target') in d.get('faulted_targets', [])]; print(c[0]['file'], c[0]['target']) if c else None" 2>/dev/null)
LEFT=$((DEADLINE - ($(date +%s) - START) - 10))
if [ -n "$FAULT" ] && [ $LEFT -gt 30 ] && command -v compute-sanitizer >/dev/null; then
  set -- $FAULT
  echo "compute-sanitizer on $1 $2 ($LEFT s left)" | tee $OUT/sanitizer.log
  timeout -k 5 $LEFT compute-sanitizer --tool memcheck --print-limit 6 $PY benchmarks/gpu/generate_h200.py step $PKGS/$1 "$2" \
    >> $OUT/sanitizer.log 2>&1
  grep -m 12 "Invalid\|Address\|at 0x\|by thread\|step ok\|Error\|=========     Host Frame" $OUT/sanitizer.log | cut -c1-220
fi
# PHASES=CASES: a generate loop's decode step split into the call, the read-back and the token choice (step-phases.json)
LEFT=$((DEADLINE - ($(date +%s) - START) - 10))
if [ -n "${PHASES:-}" ] && [ $LEFT -gt 40 ]; then
  timeout -k 10 $LEFT $PY benchmarks/gpu/generate_h200.py phases $PKGS --out $OUT --cases $PHASES --steps ${PHASE_STEPS:-14} > $OUT/phases.log 2>&1
  echo "phases: exit $?"; grep "^\[\|{" $OUT/phases.log | tail -8 | cut -c1-400
fi
# HOST=CASES (e.g. 1x128,8x128): CausalLM.generate's decode step split on the host (host-split*.json), once per
# set of extra IREE runtime flags in HOST_FLAGS (';'-separated sets of space-separated flags; an empty set: the defaults)
if [ -n "${HOST:-}" ]; then
  IFS=';' read -ra SETS <<< "${HOST_FLAGS:-}"; [ ${#SETS[@]} -eq 0 ] && SETS=("")
  for set in "${SETS[@]}"; do
    LEFT=$((DEADLINE - ($(date +%s) - START) - 10)); [ $LEFT -lt 40 ] && break
    timeout -k 10 $LEFT $PY benchmarks/gpu/generate_h200.py host $PKGS --out $OUT --cases $HOST \
      $(for f in $set; do printf -- "--runtime-flag=%s " "$f"; done) >> $OUT/host.log 2>&1
    echo "host [$set]: exit $?"
  done
  grep "^{" $OUT/host.log | cut -c1-330
fi
# PROFILE=CASES (e.g. 1x128,8x2048): cuvil profile of those timing packages' decode step, per target, with what is left
LEFT=$((DEADLINE - ($(date +%s) - START) - 10))
if [ -n "${PROFILE:-}" ] && [ $LEFT -gt 40 ]; then
  COLUMNS=200 timeout -k 10 $LEFT $PY benchmarks/gpu/generate_h200.py profile $PKGS --out $OUT --cases $PROFILE --deadline $((LEFT - 30)) \
    > $OUT/profile.log 2>&1
  echo "profile: exit $?"; grep -v "Warning\|warn" $OUT/profile.log | tail -60 | cut -c1-200
fi
[ -f $OUT/run.log ] && grep -v "Warning\|return cls\|^\[transformers\]\|^  warnings.warn\|^ \|^Search\|^CUDA kernel\|^For debugging\|^Compile with" $OUT/run.log | tail -30
