#!/usr/bin/env bash
# Second GPU pass for issue #10: SASS of the overhead probe on main (repo root) and on this
# branch, and the torch loop example again (its torch.profiler trace ships as test data).
#   source .gpu/setup.sh && bash .wt/launch/tests/gpu/run_launch_sass.sh   (from main's root)
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_launch}; mkdir -p "$OUT"
BRANCH=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONUNBUFFERED=1
( cd "$BRANCH/.." && cd .. && PYTHONPATH=$PWD:${PYTHONPATH:-} python bench/tools/sass_probe.py /tmp/sass_main ) > "$OUT/sass.log" 2>&1
echo "--- branch" >> "$OUT/sass.log"
( cd "$BRANCH" && PYTHONPATH=$PWD:${PYTHONPATH:-} python bench/tools/sass_probe.py /tmp/sass_branch ) >> "$OUT/sass.log" 2>&1
for m in atomic staged; do
  echo "--- diff $m (main < > branch), opcodes only" >> "$OUT/sass.log"
  diff <(grep -oE '/\*[0-9a-f]{4}\*/ +[A-Z0-9_.]+' /tmp/sass_main/probe_$m.sass | awk '{print $2}') \
       <(grep -oE '/\*[0-9a-f]{4}\*/ +[A-Z0-9_.]+' /tmp/sass_branch/probe_$m.sass | awk '{print $2}') >> "$OUT/sass.log"
  cp /tmp/sass_branch/probe_$m.sass "$OUT/branch_probe_$m.sass"
done
cd "$BRANCH" && export PYTHONPATH=$PWD:${PYTHONPATH:-}
python examples/torch_loop.py --out-dir "$OUT/example" > "$OUT/example.log" 2>&1
rm -f "$OUT/example/merged_trace.json"
cat "$OUT/sass.log" | head -80; cat "$OUT/example.log" | tail -5
