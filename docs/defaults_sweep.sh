#!/usr/bin/env bash
# Reproduces the "Choosing the CLI defaults" table of docs/benchmarks.md: SnapKV settings on the default model,
# single 5-digit needle in ~2k tokens of prose, budgets 256 and 1024, 3 samples (the full cache runs alongside).
set -euo pipefail
out=${1:-docs/results/defaults}
mkdir -p "$out"
run() {  # name, then options
  local name=$1; shift
  snapkv bench accuracy --methods full,snapkv --budgets 256,1024 --lengths 2048 --tasks single_needle \
    --samples 3 --json "$@" > "$out/$name.json" 2> /dev/null
}
run avgpool5 --pooling avgpool --kernel 5
run avgpool7 --pooling avgpool --kernel 7
run maxpool7 --pooling maxpool --kernel 7
run maxpool11 --pooling maxpool --kernel 11
run maxpool15 --pooling maxpool --kernel 15
run maxpool21 --pooling maxpool --kernel 21
run maxpool15-gqa-max --pooling maxpool --kernel 15 --gqa max
run maxpool15-window16 --pooling maxpool --kernel 15 --window 16
run maxpool15-window64 --pooling maxpool --kernel 15 --window 64
python3 - "$out" <<'PY'
import json, pathlib, sys
print("| settings | full | snapkv 256 | snapkv 1024 |\n|---|---|---|---|")
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    cells = {(c["method"], c["budget"]): f'{c["correct"]}/{c["total"]}' for c in json.loads(path.read_text())["overall"]}
    print(f'| {path.stem} | {cells[("full", None)]} | {cells[("snapkv", 256)]} | {cells[("snapkv", 1024)]} |')
PY
