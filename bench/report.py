"""Turning results into the printed tables, the targets section, latest.json and chart.png."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.stats import ratio

FLOOR_LIMIT = 1.2
FLAT_READ_LIMIT = 1.2
BYTES_LIMIT = 1.2
FLAT_TURN_LIMIT = 1.5
OVERHEAD_LIMIT_MS = 5.0
""""A few ms" of loop overhead, made a number."""


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
                    _ms(w["driver"]["median_ms"]),
                    str(w["driver_calls"]),
                    _ms(w["python"]["median_ms"]),
                    _ms(f["overhead"]["median_ms"]),
                ]
            )
    return _table(header, rows)


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

        loads = {n: at[n]["turn_window"]["load_thread_bytes"] for n in lengths}
        const = ratio(max(loads.values()), min(loads.values()))
        out.append(
            _target(
                "load:thread journal bytes constant with window (max/min = 1.00)",
                name,
                const if spread else None,
                1.0,
                ", ".join(f"{n:,}: {v:,} B" for n, v in loads.items()),
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
    return out


def targets_table(items: list[dict[str, Any]]) -> str:
    rows = []
    for t in items:
        if t["value"] is None:
            value = "-"
        elif t["kind"] == "ms":
            value = f"{t['value']:.1f} ms"
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
            "TURNS: WHAT THEY READ AND JOURNAL (last measured turn)\n" + bytes_table(results),
            "WHERE THE BOUNDED READ'S TIME GOES (medians, microseconds)\n"
            + breakdown_table(results),
            "TARGETS\n" + targets_table(results["targets"]),
        ]
    )


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")


def write_chart(results: dict[str, Any], path: Path) -> None:
    """Per-turn time vs thread length (log-log), window vs none, both backends; and the reads."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (turns_ax, reads_ax) = plt.subplots(1, 2, figsize=(13, 5))
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
    for ax, title in ((turns_ax, "Per-turn time (median)"), (reads_ax, "Thread read (median)")):
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
