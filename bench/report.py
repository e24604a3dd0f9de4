"""Turning results into the printed tables, the targets section, latest.json and chart.png."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.cache_cold import cold_holds
from bench.stats import ratio

FLOOR_LIMIT = 1.2
FLAT_READ_LIMIT = 1.2
BYTES_LIMIT = 1.2
FLAT_TURN_LIMIT = 1.5
OVERHEAD_LIMIT_MS = 5.0
""""A few ms" of loop overhead, made a number."""
LOAD_THREAD_LIMIT_BYTES = 1024
"""What `load:thread` may journal a windowed turn: the kept seqs (10 of them take about 90 B)."""
TURN_FLOOR_LIMIT = 8.0
"""Issue 11: a turn's overhead within 8x the raw read floor, at every length."""
READ_FLOOR_LIMITS = {"postgres": 1.3, "sqlite": 1.5}
"""Issue 11: the bounded read within these of the raw floor, per backend."""
TOOL_TURN_TRANSACTIONS = 3
"""Issue 37: the durable floor, 2 committed transactions on the common path plus one per tool
round (one here); issue 11 allowed 5."""


def _lengths(backend: dict[str, Any]) -> list[int]:
    return sorted(int(k) for k in backend["lengths"])


def _table(
    header: Sequence[str], rows: Sequence[Sequence[str]], left: frozenset[int] = frozenset()
) -> str:
    """Aligned plain-text columns: numbers right-aligned, the columns in `left` left-aligned."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def _ms(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _bytes(value: int) -> str:
    if value >= 10_000_000:
        return f"{value / 1e6:,.0f} MB"
    if value >= 10_000:
        return f"{value / 1e3:,.0f} KB"
    return f"{value:,} B"


def reads_table(results: dict[str, Any]) -> str:
    header = [
        "backend",
        "messages",
        "floor ms",
        "bounded ms",
        "x floor",
        "bounded p95",
        "full ms",
        "x floor",
        "full p95",
        "full n",
        "bounded read",
        "full read",
    ]
    rows = []
    for name, backend in results["backends"].items():
        for length in _lengths(backend):
            r = backend["lengths"][str(length)]["reads"]
            floor = r["floor"]["median_ms"]
            rows.append(
                [
                    name,
                    f"{length:,}",
                    _ms(floor),
                    _ms(r["bounded"]["median_ms"]),
                    _x(ratio(r["bounded"]["median_ms"], floor)),
                    _ms(r["bounded"]["p95_ms"]),
                    _ms(r["full"]["median_ms"]),
                    _x(ratio(r["full"]["median_ms"], floor)),
                    _ms(r["full"]["p95_ms"]),
                    f"{r['full']['n']}{' (capped)' if r['full_capped'] else ''}",
                    _bytes(r["bounded_bytes"]),
                    _bytes(r["full_bytes"]),
                ]
            )
    return _table(header, rows)


def turns_table(results: dict[str, Any]) -> str:
    header = [
        "backend",
        "messages",
        "win ms",
        "win p95",
        "n",
        "x first",
        "nowin ms",
        "nowin p95",
        "n",
        "nowin/win",
        "overhead win",
        "x floor",
        "tx",
        "driver win",
        "calls",
        "python win",
        "overhead nowin",
    ]
    rows = []
    for name, backend in results["backends"].items():
        lengths = _lengths(backend)
        first = backend["lengths"][str(lengths[0])]["turn_window"]["time"]["median_ms"]
        for length in lengths:
            entry = backend["lengths"][str(length)]
            w, f = entry["turn_window"], entry["turn_nowindow"]
            rows.append(
                [
                    name,
                    f"{length:,}",
                    _ms(w["time"]["median_ms"]),
                    _ms(w["time"]["p95_ms"]),
                    str(w["time"]["n"]),
                    _x(ratio(w["time"]["median_ms"], first)),
                    _ms(f["time"]["median_ms"]),
                    _ms(f["time"]["p95_ms"]),
                    f"{f['time']['n']}{' (capped)' if f['capped'] else ''}",
                    _x(ratio(f["time"]["median_ms"], f["paired_window"]["time"]["median_ms"])),
                    _ms(w["overhead"]["median_ms"]),
                    _x(ratio(w["overhead"]["median_ms"], entry["reads"]["floor"]["median_ms"])),
                    str(w.get("transactions", "?")),
                    _ms(w["driver"]["median_ms"]),
                    str(w["driver_calls"]),
                    _ms(w["python"]["median_ms"]),
                    _ms(f["overhead"]["median_ms"]),
                ]
            )
    return _table(header, rows)


def commit_floor_table(results: dict[str, Any]) -> str:
    header = [
        "backend",
        "read floor ms",
        "commit ms",
        "x read floor",
        "turn tx",
        "tx x commit ms",
        "x read floor",
        "turn overhead ms",
        "x read floor",
        "overhead / (tx x commit)",
    ]
    rows = []
    sql_rows = []
    for name, backend in results["backends"].items():
        cf = backend.get("commit_floor")
        if cf is None:
            continue
        first = backend["lengths"][str(_lengths(backend)[0])]["turn_window"]
        tx = first.get("transactions", 0)
        least = tx * cf["commit_ms"]
        overhead = first["overhead"]["median_ms"]
        rows.append(
            [
                name,
                f"{cf['read_ms']:.3f}",
                f"{cf['commit_ms']:.3f}",
                _x(ratio(cf["commit_ms"], cf["read_ms"])),
                str(tx),
                _ms(least),
                _x(ratio(least, cf["read_ms"])),
                _ms(overhead),
                _x(ratio(overhead, cf["read_ms"])),
                _x(ratio(overhead, least)),
            ]
        )
        ts = backend.get("turn_sql_floor")
        if ts is not None:
            sql_rows.append(
                [
                    name,
                    str(ts["statements"]),
                    str(ts["commits"]),
                    f"{ts['read_ms']:.3f}",
                    _ms(ts["turn_sql_ms"]),
                    _x(ratio(ts["turn_sql_ms"], ts["read_ms"])),
                    _x(ratio(overhead, cf["read_ms"])),
                    _x(ratio(overhead, ts["turn_sql_ms"])),
                    _merged(ts),
                ]
            )
    table = _table(header, rows)
    if not sql_rows:
        return table
    sql_header = [
        "backend",
        "statements",
        "commits",
        "read floor ms",
        "turn SQL raw ms",
        "x read floor",
        "turn overhead x read floor",
        "overhead x turn SQL",
        "what-if: a statement per unit",
    ]
    return (
        table + "\n\nThe turn's own statements and commits, recorded and replayed through the raw "
        "driver with no Python around them (bench/turnsql.py; PostgreSQL one round trip per "
        "statement, BEGIN and COMMIT; SQLite each transaction in one worker-thread call). "
        "The what-if (PostgreSQL): each unit's writes sent as one statement of data-modifying "
        "CTEs in autocommit, ms and round trips (as recorded -> merged):\n"
        + _table(sql_header, sql_rows)
    )


def _merged(ts: dict[str, Any]) -> str:
    if "merged_ms" not in ts:
        return "-"
    trips = f"{ts['round_trips']} -> {ts['merged_round_trips']} trips"
    return f"{_ms(ts['merged_ms'])} ({trips})"


def bytes_table(results: dict[str, Any]) -> str:
    header = [
        "backend",
        "messages",
        "win rows",
        "win read",
        "x window",
        "nowin rows",
        "nowin read",
        "x window",
        "win journal",
        "(load:thread)",
        "nowin journal",
        "(load:thread)",
    ]
    rows = []
    for name, backend in results["backends"].items():
        for length in _lengths(backend):
            entry = backend["lengths"][str(length)]
            w, f = entry["turn_window"], entry["turn_nowindow"]
            rows.append(
                [
                    name,
                    f"{length:,}",
                    str(w["rows_read"]),
                    _bytes(w["bytes_read"]),
                    _x(ratio(w["bytes_read"], w["window_bytes"])),
                    f"{f['rows_read']:,}",
                    _bytes(f["bytes_read"]),
                    _x(ratio(f["bytes_read"], w["window_bytes"])),
                    _bytes(w["journal_bytes"]),
                    _bytes(w["load_thread_bytes"]),
                    _bytes(f["journal_bytes"]),
                    _bytes(f["load_thread_bytes"]),
                ]
            )
    return _table(header, rows)


BREAKDOWN_PARTS = [
    ("floor_us", "raw driver floor (one open connection)"),
    ("total_us", "load_thread_for_turn (the store)"),
    ("total_cold_us", "  the same, every row rebuilt (cache emptied)"),
    ("pool_us", "  pool checkout + return, no statement"),
    ("sa_read_us", "  pool + Core execute + fetch (store's way)"),
    ("sa_execute_held_us", "  Core execute + fetch, connection held"),
    ("from_row_us", "  from_row for the page"),
    ("json_decode_us", "    of which JSON validation of tool calls/results"),
    ("message_init_us", "    of which Message(...) validation"),
    ("page_model_us", "  ThreadTurnPage(...)"),
    ("autocommit_no_ping_us", "what-if: AUTOCOMMIT engine, no pre-ping"),
    ("pooled_driver_fetch_us", "what-if: pool + ONE driver call + from_row"),
    ("sqlite3_same_thread_us", "info: stdlib sqlite3, same thread, no hop"),
]


def breakdown_table(results: dict[str, Any]) -> str:
    header = ["backend", "messages", "part of the bounded read", "us / calls", "x floor / calls"]
    rows = []
    for name, backend in results["backends"].items():
        for length, parts in sorted(backend["breakdown"].items(), key=lambda kv: int(kv[0])):
            for key, label in BREAKDOWN_PARTS:
                if parts.get(key) is None:
                    continue
                rows.append(
                    [
                        name,
                        f"{int(length):,}",
                        label,
                        f"{parts[key]:,.0f}",
                        _x(ratio(parts[key], parts["floor_us"])),
                    ]
                )
    for name, backend in results["backends"].items():
        for length, parts in sorted(backend["breakdown"].items(), key=lambda kv: int(kv[0])):
            calls = parts["driver_calls"]
            for key, label in (
                ("floor", "driver calls: raw floor"),
                ("store", "driver calls: the store"),
                ("lean", "driver calls: what-if engine"),
            ):
                rows.append(
                    [name, f"{int(length):,}", label, str(len(calls[key])), " ".join(calls[key])]
                )
    return _table(header, rows, left=frozenset({2, 4}))


def _target(
    name: str,
    backend: str,
    value: float | None,
    limit: float | None,
    detail: str,
    *,
    kind: str = "ratio",
) -> dict[str, Any]:
    if value is None:
        status = "N/A"
    elif limit is None:
        status = "INFO"
    else:
        status = "PASS" if value <= limit else "MISS"
    return {
        "target": name,
        "backend": backend,
        "value": value,
        "limit": limit,
        "kind": kind,
        "status": status,
        "detail": detail,
    }


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, b in results["backends"].items():
        lengths = _lengths(b)
        lo, hi = lengths[0], lengths[-1]
        at = {n: b["lengths"][str(n)] for n in lengths}
        spread = len(lengths) > 1

        floor_ratios = {
            n: ratio(at[n]["reads"]["bounded"]["median_ms"], at[n]["reads"]["floor"]["median_ms"])
            for n in lengths
        }
        worst = max(floor_ratios, key=lambda n: floor_ratios[n])
        out.append(
            _target(
                f"bounded read <= {FLOOR_LIMIT}x raw floor",
                name,
                floor_ratios[worst],
                FLOOR_LIMIT,
                f"worst at {worst:,}; "
                + ", ".join(f"{n:,}: {v:.2f}x" for n, v in floor_ratios.items()),
            )
        )

        reads_lo, reads_hi = at[lo]["reads"], at[hi]["reads"]
        flat = ratio(reads_hi["bounded"]["median_ms"], reads_lo["bounded"]["median_ms"])
        floor_flat = ratio(reads_hi["floor"]["median_ms"], reads_lo["floor"]["median_ms"])
        out.append(
            _target(
                f"bounded read at {hi:,} <= {FLAT_READ_LIMIT}x at {lo:,}",
                name,
                flat if spread else None,
                FLAT_READ_LIMIT,
                f"the raw floor itself moved {floor_flat:.2f}x",
            )
        )

        byte_ratios = {
            n: ratio(at[n]["turn_window"]["bytes_read"], at[n]["turn_window"]["window_bytes"])
            for n in lengths
        }
        read_ratios = {
            n: ratio(at[n]["reads"]["bounded_bytes"], at[n]["reads"]["window_bytes"])
            for n in lengths
        }
        worst_b = max(byte_ratios, key=lambda n: byte_ratios[n])
        out.append(
            _target(
                f"bytes read <= {BYTES_LIMIT}x the window's own bytes",
                name,
                max(byte_ratios[worst_b], *read_ratios.values()),
                BYTES_LIMIT,
                "turn: "
                + ", ".join(f"{n:,}: {v:.2f}x" for n, v in byte_ratios.items())
                + "; bounded read: "
                + ", ".join(f"{n:,}: {v:.2f}x" for n, v in read_ratios.items()),
            )
        )

        turn_flat = ratio(
            at[hi]["turn_window"]["time"]["median_ms"], at[lo]["turn_window"]["time"]["median_ms"]
        )
        out.append(
            _target(
                f"turn with window at {hi:,} <= {FLAT_TURN_LIMIT}x at {lo:,}",
                name,
                turn_flat if spread else None,
                FLAT_TURN_LIMIT,
                ", ".join(
                    f"{n:,}: {_ms(at[n]['turn_window']['time']['median_ms'])} ms" for n in lengths
                ),
            )
        )

        grow = ratio(
            at[hi]["turn_nowindow"]["time"]["median_ms"],
            at[lo]["turn_nowindow"]["time"]["median_ms"],
        )
        out.append(
            _target(
                f"turn without window grows ({hi:,} vs {lo:,})",
                name,
                grow if spread else None,
                None,
                ", ".join(
                    f"{n:,}: {_ms(at[n]['turn_nowindow']['time']['median_ms'])} ms "
                    f"({at[n]['turn_nowindow']['time']['n']} reps)"
                    for n in lengths
                ),
            )
        )

        # The kept messages are journaled by seq (issue 37, sixth round): no message text, so
        # the step weighs the same at every length but for the digits of its seqs.
        loads = {n: at[n]["turn_window"]["load_thread_bytes"] for n in lengths}
        out.append(
            _target(
                f"load:thread journal bytes with window <= {LOAD_THREAD_LIMIT_BYTES:,} at every "
                "length (no message text)",
                name,
                max(loads.values()),
                LOAD_THREAD_LIMIT_BYTES,
                ", ".join(f"{n:,}: {v:,} B" for n, v in loads.items()),
                kind="n",
            )
        )

        overheads = {n: at[n]["turn_window"]["overhead"]["median_ms"] for n in lengths}
        worst_o = max(overheads, key=lambda n: overheads[n])
        out.append(
            _target(
                f"loop overhead (turn minus model, window) <= {OVERHEAD_LIMIT_MS:.0f} ms",
                name,
                overheads[worst_o],
                OVERHEAD_LIMIT_MS,
                ", ".join(f"{n:,}: {v:.1f} ms" for n, v in overheads.items())
                + f"; at {lo:,}: model {at[lo]['turn_window']['model']['median_ms']:.2f} ms,"
                f" {at[lo]['turn_window']['driver_calls']} driver calls awaited for "
                f"{at[lo]['turn_window']['driver']['median_ms']:.1f} ms, Python (loop, SQLAlchemy,"
                f" pydantic, JSON) {at[lo]['turn_window']['python']['median_ms']:.1f} ms",
                kind="ms",
            )
        )
        out.extend(_issue_11_targets(name, b, at))
    return out + policy_targets(results) + cold_targets(results)


def cold_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 30: folding when the cache is cold anyway never leaves a cache more to do."""
    cold = results.get("cache_cold")
    if cold is None:
        return []
    out = []
    for name, (before, after) in cold_holds(cold).items():
        out.append(
            _target(
                f"cache-cold fold ({name}): uncached tokens after <= before",
                "sqlite",
                ratio(after, before),
                1.0,
                f"{cold['turns']} turns, every {cold['cold_every']}th idle past the TTL: "
                f"{before:,} -> {after:,} tokens a cache cannot serve",
            )
        )
    return out


def _issue_11_targets(
    name: str, b: dict[str, Any], at: dict[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The turn-cost goals: the bounded read per backend, the turn's overhead in floors (with
    what its commits alone cost, in the same unit), and its transactions."""
    out = []
    reads = {
        n: ratio(e["reads"]["bounded"]["median_ms"], e["reads"]["floor"]["median_ms"])
        for n, e in at.items()
    }
    worst = max(reads, key=lambda n: reads[n])
    limit = READ_FLOOR_LIMITS.get(name)
    out.append(
        _target(
            f"bounded read <= {limit}x raw floor (turn-cost goal)",
            name,
            reads[worst],
            limit,
            f"worst at {worst:,}; " + ", ".join(f"{n:,}: {v:.2f}x" for n, v in reads.items()),
        )
    )
    turns = {
        n: ratio(e["turn_window"]["overhead"]["median_ms"], e["reads"]["floor"]["median_ms"])
        for n, e in at.items()
    }
    worst = max(turns, key=lambda n: turns[n])
    cf = b.get("commit_floor")
    tx = at[worst]["turn_window"].get("transactions", 0)
    least = (
        f"; its {tx} commits alone, at the commit floor ({cf['commit_ms']:.3f} ms each): "
        f"{ratio(tx * cf['commit_ms'], cf['read_ms']):.1f}x the read floor"
        if cf
        else ""
    )
    ts = b.get("turn_sql_floor")
    if ts:
        least += (
            f"; its own SQL replayed raw, no Python: "
            f"{ratio(ts['turn_sql_ms'], ts['read_ms']):.1f}x the read floor"
        )
    out.append(
        _target(
            f"turn overhead <= {TURN_FLOOR_LIMIT:.0f}x raw read floor (turn-cost goal)",
            name,
            turns[worst],
            TURN_FLOOR_LIMIT,
            f"worst at {worst:,}; "
            + ", ".join(f"{n:,}: {v:.1f}x" for n, v in turns.items())
            + least,
        )
    )
    txs = {n: e["turn_window"].get("transactions", 0) for n, e in at.items()}
    most = max(txs, key=lambda n: txs[n])
    out.append(
        _target(
            f"committed transactions per one-tool turn <= {TOOL_TURN_TRANSACTIONS}",
            name,
            txs[most],
            TOOL_TURN_TRANSACTIONS,
            ", ".join(f"{n:,}: {v}" for n, v in txs.items()),
            kind="n",
        )
    )
    return out


def targets_table(items: list[dict[str, Any]]) -> str:
    rows = []
    for t in items:
        if t["value"] is None:
            value = "-"
        elif t["kind"] == "ms":
            value = f"{t['value']:.1f} ms"
        elif t["kind"] == "n":
            value = f"{t['value']:,}"
        else:
            value = _x(t["value"])
        rows.append([t["status"], t["backend"], t["target"], value, t["detail"]])
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4]
        for r in rows
    )


def render(results: dict[str, Any]) -> str:
    m, c = results["machine"], results["config"]
    notes = [
        f"mode {m['mode']}  python {m['python']}  cpus {m['cpu_count']}  {m['date']}  "
        f"load {m['loadavg_start']} -> {m.get('loadavg_end', [])}",
        f"window {c['window']} messages; tool result {c['tool_bytes']:,} chars on every second "
        f"message; medians in ms unless marked; n = measured reps after warm-up",
        f"turns: {c['turn_warmup']} warm-up turns with the window, {c['full_warmup']} without; "
        f"no-window turns and full reads take as many reps as a time budget allows (at least 3), "
        f"{c['cap_reps']} from {c['cap_from']:,} messages on: marked (capped)",
    ]
    return "\n\n".join(
        [
            "\n".join(notes),
            "READS (per call)\n" + reads_table(results),
            "TURNS (module.run_turn with EchoModel, one tool call, two model calls)\n"
            + turns_table(results),
            "COMMIT FLOOR: THE LEAST A TURN'S TRANSACTIONS COST (one committed one-row UPDATE "
            "per transaction, raw driver, interleaved with the read floor; turn at the shortest "
            "thread)\n" + commit_floor_table(results),
            "TURNS: WHAT THEY READ AND JOURNAL (last measured turn)\n" + bytes_table(results),
            "WHERE THE BOUNDED READ'S TIME GOES (medians, microseconds)\n"
            + breakdown_table(results),
            f"POLICIES: EVERY HISTORY POLICY PER TURN (means over n turns after the first turn "
            f"and {c['turn_warmup']} warm-up turns; max_tokens {c.get('token_budget', 0):,})\n"
            + policies_table(results),
            "SUMMARIZING AGENT'S FIRST TURN ON A SEEDED THREAD (one-off backlog fold)\n"
            + first_turn_table(results),
            "TURN READ PLANS (PostgreSQL: EXPLAIN ANALYZE BUFFERS; SQLite: EXPLAIN QUERY PLAN)\n"
            + plans_table(results),
            "SCRIPTED CONVERSATION (window 10 + summarize, EchoModel): summarizer input tokens "
            "per fold (the loop's estimate: summary so far + new messages; bound = "
            "fold_max_tokens), running totals, and how the totals grow\n"
            + conversation_table(results),
            "TARGETS\n" + targets_table(results["targets"]),
        ]
    )


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")


def write_chart(results: dict[str, Any], path: Path) -> None:
    """Per-turn time vs thread length (log-log), window vs none, both backends; the reads; each
    history policy's per-turn time; the scripted conversation's running summarizer input."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 10))
    turns_ax, reads_ax, policy_ax, conversation_ax = axes.flat
    styles = {"sqlite": "tab:blue", "postgres": "tab:orange"}
    for name, b in results["backends"].items():
        lengths = _lengths(b)
        color = styles.get(name, "tab:gray")
        at = [b["lengths"][str(n)] for n in lengths]
        turns_ax.plot(
            lengths,
            [e["turn_window"]["time"]["median_ms"] for e in at],
            "o-",
            color=color,
            label=f"{name}: window {results['config']['window']}",
        )
        turns_ax.plot(
            lengths,
            [e["turn_nowindow"]["time"]["median_ms"] for e in at],
            "s--",
            color=color,
            label=f"{name}: no window (whole thread)",
        )
        reads_ax.plot(
            lengths,
            [e["reads"]["bounded"]["median_ms"] for e in at],
            "o-",
            color=color,
            label=f"{name}: bounded read",
        )
        reads_ax.plot(
            lengths,
            [e["reads"]["floor"]["median_ms"] for e in at],
            ":",
            color=color,
            label=f"{name}: raw driver floor",
        )
        reads_ax.plot(
            lengths,
            [e["reads"]["full"]["median_ms"] for e in at],
            "s--",
            color=color,
            label=f"{name}: full read (get_thread)",
        )
    markers = {"window": "o-", "summarize": "^-", "tokens": "s:"}
    for name, b in results["backends"].items():
        color = styles.get(name, "tab:gray")
        for agent, by_length in b.get("policies", {}).items():
            lengths = _policy_lengths(b, agent)
            policy_ax.plot(
                lengths,
                [by_length[str(n)]["mean_ms"] for n in lengths],
                markers.get(agent, "x-"),
                color=color,
                label=f"{name}: {AGENT_LABELS.get(agent, agent)}",
            )
        c = b.get("conversation")
        if c:
            running, xs, ys = 0, [], []
            for t in c["per_turn"]:
                running += t["input_tokens"]
                xs.append(t["turn"])
                ys.append(running)
            conversation_ax.plot(xs, ys, "-", color=color, label=f"{name}: summarizer input")
    conversation_ax.set_xlabel("turn")
    conversation_ax.set_ylabel("summarizer input tokens, running total")
    conversation_ax.set_title("Scripted conversation, window 10 + summarize (linear = O(turns))")
    conversation_ax.grid(True, alpha=0.3)
    conversation_ax.legend(fontsize=8)
    for ax, title in (
        (turns_ax, "Per-turn time (median)"),
        (reads_ax, "Thread read (median)"),
        (policy_ax, "Per-turn time by history policy (mean)"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("messages in thread")
        ax.set_ylabel("ms")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    m = results["machine"]
    fig.suptitle(f"bounded-agents bench ({m['mode']}, {m['date']}, {m['cpu_count']} cpus)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- every history policy -------------------------------------------------------------------

POLICY_FLAT_LIMIT = 1.3
"""Issue 10: each agent's turn at the longest thread within 1.3x of the shortest."""
CONVERSATION_GROWTH_LIMIT = 2.3
"""total(all turns) / total(half the turns) of summarizer input (total(200)/total(100) in the
full conversation): linear gives ~2, re-summarizing every dropped message each turn ~4."""
PLAN_PAGES_FLOOR = 32
"""Pages any turn read may touch without counting as growth: index descents and the heap pages
of a 15-row page differ by a few pages from thread to thread (8 -> 11 is not O(thread)), so
the plan target compares the longest thread's pages with max(shortest's, this)."""
AGENT_LABELS = {
    "window": "window 10",
    "summarize": "window 10 + summarize",
    "tokens": "max_tokens only",
}
DOMINANT = ", one thread filling the table"
"""Suffix of an agent's key in `plans` for the plans read on the TURNS part's threads, where
the longest is most of the table (the POLICIES part has two long threads)."""
AGENT_LABELS.update({f"{k}{DOMINANT}": f"{v}{DOMINANT}" for k, v in list(AGENT_LABELS.items())})


def _policy_lengths(backend: dict[str, Any], agent: str) -> list[int]:
    return sorted(int(k) for k in backend.get("policies", {}).get(agent, {}))


def policies_table(results: dict[str, Any]) -> str:
    header = [
        "backend",
        "agent",
        "messages",
        "rows",
        "max",
        "read",
        "backlog rows",
        "max",
        "summ in tok/turn",
        "folds",
        "turn ms",
        "median",
        "n",
        "ms x first",
        "read x first",
        "x window",
    ]
    rows = []
    for name, backend in results["backends"].items():
        policies = backend.get("policies", {})
        for agent, by_length in policies.items():
            lengths = _policy_lengths(backend, agent)
            first = by_length[str(lengths[0])]
            for length in lengths:
                e = by_length[str(length)]
                base = policies.get("window", {}).get(str(length))
                rows.append(
                    [
                        name,
                        AGENT_LABELS.get(agent, agent),
                        f"{length:,}",
                        f"{e['rows_mean']:.1f}",
                        str(e["rows_max"]),
                        _bytes(round(e["bytes_mean"])),
                        f"{e['backlog_rows_mean']:.1f}",
                        str(e["backlog_rows_max"]),
                        f"{e['input_tokens_per_turn']:,.0f}",
                        f"{e['folds']}/{e['n']}",
                        _ms(e["mean_ms"]),
                        _ms(e["time"]["median_ms"]),
                        str(e["n"]),
                        _x(ratio(e["mean_ms"], first["mean_ms"])),
                        _x(ratio(e["bytes_mean"], first["bytes_mean"])),
                        _x(ratio(e["mean_ms"], base["mean_ms"])) if base else "-",
                    ]
                )
    return _table(header, rows, left=frozenset({1}))


def first_turn_table(results: dict[str, Any]) -> str:
    header = [
        "backend",
        "messages",
        "fold calls",
        "time s",
        "ms/fold",
        "summ in tok",
        "max/call",
        "backlog rows",
        "backlog read",
        "RSS +MB",
        "then covers",
    ]
    rows = []
    for name, backend in results["backends"].items():
        for length in _policy_lengths(backend, "summarize"):
            f = backend["policies"]["summarize"][str(length)]["first_turn"]
            rows.append(
                [
                    name,
                    f"{length:,}",
                    f"{f['folds']:,}",
                    f"{f['ms'] / 1e3:,.2f}",
                    f"{f['ms'] / max(1, f['folds']):.2f}",
                    f"{f['input_tokens']:,}",
                    f"{f['prompt_tokens_max_call']:,}",
                    f"{f['backlog_rows']:,}",
                    _bytes(f["backlog_bytes"]),
                    f"{f['rss_growth_mb']:,.0f}",
                    f"{f['covers_through_seq']:,}",
                ]
            )
    return _table(header, rows)


def plans_table(results: dict[str, Any]) -> str:
    header = ["backend", "agent", "messages", "plan", "pages", "rows removed", "seq scans"]
    rows = []
    for name, backend in results["backends"].items():
        for agent, by_length in backend.get("plans", {}).items():
            for length, plan in sorted(by_length.items(), key=lambda kv: int(kv[0])):
                if "custom" not in plan:  # SQLite: EXPLAIN QUERY PLAN, no counts
                    scans = [
                        d for d in plan["plan"] if d.startswith(("SCAN messages", "SCAN page"))
                    ]
                    searches = sum(1 for d in plan["plan"] if d.startswith("SEARCH"))
                    rows.append(
                        [
                            name,
                            AGENT_LABELS.get(agent, agent),
                            f"{int(length):,}",
                            f"query plan: {searches} index searches (plan text in latest.json)",
                            "-",
                            "-",
                            str(len(scans)),
                        ]
                    )
                    continue
                for mode in ("custom", "generic"):
                    p = plan[mode]
                    rows.append(
                        [
                            name,
                            AGENT_LABELS.get(agent, agent),
                            f"{int(length):,}",
                            mode,
                            str(p["buffers"]),
                            f"{p['rows_removed']:,}",
                            str(len(p["seq_scans"])),
                        ]
                    )
    return _table(header, rows, left=frozenset({1, 3}))


def conversation_table(results: dict[str, Any]) -> str:
    header = [
        "backend",
        "turns",
        "folds",
        "in tok/fold max",
        "mean",
        "1st half",
        "2nd half",
        "bound",
        "prompt tok max",
        "summary tok max",
        "totals at each quarter",
        "all/half",
        "half/quarter",
        "rows max",
        "backlog max",
        "turn ms",
    ]
    rows = []
    for name, backend in results["backends"].items():
        c = backend.get("conversation")
        if not c:
            continue
        totals = " / ".join(
            f"{int(k)}: {v['input_tokens']:,}"
            for k, v in sorted(c["totals"].items(), key=lambda kv: int(kv[0]))
        )
        rows.append(
            [
                name,
                str(c["turns"]),
                str(c["folds"]),
                f"{c['input_tokens_max']:,}",
                f"{c['input_tokens_mean']:,.0f}",
                f"{c['input_tokens_mean_first_half']:,.0f}",
                f"{c['input_tokens_mean_second_half']:,.0f}",
                f"{c['fold_max_tokens']:,}",
                f"{c['prompt_tokens_max']:,}",
                f"{c['summary_tokens_max']:,}",
                totals,
                "-" if c["growth_full_half"] is None else _x(c["growth_full_half"]),
                "-" if c["growth_half_quarter"] is None else _x(c["growth_half_quarter"]),
                str(c["rows_max"]),
                str(c["backlog_rows_max"]),
                _ms(c["turn_ms_mean"]),
            ]
        )
    return _table(header, rows)


def policy_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    window = results["config"]["window"]
    for name, b in results["backends"].items():
        policies = b.get("policies", {})
        for agent, by_length in policies.items():
            lengths = _policy_lengths(b, agent)
            lo, hi = by_length[str(lengths[0])], by_length[str(lengths[-1])]
            spread = len(lengths) > 1
            label = AGENT_LABELS.get(agent, agent)
            out.append(
                _target(
                    f"turn ({label}) at {lengths[-1]:,} <= {POLICY_FLAT_LIMIT}x at {lengths[0]:,}",
                    name,
                    ratio(hi["mean_ms"], lo["mean_ms"]) if spread else None,
                    POLICY_FLAT_LIMIT,
                    f"mean of {hi['n']} turns: "
                    + ", ".join(f"{n:,}: {_ms(by_length[str(n)]['mean_ms'])} ms" for n in lengths),
                )
            )
            out.append(
                _target(
                    f"bytes read ({label}) at {lengths[-1]:,} <= {POLICY_FLAT_LIMIT}x at "
                    f"{lengths[0]:,}",
                    name,
                    ratio(
                        hi["bytes_mean"] + hi["backlog_bytes_mean"],
                        lo["bytes_mean"] + lo["backlog_bytes_mean"],
                    )
                    if spread
                    else None,
                    POLICY_FLAT_LIMIT,
                    "turn read + fold backlog reads, mean per turn: "
                    + ", ".join(
                        f"{n:,}: "
                        + _bytes(
                            round(
                                by_length[str(n)]["bytes_mean"]
                                + by_length[str(n)]["backlog_bytes_mean"]
                            )
                        )
                        for n in lengths
                    ),
                )
            )
            if agent == "summarize":
                bound = by_length[str(lengths[0])]["read_bound"] or 0
                worst = max(by_length[str(n)]["rows_max"] for n in lengths)
                out.append(
                    _target(
                        f"rows read ({label}) <= window + fold batch ({bound}) at every length",
                        name,
                        worst,
                        bound,
                        "max per turn: "
                        + ", ".join(f"{n:,}: {by_length[str(n)]['rows_max']}" for n in lengths)
                        + "; fold backlog reads, max per turn: "
                        + ", ".join(
                            f"{n:,}: {by_length[str(n)]['backlog_rows_max']}" for n in lengths
                        ),
                        kind="n",
                    )
                )
                out.append(
                    _target(
                        f"summarizer input per turn ({label}) at {lengths[-1]:,} <= "
                        f"{POLICY_FLAT_LIMIT}x at {lengths[0]:,}",
                        name,
                        ratio(hi["input_tokens_per_turn"], lo["input_tokens_per_turn"])
                        if spread
                        else None,
                        POLICY_FLAT_LIMIT,
                        ", ".join(
                            f"{n:,}: {by_length[str(n)]['input_tokens_per_turn']:,.0f} tok"
                            for n in lengths
                        )
                        + f" (window {window})",
                    )
                )
        for agent, by_length in b.get("plans", {}).items():
            ends = sorted(by_length, key=int)
            if len(ends) < 2 or "generic" not in by_length[ends[0]]:
                continue
            for mode in ("custom", "generic"):
                lo_p, hi_p = by_length[ends[0]][mode], by_length[ends[-1]][mode]
                out.append(
                    _target(
                        f"turn read pages ({AGENT_LABELS.get(agent, agent)}, {mode} plan) at "
                        f"{int(ends[-1]):,} <= {POLICY_FLAT_LIMIT}x at {int(ends[0]):,}",
                        name,
                        ratio(hi_p["buffers"] or 0, max(lo_p["buffers"] or 0, PLAN_PAGES_FLOOR)),
                        POLICY_FLAT_LIMIT,
                        f"EXPLAIN BUFFERS pages {lo_p['buffers']} -> {hi_p['buffers']} (against "
                        f"at least {PLAN_PAGES_FLOOR}); rows "
                        f"removed by filter {lo_p['rows_removed']:,} -> {hi_p['rows_removed']:,}"
                        + (f"; {hi_p['seq_scans'][0]}" if hi_p["seq_scans"] else ""),
                    )
                )
        c = b.get("conversation")
        if c:
            out.append(
                _target(
                    f"{c['turns']}-turn conversation: summarizer input per fold <= "
                    f"{c['fold_max_tokens']:,} (fold_max_tokens)",
                    name,
                    c["input_tokens_max"],
                    c["fold_max_tokens"],
                    f"max {c['input_tokens_max']:,}, mean {c['input_tokens_mean']:,.0f} over "
                    f"{c['folds']} folds; first half {c['input_tokens_mean_first_half']:,.0f}, "
                    f"second half {c['input_tokens_mean_second_half']:,.0f}",
                    kind="n",
                )
            )
            out.append(
                _target(
                    f"{c['turns']}-turn conversation: total summarizer input is O(turns), "
                    f"total({c['turns']})/total({c['turns'] // 2}) <= {CONVERSATION_GROWTH_LIMIT}",
                    name,
                    c["growth_full_half"],
                    CONVERSATION_GROWTH_LIMIT,
                    "totals "
                    + ", ".join(
                        f"{k}: {v['input_tokens']:,}"
                        for k, v in sorted(c["totals"].items(), key=lambda kv: int(kv[0]))
                    )
                    + " (re-summarizing every dropped message each turn would give ~4x)",
                )
            )
    return out
