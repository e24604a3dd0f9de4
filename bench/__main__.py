"""`python -m bench [--quick] [--backends sqlite,postgres] [--lengths 100,1000] [--reps 30]`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from bench.cache import cache_main
from bench.profile import profile_main
from bench.report import render, targets, write_chart, write_json
from bench.run import BACKENDS, Config, run_benchmark
from bench.throughput import throughput_main

RESULTS = Path(__file__).resolve().parent / "results"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part.replace("_", "")) for part in text.split(",") if part)


def _backends(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown backend(s) {unknown}; choose from {BACKENDS}")
    return names


def parse_args(argv: list[str]) -> tuple[Config, Path, Path, str]:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="lengths 100 and 10,000, 10 reps: 1-3 minutes"
    )
    parser.add_argument("--backends", type=_backends, help="comma-separated: sqlite,postgres")
    parser.add_argument("--lengths", type=_ints, help="thread lengths, e.g. 100,1000,10000")
    parser.add_argument("--reps", type=int, help="reps per turn figure (reads take 4x as many)")
    parser.add_argument(
        "--policy-reps", type=int, help="measured turns per agent and length (POLICIES)"
    )
    parser.add_argument("--turns", type=int, help="turns of the scripted conversation (200)")
    parser.add_argument("--postgres-url", help="admin URL; a bench database is created beside it")
    parser.add_argument(
        "--cache", action="store_true", help="only the prompt-cache conversation (bench/cache.py)"
    )
    parser.add_argument(
        "--throughput",
        action="store_true",
        help="only turns/s with 1, 2 and 4 app processes on PostgreSQL (bench/throughput.py)",
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="only this project's turn beside LangGraph's, same thread, same run (bench/peers.py)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="only cProfile of 200 turns per backend (bench/profile.py)",
    )
    parser.add_argument(
        "--spend",
        action="store_true",
        help=(
            "only input cost per provider price table: uncached, cached, cached + tool-result "
            "eviction (bench/spend.py)"
        ),
    )
    parser.add_argument(
        "--recall",
        action="store_true",
        help="only the recall benchmark by memory layer and summarizer style, one markdown "
        "table (bench/recall_layers.py; with --quick: 120 turns, seed 0, window 20)",
    )
    parser.add_argument(
        "--recall-legacy",
        action="store_true",
        help="only the first recall benchmark (one sentence pattern; --recall-summarizers "
        "llama/endpoint run model summarizers on it: bench/recall.py)",
    )
    parser.add_argument(
        "--recall-windows", type=_ints, help="--recall: window sizes (20,40; --quick: 20)"
    )
    parser.add_argument(
        "--recall-styles",
        help="--recall: summarizer styles (default all: "
        "compact,verbose,verbose-nocompress,junk,empty,down)",
    )
    parser.add_argument(
        "--recall-search",
        action="store_true",
        help="only recall with the history search tool on, beside without (bench/recall_search.py)",
    )
    parser.add_argument(
        "--recall-clear-tool-results",
        type=int,
        metavar="K",
        help="--recall: the agent clears tool results past the newest K from its prompts at "
        "once (history clear_tool_results_keep=K, step 1 token; off by default)",
    )
    parser.add_argument(
        "--recall-turns", type=_ints, help="conversation lengths (120,500; --quick: 120)"
    )
    parser.add_argument(
        "--recall-summarizers",
        default="reference,verbose",
        help="comma-separated: reference,verbose,llama,endpoint (llama needs `make llama`; "
        "endpoint reads AGENT_BENCH_SUMMARIZER_URL, _MODEL, _API_KEY)",
    )
    parser.add_argument(
        "--recall-seeds",
        type=_ints,
        help="conversation seeds (--recall: 0,1, --quick: 0; the legacy ones: 0)",
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "latest.json")
    parser.add_argument("--chart", type=Path, default=RESULTS / "chart.png")
    args = parser.parse_args(argv)
    config = Config.quick() if args.quick else Config()
    if args.backends:
        config.backends = args.backends
    if args.lengths:
        config.lengths = tuple(sorted(args.lengths))
    if args.reps:
        config.reps = args.reps
    if args.policy_reps:
        config.policy_reps = args.policy_reps
    if args.turns:
        config.conversation_turns = args.turns
    if args.postgres_url:
        config.postgres_url = args.postgres_url
    recall = args.recall and not args.recall_legacy
    if recall:
        from bench.recall_layers import SEEDS, TURNS, WINDOWS
        from bench.recall_styles import STYLES

        quick = args.quick
        config.recall_turns = args.recall_turns or ((120,) if quick else TURNS)
        config.recall_seeds = args.recall_seeds or ((0,) if quick else SEEDS)
        config.recall_windows = args.recall_windows or ((20,) if quick else WINDOWS)
        styles = args.recall_styles.split(",") if args.recall_styles else STYLES
        config.recall_styles = tuple(n.strip() for n in styles if n.strip())
        config.recall_clear_keep = args.recall_clear_tool_results
    else:
        config.recall_turns = args.recall_turns or (120, 500)
        config.recall_seeds = args.recall_seeds or (0,)
    config.recall_summarizers = tuple(
        n.strip() for n in args.recall_summarizers.split(",") if n.strip()
    )
    only = (
        "spend"
        if args.spend
        else "recall-search"
        if args.recall_search
        else "recall-legacy"
        if args.recall_legacy
        else "recall"
        if args.recall
        else "cache"
        if args.cache
        else "throughput"
        if args.throughput
        else "profile"
        if args.profile
        else "peers"
        if args.peers
        else ""
    )
    return config, args.json, args.chart, only


def main(argv: list[str] | None = None) -> int:
    config, json_path, chart_path, only = parse_args(sys.argv[1:] if argv is None else argv)
    if only == "recall-search":
        from bench.recall_search import recall_search_main

        return recall_search_main(
            RESULTS / "recall-search.json", config.recall_turns, config.recall_seeds
        )
    if only == "recall":
        from bench.recall_layers import layers_main

        name = "recall-layers-quick" if config.mode == "quick" else "recall-layers"
        return layers_main(
            RESULTS / f"{name}.json",
            RESULTS / f"{name}.png",
            config.recall_turns,
            config.recall_seeds,
            config.recall_windows,
            config.recall_styles,
            clear_keep=config.recall_clear_keep,
        )
    if only == "recall-legacy":
        from bench.recall import recall_main

        suffix = "-".join(config.recall_summarizers)
        return recall_main(
            RESULTS / f"recall-{suffix}.json",
            RESULTS / f"recall-{suffix}.png",
            config.recall_turns,
            config.recall_summarizers,
            config.recall_seeds,
        )
    if only == "cache":
        return cache_main(RESULTS / "cache.json")
    if only == "spend":
        from bench.spend import spend_main

        return spend_main(RESULTS / "spend.json")
    if only == "profile":
        return profile_main(config)
    if only == "peers":
        from bench.peers import peers_main  # LangGraph is imported only when it is measured

        return peers_main(RESULTS / "peers.json", config)
    if only == "throughput":
        return throughput_main(RESULTS / "throughput.json", config)
    results = asyncio.run(run_benchmark(config))
    results["targets"] = targets(results)
    print(render(results))
    write_json(results, json_path)
    write_chart(results, chart_path)
    print(f"\nwrote {json_path} and {chart_path} ({results['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
