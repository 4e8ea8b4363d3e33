"""The cost of classifying one page's outcome (ocr_server.serving.outcome.classify), which the
server runs on every generated page after its generation, on the event loop.

Pages of `--tokens` ids (default 8192, the longest a page may generate at MAX_NEW_TOKENS 8192):
prose (no repeats: the classifier counts every n-gram), a page that loops from its first quarter,
and a short answer (512 ids). Each is classified `--repeat` times; the median, in microseconds per
page, is written as JSON:

    .venv/bin/python bench/outcome_cost.py --json outcome.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from ocr_server.serving.outcome import classify


def pages(tokens: int, seed: int = 0) -> dict[str, list[int]]:
    rng = random.Random(seed)
    prose = [rng.randrange(3, 129_000) for _ in range(tokens)]
    line = prose[:41]
    loop = prose[:tokens // 4] + (line * (tokens // len(line) + 1))[:tokens - tokens // 4]
    return {"prose": prose, "loop": loop, "short": prose[:512]}


def measure(ids: list[int], repeat: int) -> tuple[float, str]:
    outcome = classify([(ids, False)], "text")
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        classify([(ids, False)], "text")
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6, outcome


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--json", help="write the figures here as well")
    args = ap.parse_args(argv)
    figures = {"tokens": args.tokens, "repeat": args.repeat, "pages": {}}
    for name, ids in pages(args.tokens).items():
        us, outcome = measure(ids, args.repeat)
        figures["pages"][name] = {"tokens": len(ids), "outcome": outcome, "median_us": round(us, 1)}
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
