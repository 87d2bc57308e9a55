#!/usr/bin/env bash
# The GPU path in one prepared script (issue 32): nothing downloaded, every figure one `FIG key=value` line, the
# figures and logs under $OUT (default ./gpu_smoke_out). Run from the repo root:
#
#   bash bench/gpu_smoke.sh wheels    # here, with the project's venv: the wheels of the trainer's pure-config
#                                     # packages (hydra-core, omegaconf, pydantic, ...) at this venv's versions,
#                                     # for the GPU machine's Python ($TARGET_PYTHON, default 3.12), into
#                                     # bench/.wheels; carry that folder to a machine without them
#   bash bench/gpu_smoke.sh trainer   # the trainer alone (bench/gpu_trainer_smoke.py) and the CUDA-only tests
#                                     # (tests/test_cuda.py): a GPU machine with torch, transformers and peft, no
#                                     # vLLM, no W&B, no network; ~4-5 min on one H200. What it lacks of the
#                                     # project's other packages installs from bench/.wheels
#   bash bench/gpu_smoke.sh server    # a GPU node with the gpu extra installed (.venv): the launcher's own runs
#                                     # on one GPU in turns (deployment=colocated_gpu): rl, opd with a local
#                                     # teacher, LoRA; with 2+ GPUs rl with weights pushed over NCCL
#                                     # (inference.weight_transfer=nccl); mismatch_kl per step, seconds per step,
#                                     # reload, export and push
#
# A rerun skips the trainer stages that finished (their figures are kept in $WORK).
set -euo pipefail
PART=${1:?usage: bash bench/gpu_smoke.sh wheels|trainer|server}
OUT=${OUT:-$PWD/gpu_smoke_out}
WORK=${WORK:-/tmp/gpu_smoke}
WHEELS=${WHEELS:-bench/.wheels}
# what the trainer imports beyond torch, transformers, peft, accelerate, safetensors and tokenizers: module=distribution
CONFIG_PACKAGES="hydra=hydra-core omegaconf=omegaconf antlr4=antlr4-python3-runtime pydantic=pydantic
  pydantic_core=pydantic-core annotated_types=annotated-types typing_inspection=typing-inspection"
mkdir -p "$OUT" "$WORK"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1 \
  TOKENIZERS_PARALLELISM=false PRIME_RL_CACHE=$WORK/cache

gpu_memory() {  # every 2 s, the GPU's used memory: the peak of a whole part, beside each role's own figures
  while sleep 2; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; done
}

missing_modules() {  # the distributions of CONFIG_PACKAGES whose module $PY cannot import
  for pair in $CONFIG_PACKAGES; do
    $PY -c "import ${pair%%=*}" 2>/dev/null || echo "${pair#*=}"
  done
}

case $PART in
wheels)
  PY=${PY:-.venv/bin/python}
  pinned() { for name; do echo "$name==$($PY -c "import importlib.metadata as m; print(m.version('$name'))")"; done; }
  # pure Python: built here where no wheel is published (antlr4's runtime); pydantic-core is compiled: the
  # target's own build
  pure=$(for pair in $CONFIG_PACKAGES typing_extensions=typing-extensions; do
    [[ ${pair#*=} == pydantic-core ]] || echo "${pair#*=}"
  done)
  $PY -m pip wheel -q --no-deps -w "$WHEELS" $(pinned $pure)
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version "${TARGET_PYTHON:-3.12}" \
    --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$WHEELS" "$(pinned pydantic-core)"
  ls "$WHEELS"
  ;;
trainer)
  PY=${PY:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3 )}
  missing=$(missing_modules)
  if [[ -n $missing ]]; then
    ls "$WHEELS"/*.whl >/dev/null 2>&1 \
      || { echo "this Python lacks $(echo $missing); make their wheels with 'bash bench/gpu_smoke.sh wheels' on a machine with the project's venv and carry $WHEELS here" >&2; exit 2; }
    # typing-extensions too: pydantic wants a newer one than a machine without pydantic may have
    $PY -m pip install -q --no-index --no-deps --find-links "$WHEELS" --target "$WORK/py" $missing typing-extensions
    export PYTHONPATH=$WORK/py${PYTHONPATH:+:$PYTHONPATH}
    echo "FIG installed_from_wheels='$(echo $missing)'"
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  gpu_memory > "$OUT/gpu_memory_mib.txt" & MONITOR=$!
  trap 'kill $MONITOR 2>/dev/null' EXIT
  $PY -m pytest -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tee "$OUT/test_cuda.log" \
    && echo "FIG cuda_tests=passed" || echo "FIG cuda_tests=failed: $(tail -1 "$OUT/test_cuda.log")"
  $PY bench/gpu_trainer_smoke.py --device cuda --work "$WORK/trainer" --out "$OUT" 2>&1 | tee "$OUT/trainer.log" \
    || echo "FIG trainer_smoke=failed: $(tail -1 "$OUT/trainer.log")"
  cp "$WORK"/trainer/*/*.log "$OUT"/ 2>/dev/null || true  # the smoke keeps its logs per model shape
  echo "FIG gpu_peak_used_mib=$(sort -n "$OUT/gpu_memory_mib.txt" | tail -1)"
  ;;
server)
  PY=${PY:-.venv/bin/python}
  gpu_memory > "$OUT/gpu_memory_mib.txt" & MONITOR=$!
  trap 'kill $MONITOR 2>/dev/null' EXIT
  run() {  # one launch of the built-in Qwen3-shaped student; its metrics.jsonl and logs go to $OUT
    local name=$1; shift
    $PY launch.py model=tiny_qwen3 max_steps=6 monitor=off \
      orchestrator.eval.interval=0 "hydra.run.dir=$WORK/$name" "$@" > "$OUT/$name.console.log" 2>&1 \
      || { echo "FIG ${name}_failed=$(tail -1 "$OUT/$name.console.log")"; return; }
    cp "$WORK/$name/metrics.jsonl" "$OUT/$name.metrics.jsonl"
    cp -r "$WORK/$name/logs" "$OUT/$name.logs"
    $PY - "$WORK/$name/metrics.jsonl" "$name" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if '"time/step"' in line]
print(f"FIG {sys.argv[2]}_mismatch_kl_per_step={[round(r['mismatch_kl'], 6) for r in rows]}")
for key in ("time/step", "time/generate", "time/reload", "time/train", "time/export", "time/push", "memory/peak_gib"):
    values = [r[key] for r in rows[1:] if key in r]
    if values:
        print(f"FIG {sys.argv[2]}_{key.replace('/', '_')}={statistics.median(values):.3f}")
EOF
  }
  # mismatch_kl right after each reload is the exactness check: ~1e-4..1e-3 in bf16; growing = stale weights
  run rl deployment=colocated_gpu orchestrator.max_async_level=0
  run opd deployment=colocated_gpu training_mode=opd teacher=local_vllm orchestrator.max_async_level=0
  run lora deployment=colocated_gpu lora=on orchestrator.max_async_level=0
  # the devices this process may use (CUDA_VISIBLE_DEVICES, a MIG slice counts once), not the machine's lines
  if (( $($PY -c 'import torch; print(torch.cuda.device_count())') >= 2 )); then  # a GPU each: NCCL between them
    run nccl deployment=gpu inference.weight_transfer=nccl orchestrator.max_async_level=0
  else
    echo "FIG nccl_skipped=needs 2 GPUs"
  fi
  echo "FIG gpu_peak_used_mib=$(sort -n "$OUT/gpu_memory_mib.txt" | tail -1)"
  ;;
*)
  echo "unknown part $PART: use trainer or server" >&2
  exit 2
  ;;
esac
