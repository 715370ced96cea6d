#!/usr/bin/env bash
# Re-runs the benchmarks behind docs/benchmarks.md and writes their raw JSON (and Markdown) into docs/results/.
# Then `python -m tools.docs.tables --write` regenerates every table and inline value of the docs from that JSON.
#
#   bash tools/bench/run_benchmarks.sh speed              # the speed bench alone (about 30-60 min on 2 cores)
#   bash tools/bench/run_benchmarks.sh headline methods   # some of: headline methods defaults speed chunked prefill multi
#                                                  # batch niah peers peersdefault longmem longcost longdoc decodeprofile
#                                                  # niahlong beyond
#                                                  # beyonddefault beyondseed1 beyondtune tunecausal tunewords tunewindow
#                                                  # tuneshared wordsample tunewordslarge
#                                                  # niahbeyond
#                                                  # methodstiming methodstimingdefault selectioncost
#                                                  # (default: all of them)
#
# Each run takes /tmp/snapkv-heavy.lock (shared with other heavy jobs on the machine; the defaults sweep takes it once
# for its nine runs) and writes to a temporary file first, so a failed run leaves the committed results alone.
# Accuracy runs use one thread (they only count answers; on a shared 2-core machine one thread wastes less); the speed
# bench uses one thread too. The code that runs is this checkout's (PYTHONPATH), whichever environment provides
# `snapkv` and its dependencies: ./.venv if there is one, else the first on PATH (or SNAPKV_VENV=/path/to/venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="${SNAPKV_VENV:-$PWD/.venv}/bin:$PATH"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out=docs/results
mkdir -p "$out/defaults" "$out/niah"

lock=/tmp/snapkv-heavy.lock
holding=  # set while a group of runs holds the lock (one wait in the queue for the group, not one per run)

run() {  # output.json, then the snapkv arguments
  local target=$1; shift
  local partial="$target.partial"
  echo "[$(date -u +%H:%M:%S)] snapkv $*" >&2
  if [ -n "$holding" ]; then
    snapkv "$@" --json > "$partial"
  else
    flock "$lock" snapkv "$@" --json > "$partial"
  fi
  mv "$partial" "$target"
}

hold() { exec 9> "$lock"; flock 9; holding=1; }
release() { holding=; flock -u 9; exec 9>&-; }

headline() {  # SnapKV vs the full cache on the single needle, one run per length, 40 samples each
  for length in 4096 8192; do
    OMP_NUM_THREADS=1 run "$out/accuracy_headline_$((length / 1024))k.json" bench accuracy --methods full,snapkv \
      --budgets 128,256,512,1024,2048 --lengths "$length" --tasks single_needle --samples 40
  done
}

methods() {  # every method and task at 2k tokens, 8 samples per task
  OMP_NUM_THREADS=1 run "$out/accuracy_methods_2k.json" bench accuracy \
    --methods full,snapkv,pyramidkv,h2o,streamingllm,random --budgets 128,256,512,1024 --lengths 2048 \
    --tasks single_needle,multi_key,multi_value,variable_tracking,question_first --samples 8
}

defaults() {  # SnapKV settings on the tune split (never on reported samples): 2k tokens, single needle
  sweep() {
    local name=$1; shift
    OMP_NUM_THREADS=1 run "$out/defaults/$name.json" bench accuracy --split tune --methods full,snapkv \
      --budgets 256,1024 --lengths 2048 --tasks single_needle --samples 8 "$@"
  }
  hold
  sweep avgpool5 --pooling avgpool --kernel 5
  sweep avgpool7 --pooling avgpool --kernel 7
  sweep maxpool7 --pooling maxpool --kernel 7
  sweep maxpool11 --pooling maxpool --kernel 11
  sweep maxpool15 --pooling maxpool --kernel 15
  sweep maxpool21 --pooling maxpool --kernel 21
  sweep maxpool15-gqa-max --pooling maxpool --kernel 15 --gqa max
  sweep maxpool15-window16 --pooling maxpool --kernel 15 --window 16
  sweep maxpool15-window64 --pooling maxpool --kernel 15 --window 64
  release
}

speed() {  # 1k-8k tokens, the default method at budgets 256 and 1024, one warm-up round and 3 interleaved rounds,
  # one thread (two threads on a 2-core machine shared with anything else wait on each other)
  OMP_NUM_THREADS=1 run "$out/speed.json" bench speed --lengths 1024,2048,4096,8192 --budgets 256,1024 --max-new-tokens 64 \
    --repeats 3 --warmup 1
}

chunked() {  # the default method's peak memory at 8k with prefill chunks of 2048 (compare with speed.json's one pass)
  OMP_NUM_THREADS=1 run "$out/speed_chunked.json" bench speed --lengths 8192 --budgets 1024 --max-new-tokens 64 --repeats 3 --warmup 1 \
    --prefill-chunk 2048
}

multi() {  # several questions about one document (docs/multi_question.md), the default method, one thread (15 min)
  echo "[$(date -u +%H:%M:%S)] tools/bench/multi_question_bench.py" >&2
  flock "$lock" python -m tools.bench.multi_question_bench --threads 1 --dtype-check \
    --out docs/multi_question_bench.json.partial > /dev/null
  mv docs/multi_question_bench.json.partial docs/multi_question_bench.json
}

batch() {  # snapkv batch against a shell loop of snapkv ask, and with Ray (docs/batch.md), the default method, torch's
  # default threads (about 6 min)
  echo "[$(date -u +%H:%M:%S)] tools/bench/batch_bench.py" >&2
  flock "$lock" python -m tools.bench.batch_bench --out docs/batch_bench.json.partial > /dev/null
  mv docs/batch_bench.json.partial docs/batch_bench.json
}

niah() {  # the public Needle In A Haystack, 1k-8k x 0-100%, then its headline figure (several hours on 2 cores)
  run "$out/niah/niah.json" bench niah --lengths 1024,2048,4096,6144,8192 --depths 0,25,50,75,100 \
    --methods full,snapkv,pyramidkv,h2o,tova,streamingllm --budgets 256,1024 --max-new-tokens 32 \
    --markdown "$out/niah/niah.md" --png "$out/niah/niah_all.png"
  python -m tools.docs.niah_figure "$out/niah/niah.json" "$out/niah/niah_headline.png"
}

prefill() {  # the prefill of snapkv ask (the default method; SnapKV beside it) against plain transformers, fresh
  # processes taking turns (about 15 min)
  echo "[$(date -u +%H:%M:%S)] tools/bench/prefill_bench.py" >&2
  OMP_NUM_THREADS=1 flock "$lock" python -m tools.bench.prefill_bench --length 8192 --budget 1024 --rounds 3 \
    --variants plain,default,snapkv,full --json "$out/prefill.json.partial"
  mv "$out/prefill.json.partial" "$out/prefill.json"
}

longmem() {  # where the prefill's peak comes from with gemma3-270m at 8k-32k tokens, one thread (about 12 min)
  echo "[$(date -u +%H:%M:%S)] tools/bench/long_memory_bench.py" >&2
  OMP_NUM_THREADS=1 flock "$lock" python -m tools.bench.long_memory_bench \
    --runs 8192:0,8192:2048,8192:1024,16384:2048,16384:1024,32768:2048,32768:1024 --out "$out/long_memory.json.partial"
  mv "$out/long_memory.json.partial" "$out/long_memory.json"
}

longcost() {  # cost against prompt length to 32k with gemma3-270m, one fresh process per point, one thread (45 min)
  echo "[$(date -u +%H:%M:%S)] tools/bench/long_cost_bench.py" >&2
  OMP_NUM_THREADS=1 flock "$lock" python -m tools.bench.long_cost_bench --model gemma3-270m --threads 1 \
    --lengths 1024,2048,4096,8192,16384,32768 --budgets 1024,256,2048 --out "$out/long_cost.json.partial"
  mv "$out/long_cost.json.partial" "$out/long_cost.json"
  python -m tools.bench.long_cost_bench --plot "$out/long_cost.json" --png docs/long_cost_curves.png > /dev/null
}

longdoc() {  # snapkv ask about a 44-page PDF (about 24k tokens) with gemma3-270m at budget 1024, as a user runs it
  # (the default method), one thread
  echo "[$(date -u +%H:%M:%S)] tools/bench/long_document_run.py" >&2
  OMP_NUM_THREADS=1 flock "$lock" python -m tools.bench.long_document_run --pages 44 --out "$out/long_document.json.partial"
  mv "$out/long_document.json.partial" "$out/long_document.json"
}

decodeprofile() {  # the output projection's share of a decode step with gemma3-270m's 262k vocabulary (1 min)
  echo "[$(date -u +%H:%M:%S)] tools/probes/decode lm-head" >&2
  flock "$lock" python -m tools.probes.decode lm-head --model gemma3-270m --length 1024 --new-tokens 32 --threads 1 \
    --out "$out/decode_profile.json.partial"
  mv "$out/decode_profile.json.partial" "$out/decode_profile.json"
}

niahlong() {  # the public needle with gemma3-270m, full cache and SnapKV 1024, one thread: 16k/32k (45 min), 4k/8k
  OMP_NUM_THREADS=1 run "$out/niah/niah_long.json" bench niah --model gemma3-270m --lengths 16384,32768 \
    --depths 0,25,50,75,100 --methods full,snapkv --budgets 1024 --max-new-tokens 32
  OMP_NUM_THREADS=1 run "$out/niah/niah_long_4k_8k.json" bench niah --model gemma3-270m --lengths 4096,8192 \
    --depths 0,25,50,75,100 --methods full,snapkv --budgets 1024 --max-new-tokens 32
}

# the CLI's default method, as a bench label (snapkv_cli.bench.grid.default_label())
default_label=${DEFAULT_LABEL:-$(python -c 'from snapkv_cli.bench.grid import default_label; print(default_label())')}

beyond() {  # issue 17: every method and the default at budgets 64-1024, 30 samples, one shard per length and task,
  # one thread (about 40 min a shard at 2k, an hour at 4k, 80-125 at 8k); a shard already in docs/results/beyond/ is not
  # run again. The 2k and 4k shards were run before the default was chosen, without it (beyonddefault adds it).
  mkdir -p "$out/beyond"
  local length task
  for length in ${BEYOND_LENGTHS:-2048 4096 8192}; do
    for task in ${BEYOND_TASKS:-single_needle multi_key multi_value variable_tracking question_first}; do
      [ -f "$out/beyond/${length}_${task}.json" ] && continue
      OMP_NUM_THREADS=1 run "$out/beyond/${length}_${task}.json" bench accuracy \
        --methods "full,snapkv,pyramidkv,adakv,criticalkv,defensivekv,chunkkv,$default_label" \
        --budgets 64,128,256,512,1024 --lengths "$length" --tasks "$task" --samples 30
    done
  done
}

beyonddefault() {  # issue 17: the default chosen on the tune split, on every committed test shard's samples (paired
  # with that shard's full cache) that lacks it, one thread; a result already in docs/results/beyond/ is not run again.
  # DEFAULT_LABEL=defensivekv+uniformheads re-runs the first choice (the centered pooling window).
  local length task label=$default_label
  for length in ${BEYOND_LENGTHS:-2048 4096 8192}; do
    for task in ${BEYOND_TASKS:-single_needle multi_key multi_value variable_tracking question_first}; do
      [ -f "$out/beyond/${length}_${task}.json" ] || continue
      [ -f "$out/beyond/${length}_${task}_$label.json" ] && continue
      grep -q "\"method\": \"$label\"" "$out/beyond/${length}_${task}.json" && continue  # the shard ran it
      OMP_NUM_THREADS=1 run "$out/beyond/${length}_${task}_$label.json" bench accuracy \
        --methods "$label" --budgets 64,128,256,512,1024 --lengths "$length" --tasks "$task" --samples 30
    done
  done
}

beyondtune() {  # issue 17's tune split: the candidates for the default method at budgets 128, 256 and 1024, 10
  # samples of every task at 4k tokens, then 30 more of two tasks, one thread (about 90 min)
  mkdir -p "$out/beyond"
  OMP_NUM_THREADS=1 run "$out/beyond/tune_4096.json" bench accuracy --split tune \
    --methods full,snapkv,pyramidkv,adakv,criticalkv,defensivekv,chunkkv,defensivekv+pyramid,defensivekv+uniformheads \
    --budgets 128,256,1024 \
    --lengths 4096 --samples 10
  # a second draw (seed 1) of the two tasks the full cache answers at 4k, for the candidates the first run left tied
  local task
  for task in single_needle multi_key; do
    OMP_NUM_THREADS=1 run "$out/beyond/tune_4096_seed1_$task.json" bench accuracy --split tune --seed 1 \
      --methods full,snapkv,adakv,defensivekv,defensivekv+pyramid,defensivekv+uniformheads --budgets 128,256 \
      --lengths 4096 --tasks "$task" --samples 30
  done
}

beyondseed1() {  # issue 17: a second test draw (seed 1) of the 4k needle and multi_key tasks for the two windows
  # of the default at 128 and 256, with the full cache, SnapKV and DefensiveKV beside them, one thread (20 min a task)
  local task
  for task in single_needle multi_key; do
    OMP_NUM_THREADS=1 run "$out/beyond/4096_${task}_seed1.json" bench accuracy --seed 1 \
      --methods full,snapkv,defensivekv,defensivekv+uniformheads,defensivekv+uniformheads+causalpool \
      --budgets 128,256 --lengths 4096 --tasks "$task" --samples 30
  done
}

tunecausal() {  # issue 17: the causal pooling window against the centered one on the tune split's pairs of
  # beyondtune, for the default method and SnapKV, one thread (about 60 min)
  local task
  for task in single_needle multi_key; do
    OMP_NUM_THREADS=1 run "$out/beyond/tune_4096_seed1_${task}_causalpool.json" bench accuracy --split tune --seed 1 \
      --methods defensivekv+uniformheads+causalpool,snapkv+causalpool --budgets 128,256 --lengths 4096 \
      --tasks "$task" --samples 30
  done
  OMP_NUM_THREADS=1 run "$out/beyond/tune_4096_causalpool.json" bench accuracy --split tune \
    --methods defensivekv+uniformheads+causalpool,snapkv+causalpool --budgets 128,256,1024 --lengths 4096 \
    --tasks single_needle,multi_key,multi_value --samples 10
}

tunewords() {  # issue 17: whole words on the default method, on the tune split's pairs of beyondtune, one thread
  # (about 45 min)
  local task label=defensivekv+uniformheads+causalpool+wholewords
  for task in single_needle multi_key; do
    OMP_NUM_THREADS=1 run "$out/beyond/tune_4096_seed1_${task}_wholewords.json" bench accuracy --split tune --seed 1 \
      --methods $label --budgets 128,256 --lengths 4096 --tasks "$task" --samples 30
  done
  OMP_NUM_THREADS=1 run "$out/beyond/tune_4096_wholewords.json" bench accuracy --split tune \
    --methods $label --budgets 128,256,1024 --lengths 4096 --tasks single_needle,multi_key,multi_value --samples 10
}

tunewindow() {  # issue 17: a 16-token observation window against 32 for the default and SnapKV at 128 and 256, on
  # the seed-1 tune pairs of beyondtune, one thread (about 12 min a task)
  local task
  for task in single_needle multi_key; do
    OMP_NUM_THREADS=1 run "$out/beyond/tune_4096_seed1_${task}_window16.json" bench accuracy --split tune --seed 1 \
      --window 16 --methods full,defensivekv+uniformheads+causalpool,snapkv --budgets 128,256 --lengths 4096 \
      --tasks "$task" --samples 30
  done
  # the first tune run's samples, for the rule in docs/benchmarks.md (about 15 min)
  OMP_NUM_THREADS=1 run "$out/beyond/tune_4096_window16.json" bench accuracy --split tune --window 16 \
    --methods full,defensivekv+uniformheads+causalpool,snapkv --budgets 128,256,1024 --lengths 4096 \
    --tasks single_needle,multi_key,multi_value --samples 10
}

tunewordslarge() {  # issue 17: whole words at 512 and 1024 on a fresh tune draw (seed 2), one thread (about 20 min
  # a task)
  local task label=defensivekv+uniformheads+causalpool
  for task in single_needle multi_key; do
    OMP_NUM_THREADS=1 run "$out/beyond/tune_4096_seed2_${task}_wholewords.json" bench accuracy --split tune --seed 2 \
      --methods full,$label,$label+wholewords --budgets 512,1024 --lengths 4096 --tasks "$task" --samples 30
  done
}

tuneshared() {  # issue 17: the same positions in every KV head of a layer, for the default and SnapKV, on the
  # tune pairs of beyondtune (paired with its full cache), one thread (about 15 min a run)
  local task label=defensivekv+sharedheads+causalpool
  for task in single_needle multi_key; do
    OMP_NUM_THREADS=1 run "$out/beyond/tune_4096_seed1_${task}_sharedheads.json" bench accuracy --split tune --seed 1 \
      --methods $label,snapkv+sharedheads --budgets 128,256 --lengths 4096 --tasks "$task" --samples 30
  done
  OMP_NUM_THREADS=1 run "$out/beyond/tune_4096_sharedheads.json" bench accuracy --split tune \
    --methods $label,snapkv+sharedheads --budgets 128,256,1024 --lengths 4096 \
    --tasks single_needle,multi_key,multi_value --samples 10
}

wordsample() {  # issue 17: the 4k test needle both the default and SnapKV lose at 1024, through bench sample and
  # inspect --find, with and without whole words (about 3 min)
  local q='What is the secret pass code? Answer with the number.' run document
  local keys='{schema_version, model, method, settings, prompt_tokens, question, answer, found}'
  document=$(mktemp --suffix .txt)
  mkdir -p "$out/inspect"
  snapkv bench sample --task single_needle --length 4096 --samples 30 --index 18 -o "$document"
  for run in default:"" snapkv:"--method snapkv" wholewords:"--whole-words"; do
    # shellcheck disable=SC2086  # the options word-split on purpose
    OMP_NUM_THREADS=1 snapkv inspect "$document" "$q" --max-new-tokens 64 --budget 1024 --answer --find 62222 \
      --json -q ${run#*:} | jq -c "$keys" > "$out/inspect/inspect_s18_${run%%:*}.json.partial"
    mv "$out/inspect/inspect_s18_${run%%:*}.json.partial" "$out/inspect/inspect_s18_${run%%:*}.json"
  done
  rm -f "$document"
}

niahbeyond() {  # issue 17: the public needle (1k-8k x 0-100%) with the candidates for the default, then with the
  # causal pooling window, one thread (25 + 20 min)
  OMP_NUM_THREADS=1 run "$out/niah/niah_beyond.json" bench niah --lengths 1024,2048,4096,6144,8192 \
    --depths 0,25,50,75,100 --methods full,snapkv,defensivekv,defensivekv+uniformheads --budgets 128,256,1024 \
    --max-new-tokens 32
  OMP_NUM_THREADS=1 run "$out/niah/niah_causal.json" bench niah --lengths 1024,2048,4096,6144,8192 \
    --depths 0,25,50,75,100 --methods full,defensivekv+causalpool,defensivekv+uniformheads+causalpool \
    --budgets 128,256,1024 --max-new-tokens 32
}

methodstiming() {  # issue 17: every method's prefill and decode next to SnapKV's at 8k tokens, budget 256, one thread
  echo "[$(date -u +%H:%M:%S)] tools/bench/methods_timing.py" >&2
  OMP_NUM_THREADS=1 flock "$lock" python -m tools.bench.methods_timing --length 8192 --budget 256 --rounds 4 \
    --out "$out/methods_timing.json.partial"
  mv "$out/methods_timing.json.partial" "$out/methods_timing.json"
}

methodstimingdefault() {  # the CLI's default method beside SnapKV, as methodstiming measures the others (about 6 min)
  echo "[$(date -u +%H:%M:%S)] tools/bench/methods_timing.py --methods $default_label" >&2
  OMP_NUM_THREADS=1 flock "$lock" python -m tools.bench.methods_timing --length 8192 --budget 256 --rounds 3 \
    --methods "$default_label" --out "$out/methods_timing_default.json.partial"
  mv "$out/methods_timing_default.json.partial" "$out/methods_timing_default.json"
}

selectioncost() {  # every method's selection against its one-pass prefill, 2k-8k tokens, 1 and 2 threads; -Q questions
  echo "[$(date -u +%H:%M:%S)] tools/bench/selection_cost.py" >&2
  flock "$lock" python -m tools.bench.selection_cost --rounds 1 --out "$out/selection_cost.json.partial"
  mv "$out/selection_cost.json.partial" "$out/selection_cost.json"
}

peers() {  # kvpress and plain transformers beside snapkv-cli on the same prompts (docs/peers.md), one thread each
  local venv=${KVPRESS_VENV:-$PWD/.venv-kvpress}
  [ -x "$venv/bin/python" ] || bash tools/bench/peers/kvpress_venv.sh "$venv"
  mkdir -p "$out/peers"
  echo "[$(date -u +%H:%M:%S)] tools/bench/peers/peers_bench.py" >&2
  OMP_NUM_THREADS=1 flock "$lock" python -m tools.bench.peers.peers_bench --accuracy-samples 2 --kvpress-venv "$venv" \
    --json "$out/peers/peers.json.partial" --markdown "$out/peers/peers.md"
  mv "$out/peers/peers.json.partial" "$out/peers/peers.json"
}

peersdefault() {  # the CLI's default method beside kvpress's nearest press and the full cache, same prompts as peers
  local venv=${KVPRESS_VENV:-$PWD/.venv-kvpress}
  [ -x "$venv/bin/python" ] || bash tools/bench/peers/kvpress_venv.sh "$venv"
  mkdir -p "$out/peers"
  echo "[$(date -u +%H:%M:%S)] tools/bench/peers/peers_bench.py --rows full,default,kvpress-nearest" >&2
  OMP_NUM_THREADS=1 flock "$lock" python -m tools.bench.peers.peers_bench --rows full,default,kvpress-nearest \
    --accuracy-samples 2 --kvpress-venv "$venv" --json "$out/peers/peers_default.json.partial"
  mv "$out/peers/peers_default.json.partial" "$out/peers/peers_default.json"
}

for part in "${@:-headline methods defaults speed chunked prefill multi batch niah peers peersdefault longmem longcost longdoc decodeprofile niahlong beyond beyonddefault beyondseed1 beyondtune tunecausal tunewords tunewindow tuneshared wordsample tunewordslarge niahbeyond methodstiming methodstimingdefault selectioncost}"; do
  for name in $part; do "$name"; done
done
