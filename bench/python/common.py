"""What both Python references share: their arguments, the prompts, and how
a run is measured and reported."""
import argparse
import json
import resource
import time

TEMPLATE_PREFIX = "Answer briefly. "  # the template sdgctl gets in the bench


def parser(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--url", required=True, help="base URL ending in /v1")
    p.add_argument("--input", required=True, help="JSON lines with 'question'")
    p.add_argument("--model", default="m")
    p.add_argument("--api", choices=["chat", "completions"], default="chat")
    p.add_argument("--batched", action="store_true",
                   help="completions: a shard's prompts as one list request")
    p.add_argument("--batch_size", type=int, default=8)
    return p


def read_prompts(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [TEMPLATE_PREFIX + row["question"] for row in rows]


def measure_and_print(prompts, run):
    """Runs `run(prompts)`, checks one output per prompt, prints one JSON
    line: rows, seconds, rows_per_s, cpu_s (this process, user + system)."""
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.monotonic()
    outputs = run(prompts)
    seconds = time.monotonic() - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    assert len(outputs) == len(prompts), (len(outputs), len(prompts))
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    print(json.dumps({"rows": len(prompts), "seconds": seconds,
                      "rows_per_s": len(prompts) / seconds, "cpu_s": cpu}))
