#!/usr/bin/env bash
# The what-if check (issue #27) in one command on a GPU machine: every part below builds its
# variants, traces its base and times every variant with CUPTI in shuffled rounds; then
# (CHECK=1, the default) the host half predicts each change from the base alone and prints
# predicted / interval / measured / error, writing whatif_table.md / .json to CHECK_OUT
# (default bench/results/whatif):
#
#     bash bench/whatif_all_gpu.sh                    # every part, then the check
#
# (H100, gpu57: the GEMM parts and their check 474 s, the FA4 parts 471 s, then their check;
# gpu62: the GEMM parts with the cluster probe and quack's nine probed launches 287 s, the
# FA4 parts 332 s, both CHECK=0)
#
# PARTS picks parts (default: all the check reads: chain cluster_gap quack gemm_ze persistent_ze
# fa4_b1s4096 fa4 fa4_causal fa4_small; gemm and persistent are the level-2 bases, history).
# The device tool's calls last 10 minutes at most: there, run two halves with CHECK=0,
# PARTS="chain cluster_gap quack gemm_ze persistent_ze fa4_b1s4096" and
# PARTS="fa4 fa4_causal fa4_small", and the check on the CPU box (python bench/whatif_check.py
# GPU_OUT).
# TRACES: traced launches per zero-edit base, default 3; LIGHTER: probed launches of the GEMMs'
# bases at half the memory load (the model's second point on the loads' latency), default 3; NO_BARRIERS=1: FA4's recordings without
# their named barriers; quack's QUACK_PROBED probed launches (default 9: its 2- and 3-stage rows
# move with the probed launch's memory state and the traced launches read those like them in
# span: of three, one alone on three runs of eleven, gpu54/56/59, errors -6.71/-1.80/+7.33;
# stop 58), QUACK_ROUNDS timing rounds (default 40: a round's 4 -> 2 change spreads +-2.8
# points), QUACK_PROBE_EVERY (probe one load in N, default 7), QUACK_PROBE_VARIANTS (variants
# traced with the probes too: diagnosis), GEMM_PROBE_VARIANTS (the same for ws_gemm's and the
# persistent GEMM's variants), HOLD_CLUSTER (2: ws_gemm's lighter launches with the SMs held
# in pairs), QUACK_SLOWED, GEMM_SLOWED, PERSISTENT_SLOWED (comma-separated delays, ns: the
# base's probed launches with its consumers slowed by each, --slowed: its loads at a lower
# throughput on every SM; stop 64). Every part writes to its own folder under PARTS_DIR
# (default /tmp/parts), archived into $OUT/<part>.tar (the device tool returns at most 8
# files).
# Needs .gpu/ (../shared/gpu/make-bundle.sh) and .whl/ (requirements-gpu.txt).
set -uo pipefail
source bench/tools/gpu_env.sh || exit 1
FINAL=$OUT
nvidia-smi --query-gpu=name,driver_version,serial,uuid --format=csv,noheader | tee "$FINAL/device.txt"  # which GPU: a run's level can be its own (placement_h100.txt)
PARTS_DIR=${PARTS_DIR:-/tmp/parts}
mkdir -p "$PARTS_DIR" && cp "$FINAL/device.txt" "$PARTS_DIR/device.txt"
RUN_PARTS=${PARTS:-chain cluster_gap quack gemm_ze persistent_ze fa4_b1s4096 fa4 fa4_causal fa4_small}
part() {  # part NAME COMMAND...: run with OUT=$PARTS_DIR/NAME, archive the folder (in
  # 15 MiB pieces NAME.tar.part-aa, -ab, ... where larger: the device tool returns files of
  # at most 16 MiB; join them with cat)
  local name=$1; shift
  mkdir -p "$PARTS_DIR/$name"
  ( export OUT="$PARTS_DIR/$name"; "$@" 2>&1 | tee "$PARTS_DIR/$name/stdout.log" | tail -${TAIL:-15} )
  tar cf "$FINAL/$name.tar" -C "$PARTS_DIR" $name
  if [ "$(stat -c %s "$FINAL/$name.tar")" -gt 15728640 ]; then
    split -b 15m "$FINAL/$name.tar" "$FINAL/$name.tar.part-" && rm "$FINAL/$name.tar"
  fi
}
for p in $RUN_PARTS; do
  case $p in
    fa4) part fa4 python bench/fa4_whatif_gpu.py ${NO_BARRIERS:+--no-barriers} --traces ${TRACES:-3} --rounds ${ROUNDS:-20} --sms ${SMS:-12} --block-rounds ${BLOCK_ROUNDS:-10} ;;
    fa4_small) part fa4_small python bench/fa4_whatif_gpu.py ${NO_BARRIERS:+--no-barriers} --traces ${TRACES:-3} --shape 1,1024,16,128 --variants base,stages1,stages3 --rounds ${ROUNDS:-30} --sms ${SMS:-132} --block-rounds ${BLOCK_ROUNDS:-10} ;;
    fa4_b1s4096) part fa4_b1s4096 python bench/fa4_whatif_gpu.py ${NO_BARRIERS:+--no-barriers} --traces ${TRACES:-3} --shape 1,4096,16,128 --variants base,stages1,stages3 --rounds ${ROUNDS:-20} --sms ${SMS:-132} --block-rounds ${BLOCK_ROUNDS:-10} ;;
    fa4_causal) part fa4_causal python bench/fa4_whatif_gpu.py ${NO_BARRIERS:+--no-barriers} --traces ${TRACES:-3} --causal --rounds ${ROUNDS:-20} --sms ${SMS:-12} --block-rounds ${BLOCK_ROUNDS:-10} ;;
    quack) part quack python bench/quack_whatif_gpu.py --traces ${TRACES:-3} --probed ${QUACK_PROBED:-9} ${QUACK_PROBE_EVERY:+--load-arrivals $QUACK_PROBE_EVERY} ${QUACK_PROBE_VARIANTS:+--probe-variants $QUACK_PROBE_VARIANTS} ${QUACK_SLOWED:+--slowed $QUACK_SLOWED} --lighter-load ${LIGHTER:-3} --rounds ${QUACK_ROUNDS:-${ROUNDS:-40}} ;;
    gemm) part gemm python bench/whatif_gpu.py --rounds ${ROUNDS:-30} ;;
    persistent) part persistent python bench/persistent_gpu.py --rounds ${ROUNDS:-20} ;;
    gemm_ze) part gemm_ze python bench/whatif_gpu.py --zero-edit --no-level2 --traces ${TRACES:-3} --lighter-load ${LIGHTER:-3} ${HOLD_CLUSTER:+--hold-cluster $HOLD_CLUSTER} ${GEMM_PROBE_VARIANTS:+--probe-variants $GEMM_PROBE_VARIANTS} ${GEMM_SLOWED:+--slowed $GEMM_SLOWED} --rounds ${ROUNDS:-30} ;;
    chain) part chain python bench/record_cost.py chain --iters 5000 --rounds 10 ;;  # one record's cost on a dependency chain: the time the model removes per record
    cluster_gap) part cluster_gap python bench/cluster_launch_gap.py --sizes 1,2 ;;  # a cluster launch's own gap between CTAs on an SM: a change of the cluster moves the model's by it
    persistent_ze) part persistent_ze python bench/whatif_gpu.py --zero-edit --no-level2 --traces ${TRACES:-3} --persistent --mnk 4096,4096,1024 --lighter-load ${LIGHTER:-3} ${GEMM_PROBE_VARIANTS:+--probe-variants $GEMM_PROBE_VARIANTS} ${PERSISTENT_SLOWED:+--slowed $PERSISTENT_SLOWED} --rounds ${ROUNDS:-30} ;;
  esac
done
ls -la "$FINAL"
if [ "${CHECK:-1}" = 1 ]; then  # the host half on what this call's parts wrote: the table
  python bench/whatif_check.py "$PARTS_DIR" --only $RUN_PARTS --out "${CHECK_OUT:-bench/results/whatif}" 2>&1 | tee "$FINAL/check.log"
fi
