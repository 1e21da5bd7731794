#!/usr/bin/env bash
# The GPU halves in one command on a GPU machine: every what-if part below builds its
# variants, traces its base and times every variant with CUPTI in shuffled rounds; then
# (CHECK=1, the default) the host half predicts each change from the base alone and writes
# whatif_table.md / .json to CHECK_OUT (default bench/results/whatif):
#
#     bash bench/gpu.sh                          # every what-if part, then the check
#     PARTS=light_cost CHECK=0 bash bench/gpu.sh       # what light and full zero-edit recording cost
#
# PARTS picks parts (default: all the check reads). A device call lasting 10 minutes at most
# runs two halves with CHECK=0, PARTS="chain cluster_gap quack gemm_ze persistent_ze
# fa4_b1s4096" and PARTS="fa4 fa4_causal fa4_small", then `python bench/whatif.py check
# GPU_OUT` on the CPU box (an H200: 354 s and 313 s, gpu79). TRACES: traced launches per
# base (default 3); QUACK_PROBED: quack's probed launches (default 9); ROUNDS, QUACK_ROUNDS:
# timing rounds; NO_BARRIERS=1: FA4 recorded without its named barriers. Every part writes
# to its own folder under PARTS_DIR (default /tmp/parts), archived into $OUT/<part>.tar.
# Needs .gpu/ (../shared/gpu/make-bundle.sh) and .whl/ (requirements-gpu.txt).
set -uo pipefail
source bench/tools/gpu_env.sh || exit 1
FINAL=$OUT
nvidia-smi --query-gpu=name,driver_version,serial,uuid --format=csv,noheader | tee "$FINAL/device.txt"
PARTS_DIR=${PARTS_DIR:-/tmp/parts}
mkdir -p "$PARTS_DIR" && cp "$FINAL/device.txt" "$PARTS_DIR/device.txt"
RUN_PARTS=${PARTS:-chain cluster_gap quack gemm_ze persistent_ze fa4_b1s4096 fa4 fa4_causal fa4_small}
part() {  # part NAME COMMAND...: run with OUT=$PARTS_DIR/NAME, archive the folder (in 15 MiB
  # pieces NAME.tar.part-aa, -ab, ... where larger; join them with cat)
  local name=$1; shift
  mkdir -p "$PARTS_DIR/$name"
  ( export OUT="$PARTS_DIR/$name"; "$@" 2>&1 | tee "$PARTS_DIR/$name/stdout.log" | tail -${TAIL:-15} )
  tar cf "$FINAL/$name.tar" -C "$PARTS_DIR" $name
  if [ "$(stat -c %s "$FINAL/$name.tar")" -gt 15728640 ]; then
    split -b 15m "$FINAL/$name.tar" "$FINAL/$name.tar.part-" && rm "$FINAL/$name.tar"
  fi
}
FA4="python bench/whatif.py fa4 ${NO_BARRIERS:+--no-barriers} --traces ${TRACES:-3} --block-rounds ${BLOCK_ROUNDS:-10}"
GEMM="python bench/whatif.py gemm --traces ${TRACES:-3} --rounds ${ROUNDS:-30}"
for p in $RUN_PARTS; do
  case $p in
    fa4) part fa4 $FA4 --rounds ${ROUNDS:-20} --sms ${SMS:-12} ;;
    fa4_small) part fa4_small $FA4 --shape 1,1024,16,128 --variants base,stages1,stages3 --rounds ${ROUNDS:-30} --sms ${SMS:-132} ;;
    fa4_b1s4096) part fa4_b1s4096 $FA4 --shape 1,4096,16,128 --variants base,stages1,stages3 --rounds ${ROUNDS:-20} --sms ${SMS:-132} ;;
    fa4_causal) part fa4_causal $FA4 --causal --rounds ${ROUNDS:-20} --sms ${SMS:-12} ;;
    quack) part quack python bench/whatif.py quack --traces ${TRACES:-3} --probed ${QUACK_PROBED:-9} --rounds ${QUACK_ROUNDS:-${ROUNDS:-40}} ;;
    gemm_ze) part gemm_ze $GEMM ;;
    persistent_ze) part persistent_ze $GEMM --persistent --mnk 4096,4096,1024 ;;
    chain) part chain python bench/record_cost.py chain --iters 5000 --rounds 10 ;;  # the time the model removes per record
    cluster_gap) part cluster_gap python bench/whatif.py cluster-gap --sizes 1,2 ;;  # a cluster change moves the launch gap by it
    light_cost) part light_cost python bench/kernel_cost.py light --rounds ${ROUNDS:-20} --json "$PARTS_DIR/light_cost/light_cost.json" ;;
  esac
done
ls -la "$FINAL"
if [ "${CHECK:-1}" = 1 ]; then  # the host half on what this call's parts wrote: the table
  python bench/whatif.py check "$PARTS_DIR" --only $RUN_PARTS --out "${CHECK_OUT:-bench/results/whatif}" 2>&1 | tee "$FINAL/check.log"
fi
