"""InstructLab SDG's way of calling a backend, as a reference for sdgd.

LLMBlock cuts the dataset into shards of batch_size rows and maps them over a
ThreadPoolExecutor of num_workers threads; each shard calls one shared
OpenAI client (httpx underneath) either once with the list of prompts
(completions against a server that takes lists) or once per row, one after
the other (chat). This reproduces that call pattern with httpx directly,
with openai-python's connection limits.

Prints one JSON line: rows, seconds, rows_per_s, cpu_s.
"""
import concurrent.futures

import httpx

import common


def run_shard(client, args, prompts):
    if args.api == "completions" and args.batched:
        body = {"model": args.model, "prompt": prompts, "max_tokens": 16}
        reply = client.post(args.url + "/completions", json=body)
        reply.raise_for_status()
        choices = reply.json()["choices"]
        assert len(choices) == len(prompts)
        return [c["text"] for c in sorted(choices, key=lambda c: c["index"])]
    outputs = []
    for prompt in prompts:
        if args.api == "chat":
            body = {"model": args.model, "max_tokens": 16,
                    "messages": [{"role": "user", "content": prompt}]}
            reply = client.post(args.url + "/chat/completions", json=body)
            reply.raise_for_status()
            outputs.append(reply.json()["choices"][0]["message"]["content"])
        else:
            body = {"model": args.model, "prompt": prompt, "max_tokens": 16}
            reply = client.post(args.url + "/completions", json=body)
            reply.raise_for_status()
            outputs.append(reply.json()["choices"][0]["text"])
    return outputs


def main():
    p = common.parser(__doc__)
    p.add_argument("--num_workers", type=int, default=32)
    args = p.parse_args()

    def run(prompts):
        shards = [prompts[i:i + args.batch_size]
                  for i in range(0, len(prompts), args.batch_size)]
        # openai-python's defaults: 1000 connections, 100 kept alive.
        limits = httpx.Limits(max_connections=1000,
                              max_keepalive_connections=100)
        with httpx.Client(limits=limits, timeout=600) as client:
            with concurrent.futures.ThreadPoolExecutor(args.num_workers) as pool:
                return [o for shard in pool.map(
                    lambda s: run_shard(client, args, s), shards) for o in shard]

    common.measure_and_print(common.read_prompts(args.input), run)


if __name__ == "__main__":
    main()
