#!/usr/bin/env bash
# One call on a GPU machine: what a round of backend work needs measured there.
#
#   bash bench/gpu_round.sh [OUT_DIR]      (OUT_DIR default: ./gpu_round)
#   STEPS=first,train bash bench/gpu_round.sh   (a subset: tests, first, train; all three
#                                                take ~12 minutes on an H200 host; not defaults:
#                                                first_all times every workload's first call
#                                                (~9 minutes), suite runs the whole bench (~5))
#
# 1. Compiles the bytecode of torch, sympy, triton and surge first: on a machine whose
#    Python environment has no compiled bytecode, every fresh process compiles sympy's
#    and torch's sources (~2 s) and first-call times mean nothing.
# 2. The GPU-marked tests and the kernel-compile worker tests.
# 3. Fresh-process first calls, surge and torch.compile, cold and warm, and eager's as the baseline.
# 4. Training steps with the partitioner's weights on and off (each with a fresh cache).
# Logs go to OUT_DIR; each step prints a short summary.
set -uo pipefail
out="${1:-gpu_round}"
mkdir -p "$out"
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-/tmp/surge-pycache}"
site=$(python3 -c "import sympy, os; print(os.path.dirname(os.path.dirname(sympy.__file__)))")
python3 -m compileall -q -j 0 "$site/sympy" "$site/mpmath" "$site/torch" "$site/triton" surge > /dev/null 2>&1
python3 -c "import torch, triton, sympy"

steps=",${STEPS:-tests,first,train},"
if [[ $steps == *,tests,* ]]; then
    python3 -m pytest -q -m gpu tests > "$out/gpu_tests.txt" 2>&1
    python3 -m pytest -q tests/backend/test_triton_compile_pool.py >> "$out/gpu_tests.txt" 2>&1
    echo "== tests"; grep -E "passed|failed" "$out/gpu_tests.txt"
fi

if [[ $steps == *,first,* ]]; then
    python3 bench/first_call.py --device cuda --full --only seed_block_fp32,gpt_bundled,mlp_train \
        --contenders surge,torch.compile > "$out/first_call.txt" 2>&1
    echo "== first calls"; sed -n '/^net = /,$p' "$out/first_call.txt"
fi

if [[ $steps == *,first_all,* ]]; then   # every workload (~6 minutes): the per-workload ratios
    python3 bench/first_call.py --device cuda --full --contenders surge,torch.compile > "$out/first_call_all.txt" 2>&1
    echo "== first calls, every workload"; sed -n '/^net = /,$p' "$out/first_call_all.txt"
fi

if [[ $steps == *,suite,* ]]; then     # every workload, eager / torch.compile / surge (~5 minutes)
    python3 -m surge bench --no-fresh-process-compile --no-overhead > "$out/suite.txt" 2>&1
    echo "== suite"; grep -E "^ +surge|geometric" "$out/suite.txt"
fi

if [[ $steps == *,train,* ]]; then
    workloads=mlp_train,hf_gpt2_train,hf_llama_train
    SURGE_CACHE_DIR=$(mktemp -d) python3 -c "
import runpy, sys
import surge.aot.partition as p
p.STORE_ONLY_FOR_SAVING = p.RECOMPUTE = 0.0
sys.argv = ['surge', 'bench', '--no-fresh-process-compile', '--no-overhead', '--contenders', 'eager,surge',
            '--only', '$workloads']
runpy.run_module('surge', run_name='__main__')" > "$out/train_weights_off.txt" 2>&1
    SURGE_CACHE_DIR=$(mktemp -d) python3 -m surge bench --no-fresh-process-compile --no-overhead \
        --only "$workloads" > "$out/train_weights_on.txt" 2>&1

    echo "== training, weights off (eager, surge)"; grep -E "^(mlp|hf)_|^ +surge" "$out/train_weights_off.txt"
    echo "== training, weights on";                 grep -E "^(mlp|hf)_|^ +(surge|torch)" "$out/train_weights_on.txt"
fi
