"""The strongest plain-Python way to call a backend, as a reference for sdgd.

One asyncio event loop, one aiohttp session, a semaphore bounding requests
in flight; one request per row (or per shard of prompts when batched).

Prints one JSON line: rows, seconds, rows_per_s, cpu_s.
"""
import asyncio

import aiohttp

import common


async def call(session, semaphore, args, prompts):
    async with semaphore:
        if args.api == "chat":
            body = {"model": args.model, "max_tokens": 16,
                    "messages": [{"role": "user", "content": prompts[0]}]}
            async with session.post(args.url + "/chat/completions",
                                    json=body) as reply:
                reply.raise_for_status()
                data = await reply.json(content_type=None)
                return [data["choices"][0]["message"]["content"]]
        body = {"model": args.model, "max_tokens": 16,
                "prompt": prompts if len(prompts) > 1 else prompts[0]}
        async with session.post(args.url + "/completions", json=body) as reply:
            reply.raise_for_status()
            data = await reply.json(content_type=None)
            choices = sorted(data["choices"], key=lambda c: c["index"])
            assert len(choices) == len(prompts)
            return [c["text"] for c in choices]


async def run(args, prompts):
    size = args.batch_size if args.batched else 1
    groups = [prompts[i:i + size] for i in range(0, len(prompts), size)]
    semaphore = asyncio.Semaphore(args.in_flight)
    connector = aiohttp.TCPConnector(limit=args.in_flight)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=timeout) as session:
        results = await asyncio.gather(
            *(call(session, semaphore, args, g) for g in groups))
    return [o for group in results for o in group]


def main():
    p = common.parser(__doc__)
    p.add_argument("--in_flight", type=int, default=256)
    args = p.parse_args()
    common.measure_and_print(common.read_prompts(args.input),
                             lambda prompts: asyncio.run(run(args, prompts)))


if __name__ == "__main__":
    main()
