"""lab.json and report.md: the lab's results written for scripts and for people.

``lab.json`` holds the raw sections (the contract keys are listed in the issue and read by
scripts); report.md is rendered from that same dict only, so a report can be re-rendered from
a saved lab.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from services.lab import plots, tables

SECTIONS = ("ttft", "prefill", "cache", "first_sentence", "barge_in")
FIGURES = {"prefill": ("prefill.png", plots.prefill),
           "first_sentence": ("first_sentence.png", plots.first_sentence),
           "barge_in": ("barge_in.png", plots.barge_in)}
TITLES = {"ttft": "1. Time to first token", "prefill": "2. Prefill grows with the prompt",
          "cache": "3. The KV cache and the prefix rule",
          "first_sentence": "4. First sentence and max_tokens",
          "barge_in": "5. Barge-in = hang up"}


def load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def render(result: dict[str, Any], figures: dict[str, str] | None = None) -> str:
    """report.md text; ``figures`` maps a section to its PNG name relative to the report."""
    figures = figures or {}
    server = result.get("server", {})
    lines = [
        "# voice-llm lab report", "",
        f"Measured {result.get('measured_at', '?')} against `{server.get('url', '?')}`.", "",
        "| server | |", "|---|---|",
        f"| model | {tables.fmt(server.get('model'))} |",
        f"| n_ctx | {tables.fmt(server.get('n_ctx'))} |",
        f"| slots | {tables.fmt(server.get('total_slots'))} |",
        f"| build | {tables.fmt(server.get('build'))} |",
        f"| started by the lab | {tables.fmt(server.get('started_by_lab'))} |",
        f"| machine | {_machine(result.get('machine') or {})} |", "",
        f"Reference numbers (docs/lab.md) were measured with **{tables.REF_MODEL}** on a "
        "2-CPU pod. Ours use the model above (by default the much smaller SmolLM2-135M-"
        "Instruct Q4_1), so absolute times differ: compare the shapes — linear prefill, "
        "prefix reuse, the first sentence independent of max_tokens, cancel on close.", "",
    ]
    summary = tables.checks(result)
    if summary.rows:
        lines += ["## Summary", "", tables.to_markdown(summary), ""]
    for name in SECTIONS:
        section = result.get(name)
        if not section:
            continue
        table = tables.BUILDERS[name](section)
        lines += [f"## {TITLES[name]}", "", f"**{table.title}**", "", tables.to_markdown(table),
                  ""]
        if name in figures:
            lines += [f"![{table.title}]({figures[name]})", ""]
    return "\n".join(lines)


def _machine(machine: dict[str, Any]) -> str:
    if not machine:
        return "–"
    return (f"{tables.fmt(machine.get('cpus'))} CPUs, 1-min load average "
            f"{tables.fmt(machine.get('load_before'), 1)} before, "
            f"{tables.fmt(machine.get('load_after'), 1)} after (other work on the box slows "
            "every number)")


def write(out_dir: Path, result: dict[str, Any]) -> list[Path]:
    """Write lab.json, the figures for the sections present, and report.md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "lab.json"]
    written[0].write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n",
                          encoding="utf-8")
    figures: dict[str, str] = {}
    for name, (filename, draw) in FIGURES.items():
        if result.get(name):
            written.append(draw(result[name], out_dir / filename))
            figures[name] = filename
    report = out_dir / "report.md"
    report.write_text(render(result, figures), encoding="utf-8")
    written.append(report)
    return written
