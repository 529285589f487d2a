#!/bin/bash
# One node's part of a Slurm sweep (see sweep.sbatch):
#
#   node.sh COMMAND... ::: VALUE...
#
# runs COMMAND once per VALUE that falls to this node (value k goes to node
# k mod $SLURM_NNODES), with `{}` in COMMAND replaced by the value, all
# reading one producer started here with `batchcast serve $SERVE_ARGS`.
# Trials get BATCHCAST_NAME (so `batchcast.Consumer()` finds the producer)
# and, when the node has GPUs, CUDA_VISIBLE_DEVICES in turn.
set -euo pipefail

: "${SLURM_JOB_ID:?run this under srun (SLURM_JOB_ID is not set)}"
node="${SLURM_NODEID:-0}"
nodes="${SLURM_NNODES:-1}"
gpus="${SLURM_GPUS_ON_NODE:-0}"
batchcast="${BATCHCAST_BIN:-batchcast}"

command=()
while [ $# -gt 0 ] && [ "$1" != ":::" ]; do command+=("$1"); shift; done
[ $# -gt 0 ] || { echo "node.sh: usage: node.sh COMMAND... ::: VALUE..." >&2; exit 2; }
shift
values=("$@")

export BATCHCAST_NAME="sweep-${SLURM_JOB_ID}-${node}"
mine=()
for k in "${!values[@]}"; do
    if [ $((k % nodes)) -eq "$node" ]; then mine+=("${values[$k]}"); fi
done
if [ ${#mine[@]} -eq 0 ]; then echo "node $node: no trials here"; exit 0; fi

# The producer waits for all of this node's trials before its first epoch,
# so that each of them reads every epoch whole.
# shellcheck disable=SC2086
"$batchcast" serve --name "$BATCHCAST_NAME" --consumers "${#mine[@]}" $SERVE_ARGS &
producer=$!
trap 'kill "$producer" 2>/dev/null || true' EXIT

pids=()
for i in "${!mine[@]}"; do
    argv=()
    for a in "${command[@]}"; do argv+=("${a//\{\}/${mine[$i]}}"); done
    if [ "$gpus" -gt 0 ]; then
        CUDA_VISIBLE_DEVICES=$((i % gpus)) "${argv[@]}" > "trial-${node}-${i}.log" 2>&1 &
    else
        "${argv[@]}" > "trial-${node}-${i}.log" 2>&1 &
    fi
    pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
kill "$producer" 2>/dev/null || true
wait "$producer" 2>/dev/null || true
echo "node $node: ${#mine[@]} trials, $failed failed"
[ "$failed" -eq 0 ]
