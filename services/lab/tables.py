"""The lab's tables, built once from the ``lab.json`` sections and rendered twice: as rich
tables in the terminal and as Markdown in report.md.

Reference numbers are docs/lab.md's (Qwen2.5-0.5B-Instruct Q4_0, llama-server, a 2-CPU pod);
ours come from whatever model the server runs (by default SmolLM2-135M-Instruct Q4_1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

REF_MODEL = "Qwen2.5-0.5B-Instruct Q4_0"
REF_SHORT = {"prompt_n": 35, "ttft_ms": 127}
REF_LONG = {"prompt_n": 258, "ttft_ms": 801}
REF_REPEAT = {"prompt_n": 1, "ttft_ms": 24}
REF_MS_PER_TOKEN = (801 - 127) / (258 - 35)  # ≈ 3.0, from the two cold reference points
REF_DECODE_TPS = 50
REF_SLOT_IDLE_MS = 10  # docs/llama-server.md: llama-server frees the slot ~10 ms after the close


@dataclass
class TableData:
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def ttft(section: dict[str, Any]) -> TableData:
    rows = [[f"run {i}", fmt(r["ttft_ms"]), fmt(r["prompt_ms"]), fmt(r.get("overhead_ms")),
             fmt(r["prompt_n"])] for i, r in enumerate(section["runs"], 1)]
    rows.append(["median", fmt(section.get("median_ttft_ms")),
                 fmt(section.get("median_prompt_ms")), fmt(section.get("median_overhead_ms")),
                 ""])
    rows.append(["reference", fmt(REF_SHORT["ttft_ms"]), "–", "–",
                 fmt(REF_SHORT["prompt_n"])])
    return TableData("TTFT, cold (cache_prompt false)",
                     ["", "TTFT ms", "prefill ms", "TTFT − prefill", "prompt_n"], rows,
                     ["prefill ms is the server's prompt_ms. TTFT − prefill = queueing + HTTP + "
                      "the first decode step."])


def prefill(section: dict[str, Any]) -> TableData:
    rows = [[fmt(s["docs"]), fmt(s["prompt_n"]), fmt(s.get("min_ttft_ms")), fmt(s["ttft_ms"]),
             fmt(s["prompt_ms"])] for s in section.get("by_docs", [])]
    rows.append(["reference", fmt(REF_SHORT["prompt_n"]), fmt(REF_SHORT["ttft_ms"]),
                 "", "–"])
    rows.append(["reference", fmt(REF_LONG["prompt_n"]), fmt(REF_LONG["ttft_ms"]), "",
                 "–"])
    notes = [f"Least squares on the fastest run of each length: "
             f"{fmt(section.get('ms_per_token'), 2)} ms per prompt token, "
             f"r² {fmt(section.get('r2'), 3)} (reference: {REF_MS_PER_TOKEN:.1f} ms/token "
             "from its two points)."]
    if section.get("r2_all_runs") is not None:
        notes.append(f"Over all {len(section['points'])} runs: "
                     f"{fmt(section.get('ms_per_token_all_runs'), 2)} ms/token, "
                     f"r² {fmt(section.get('r2_all_runs'), 3)} (other work on the box adds "
                     "time to some runs, never removes it).")
    return TableData("Prefill: cold TTFT against attached documents",
                     ["documents", "prompt_n", "fastest TTFT ms", "median TTFT ms",
                      "median prefill ms"], rows, notes)


def cache(section: dict[str, Any]) -> TableData:
    def row(label: str, r: dict[str, Any]) -> list[str]:
        return [label, fmt(r["prompt_n"]), fmt(r["cache_n"]), fmt(r["ttft_ms"])]

    rows = [row("(a) repeat: first", section["repeat"]["first"]),
            row("(a) repeat: second", section["repeat"]["second"])]
    rows += [row(f"(b) time line first #{i}", r)
             for i, r in enumerate(section["volatile_first"], 1)]
    rows += [row(f"(c) time line last #{i}", r)
             for i, r in enumerate(section["volatile_last"], 1)]
    rows.append(["reference: 258 tokens sent again", fmt(REF_REPEAT["prompt_n"]), "–",
                 fmt(REF_REPEAT["ttft_ms"])])
    return TableData("KV cache and the prefix rule (cache_prompt true)",
                     ["request", "prompt_n", "cache_n", "TTFT ms"], rows,
                     ["prompt_n = tokens computed, cache_n = tokens reused from the slot. "
                      "(b) and (c) follow one unmeasured priming request each."])


def first_sentence(section: dict[str, Any]) -> TableData:
    rows = [[fmt(s["max_tokens"]), fmt(s["ttft_ms"]), fmt(s["first_sentence_ms"]),
             fmt(s["total_ms"]), fmt(s["completion_tokens"]), fmt(s.get("decode_tps"))]
            for s in section["by_max_tokens"]]
    rows.append(["reference", "", "", "", "", f"≈{REF_DECODE_TPS}"])
    notes = []
    if section.get("first_sentence"):
        notes.append(f"First sentence: “{section['first_sentence']}”")
    if any(r.get("first_sentence_by") == "end" for r in section["runs"]):
        notes.append("Some replies ended before any sentence mark: their first sentence is "
                     "the whole reply, released at the end.")
    return TableData("First sentence and max_tokens (medians)",
                     ["max_tokens", "TTFT ms", "first sentence ms", "whole reply ms",
                      "tokens", "decode tok/s"], rows, notes)


def barge_in(section: dict[str, Any]) -> TableData:
    close, hold = section["close"], section["hold"]
    rows = [
        ["close (hang up)", fmt(close["closed_at_ms"]), fmt(close["slot_idle_after_ms"]),
         fmt(close.get("received_tokens")), "–", fmt(close["cancel_logged"])],
        ["hold (stop reading)", fmt(hold.get("stopped_reading_ms")), fmt(hold["slot_busy_ms"]),
         fmt(hold.get("received_before_stop")), fmt(hold["predicted_n"]), "–"],
        ["reference", "", f"≈{REF_SLOT_IDLE_MS}", "", "", ""],
    ]
    notes = [f"Hold: the server generated {fmt(hold.get('wasted_tokens'))} tokens nobody read. "
             f"Closed request: id_task {fmt(close.get('id_task'))}."]
    notes += section.get("notes", [])
    return TableData(f"Barge-in at {section['at_s']} s: hang up vs stop reading",
                     ["", "stopped ms", "busy after ms", "read", "generated", "cancel logged"],
                     rows, ["busy after = from the client's close / stop until /slots shows "
                            "the slot idle; read / generated = tokens.", *notes])


BUILDERS: dict[str, Callable[[dict[str, Any]], TableData]] = {
    "ttft": ttft, "prefill": prefill, "cache": cache, "first_sentence": first_sentence,
    "barge_in": barge_in,
}


def to_markdown(table: TableData) -> str:
    lines = ["| " + " | ".join(table.headers) + " |",
             "|" + "|".join("---" for _ in table.headers) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
              for row in table.rows]
    text = "\n".join(lines)
    if table.notes:
        text += "\n\n" + "\n".join(f"- {note}" for note in table.notes)
    return text


def to_rich(table: TableData) -> Any:
    from rich.table import Table

    out = Table(title=table.title, caption="\n".join(table.notes) or None,
                caption_justify="left", title_justify="left")
    for i, header in enumerate(table.headers):
        out.add_column(header, justify="left" if i == 0 else "right", overflow="fold")
    for row in table.rows:
        out.add_row(*row)
    return out


def checks(result: dict[str, Any]) -> TableData:
    """The behaviour the issue asks the lab to show, each as ours vs expected vs met."""
    rows: list[list[str]] = []

    def add(what: str, ours: str, expected: str, ok: bool | None) -> None:
        rows.append([what, ours, expected, "–" if ok is None else ("yes" if ok else "NO")])

    if prefill_s := result.get("prefill"):
        r2 = prefill_s.get("r2")
        add("prefill: TTFT linear in prompt_n", f"r² {fmt(r2, 3)}", "r² ≥ 0.9",
            None if r2 is None else r2 >= 0.9)
    if cache_s := result.get("cache"):
        second = cache_s["repeat"]["second"]["prompt_n"]
        add("cache: repeated prompt, 2nd prompt_n", fmt(second), "≤ 2",
            None if second is None else second <= 2)
        first_n = [r["cache_n"] for r in cache_s["volatile_first"] if r["cache_n"] is not None]
        last_n = [r["cache_n"] for r in cache_s["volatile_last"] if r["cache_n"] is not None]
        prompt = [r["prompt_n"] for r in cache_s["volatile_last"] if r["prompt_n"] is not None]
        add("cache: time line first, cache_n", "/".join(map(str, first_n)),
            "small (recomputes)", bool(first_n and last_n and max(first_n) < min(last_n) / 4))
        add("cache: time line last, cache_n", "/".join(map(str, last_n)),
            "large (prefix reused)",
            bool(last_n and prompt and min(last_n) > 4 * max(prompt)))
    if fs := result.get("first_sentence"):
        firsts = [s["first_sentence_ms"] for s in fs["by_max_tokens"]]
        totals = [s["total_ms"] for s in fs["by_max_tokens"]]
        add("first sentence before the whole reply", "/".join(fmt(v) for v in firsts) + " ms",
            "< " + "/".join(fmt(v) for v in totals) + " ms",
            all(f is not None and t is not None and f <= t for f, t in zip(firsts, totals,
                                                                            strict=True)))
    if barge := result.get("barge_in"):
        close, hold = barge["close"], barge["hold"]
        add("barge-in close: cancel in server log", fmt(close["cancel_logged"]), "yes",
            close["cancel_logged"])
        idle = close["slot_idle_after_ms"]
        add("barge-in close: slot idle after", f"{fmt(idle)} ms", "well under 1000 ms",
            None if idle is None else idle < 1000)
        made, got = hold["predicted_n"], close.get("received_tokens")
        add("hold: tokens generated vs close", f"{fmt(made)} vs {fmt(got)}", "many more",
            None if made is None or got is None else made > 2 * max(got, 1))
    return TableData("What the lab shows", ["check", "ours", "expected", "met"], rows)
