#!/usr/bin/env bash
# The main job on the embedded default: builds sdgd, starts llmsim (the
# project's OpenAI-compatible simulator) and sdgd on free loopback ports, runs
# `sdgctl generate` on the sample seed set and the example knowledge pipeline
# on its documents, prints the generated rows and the summaries, then stops
# both servers.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/lib.sh"

"$root/scripts/setup.sh"
use_ccache "$root"
build="$root/build/release"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$build" -j 2 --target sdgd sdgctl llmsim

work=$(mktemp -d /tmp/sdgd-demo.XXXXXX)
pids=()
stop_servers() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null || true; done
}
trap stop_servers EXIT

# 20 ms per reply, like a fast model server; the knowledge pipeline's
# prompts get the canned replies its parsers expect, all others an echo.
"$build/tools/llmsim/llmsim" --listen 127.0.0.1:0 --model granite-7b-lab \
  --latency_ms 20 --replies "$root/examples/pipelines/knowledge/replies.jsonl" \
  > "$work/llmsim.out" 2> "$work/llmsim.log" &
pids+=($!)
llmsim_port=$(wait_for_port "$work/llmsim.out" "llmsim listening on")

"$build/server/sdgd" --listen 127.0.0.1:0 --metrics_listen 127.0.0.1:0 \
  --backend "llmsim=http://127.0.0.1:$llmsim_port/v1" --state_dir "$work/state" \
  > "$work/sdgd.out" 2> "$work/sdgd.log" &
pids+=($!)
port=$(wait_for_port "$work/sdgd.out" "sdgd listening on")
metrics_port=$(wait_for_port "$work/sdgd.out" "sdgd metrics on")
echo "demo: llmsim on 127.0.0.1:$llmsim_port, sdgd on 127.0.0.1:$port (metrics :$metrics_port)"
echo
echo "What the job would take, counted by the backend's tokenizer (nothing is"
echo "sent to the model; prices in dollars per million tokens):"
"$build/client/sdgctl" estimate --server "127.0.0.1:$port" \
  --input "$root/examples/seed.jsonl" \
  --block "$root/examples/answer_block.json" --batch_size 4 --price 0.15/0.60
echo

"$build/client/sdgctl" generate --server "127.0.0.1:$port" \
  --input "$root/examples/seed.jsonl" --output "$work/generated.jsonl" \
  --block "$root/examples/answer_block.json" --batch_size 4 --num_workers 4

echo
echo "Generated rows ($work/generated.jsonl):"
cat "$work/generated.jsonl"
echo
echo "An InstructLab pipeline (examples/pipelines/knowledge: spell-check, flatten,"
echo "question/answer pairs, drop_duplicates, three judges and their filters):"
"$build/client/sdgctl" generate --server "127.0.0.1:$port" \
  --pipeline "$root/examples/pipelines/knowledge/pipeline.yaml" \
  --input "$root/examples/pipelines/knowledge/documents.jsonl" \
  --output "$work/knowledge.jsonl"
echo
echo "Pipeline rows ($work/knowledge.jsonl):"
cat "$work/knowledge.jsonl"
echo
echo "sdgd's view of the jobs:"
"$build/client/sdgctl" jobs --server "127.0.0.1:$port"
echo
echo "Server log: $work/sdgd.log"
