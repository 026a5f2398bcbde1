"""``voice-llm compare``: serial vs streamed latency on the same recorded turns.

Fairness: both modes use the same models, prompt, sampling settings and warm server. Each
(run, mode) replays all files as one fresh conversation, so the KV cache is in its natural
state for every turn (turn 2+ reuse the previous turns' prefix); the order of the modes
alternates between runs so neither always goes first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.errors import UserError
from services.turn_options import (
    Stopper,
    add_turn_options,
    assistant_for,
    saved_line,
    turn_config,
    write_json_atomic,
)

if TYPE_CHECKING:
    from pipeline.audio_out import AudioSink
    from pipeline.events import Event
    from services.assistant import Assistant

# Every turn's events, by (mode, run, file).
TurnEvents = dict[tuple[str, int, str], list["Event"]]

SHOWN = ("first_audio_ms", "asr_ms", "ttft_ms", "prefill_ms", "first_sentence_ms",
         "tts_first_ms", "overhead_ms", "turn_ms", "prompt_n", "cache_n", "reply_sentences")


def add_arguments(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("inputs", nargs="+", metavar="WAV_OR_DIR",
                   help="user turns (a folder means its *.wav files, sorted)")
    p.add_argument("--runs", type=int, default=2,
                   help="conversations per mode; modes alternate order (default %(default)s)")
    p.add_argument("--out", type=Path, default=Path("out/compare"),
                   help="report folder: compare.json, compare.md, events.jsonl, waterfall.png "
                   "(default %(default)s)")
    add_turn_options(p)


def collect_wavs(inputs: list[str]) -> list[Path]:
    wavs: list[Path] = []
    for item in map(Path, inputs):
        if item.is_dir():
            found = sorted(item.glob("*.wav"))
            if not found:
                raise UserError(f"{item}: no .wav files in this folder")
            wavs.extend(found)
        elif item.exists():
            wavs.append(item)
        else:
            raise UserError(f"{item}: no such file or folder")
    return wavs


def run(args: argparse.Namespace) -> int:
    if args.runs < 1:
        raise UserError("--runs must be at least 1")
    wavs = collect_wavs(args.inputs)
    return asyncio.run(_compare(args, wavs))


async def _compare(args: argparse.Namespace, wavs: list[Path]) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from pipeline.audio_in import AudioFileError, load_wav
    from pipeline.audio_out import RealtimeNullSink
    from pipeline.conversation import Conversation

    console = Console(stderr=True)
    audio = {}
    for wav in wavs:
        try:
            audio[wav] = await asyncio.to_thread(load_wav, wav)
        except AudioFileError as e:
            console.print(f"voice-llm compare: {e} (skipped)", markup=False)
    if not audio:
        raise UserError("no readable WAV turns to compare")
    from services.supervisor import Supervisor

    stopper = Stopper().install()
    supervisor = Supervisor(args.llm_url)
    turns: list[dict[str, Any]] = []
    events: TurnEvents = {}
    try:
        assistant = await assistant_for(args)
        sink = RealtimeNullSink()
        try:
            await sink.open(assistant.tts.sample_rate)
            await _warm_up(assistant, sink, stopper)
            with Progress(console=console, transient=True) as progress:
                bar = progress.add_task("comparing", total=args.runs * 2 * len(audio))
                for run_no in range(1, args.runs + 1):
                    modes = ("serial", "streamed") if run_no % 2 else ("streamed", "serial")
                    for mode in modes:
                        runner = stopper.runner = assistant.runner(
                            sink, Conversation(), config=turn_config(args, mode))
                        for wav, samples in audio.items():
                            if stopper.stopped:
                                break
                            progress.update(bar,
                                            description=f"run {run_no} {mode:8} {wav.name}")
                            result = await runner.run(samples)
                            if result.error is not None and (
                                    line := await supervisor.check_async()):
                                console.print(f"voice-llm compare: {line}", markup=False)
                            turns.append(result.record(str(wav), run_no))
                            events[(mode, run_no, str(wav))] = result.events
                            # After every turn: a kill or a crash keeps what was measured.
                            save_partial(args.out, turns, events, (mode, run_no, str(wav)))
                            progress.advance(bar)
        finally:
            await sink.close()
            await assistant.close()
    except asyncio.CancelledError:
        stopper.absorb()  # our signal: write the report of what was measured
    finally:
        stopper.remove()
    if stopper.signal is not None:
        if turns:
            write_report(args.out, build_report(turns), events)
        print(saved_line("compare", stopper.signal, len(turns),
                         [("the report of those to", args.out if turns else None)]),
              file=sys.stderr)
        return stopper.exit_code
    report = build_report(turns)
    write_report(args.out, report, events)
    print_table(report)
    print(f"\nreport: {args.out / 'compare.md'}  (json: {args.out / 'compare.json'}, "
          f"waterfall: {args.out / 'waterfall.png'})")
    errors = [t for t in turns if t["error"]]
    for t in errors:
        print(f"voice-llm compare: {t['file']} ({t['mode']}): {t['error']}", file=sys.stderr)
    return 1 if errors else 0


def save_partial(out: Path, turns: list[dict[str, Any]], events: TurnEvents,
                 key: tuple[str, int, str]) -> None:
    """compare.json rewritten atomically, the turn's events appended to events.jsonl."""
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "compare.json", build_report(turns))
    with (out / "events.jsonl").open("w" if len(turns) == 1 else "a") as f:
        f.write(_event_lines(key, events[key]))


def _event_lines(key: tuple[str, int, str], evs: list[Event]) -> str:
    mode, run_no, file = key
    return "".join(json.dumps({**ev.to_dict(), "mode": mode, "run": run_no, "file": file},
                              ensure_ascii=False) + "\n" for ev in evs)


async def _warm_up(assistant: Assistant, sink: AudioSink, stopper: Stopper) -> None:
    """One unmeasured text turn, so no mode pays for a cold server or cold threads."""
    stopper.runner = assistant.runner(sink)
    await stopper.runner.run(text="Hello!")


def build_report(turns: list[dict[str, Any]]) -> dict[str, Any]:
    from pipeline.metrics import summarize

    ok = [t for t in turns if not t["error"]]
    summary: dict[str, Any] = {m: summarize(t for t in ok if t["mode"] == m)
                               for m in ("serial", "streamed")}
    later = [t for t in ok if t.get("cache_n") is not None and t.get("prompt_n") is not None
             and _turn_index(t, ok) > 0]
    cached = sum(t["cache_n"] for t in later)
    total = sum(t["cache_n"] + t["prompt_n"] for t in later)
    fa = {m: summary[m].get("first_audio_ms", {}).get("p50") for m in summary}
    summary["first_audio_ratio"] = (round(fa["streamed"] / fa["serial"], 3)
                                    if fa["streamed"] and fa["serial"] else None)
    summary["cache_reuse_turn2plus"] = round(cached / total, 3) if total else None
    return {"turns": turns, "summary": summary}


def _turn_index(turn: dict[str, Any], turns: list[dict[str, Any]]) -> int:
    same = [t["file"] for t in turns if t["mode"] == turn["mode"] and t["run"] == turn["run"]]
    return same.index(turn["file"]) if turn["file"] in same else 0


def representative(turns: list[dict[str, Any]], mode: str) -> dict[str, Any] | None:
    """The turn of ``mode`` whose first audio is closest to the mode's median."""
    mine = [t for t in turns if t["mode"] == mode and t.get("first_audio_ms") is not None]
    if not mine:
        return None
    values = sorted(t["first_audio_ms"] for t in mine)
    median = values[len(values) // 2]
    return min(mine, key=lambda t: abs(t["first_audio_ms"] - median))


def write_report(out: Path, report: dict[str, Any], events: TurnEvents) -> None:
    from services import waterfall

    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "compare.json", report)
    with (out / "events.jsonl").open("w") as f:  # every turn's timeline, for machines
        for key, evs in events.items():
            f.write(_event_lines(key, evs))
    rows = []
    # The streamed turn nearest its median, and the serial turn on the same file and run,
    # so the two rows differ only in the mode.
    pick = representative(report["turns"], "streamed")
    for mode in ("serial", "streamed") if pick else ():
        assert pick is not None
        t = next((x for x in report["turns"] if x["mode"] == mode and
                  (x["file"], x["run"]) == (pick["file"], pick["run"])), None)
        if t is not None and (mode, t["run"], t["file"]) in events:
            rows.append((f"{mode}: {Path(t['file']).name} (run {t['run']})",
                         events[(mode, t["run"], t["file"])], t["first_audio_ms"]))
    if rows:
        waterfall.draw(rows, out / "waterfall.png")
    (out / "compare.md").write_text(markdown(report))


def _cell(summary: dict[str, Any], mode: str, key: str, q: str) -> str:
    v = summary.get(mode, {}).get(key, {}).get(q)
    return "-" if v is None else f"{v:.0f}"


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = ["# Serial vs streamed", "",
             f"{len(report['turns'])} turns. streamed/serial first_audio_ms p50 = "
             f"**{s['first_audio_ratio']}** (target ≤ 0.40); KV reuse on turns 2+ = "
             f"**{s['cache_reuse_turn2plus']}** (target ≥ 0.9).", "",
             "| metric | serial p50 | serial p95 | streamed p50 | streamed p95 |",
             "|---|---:|---:|---:|---:|"]
    for key in SHOWN:
        lines.append(f"| {key} | {_cell(s, 'serial', key, 'p50')} | "
                     f"{_cell(s, 'serial', key, 'p95')} | {_cell(s, 'streamed', key, 'p50')} "
                     f"| {_cell(s, 'streamed', key, 'p95')} |")
    lines += ["", "![waterfall](waterfall.png)", "", "## Turns", "",
              "| run | mode | file | first audio ms | turn ms | cache/prompt tok | reply |",
              "|---|---|---|---:|---:|---|---|"]
    for t in report["turns"]:
        reply = (t["reply"] or t["error"] or "").replace("\n", " ").replace("|", "/")[:80]
        lines.append(f"| {t['run']} | {t['mode']} | {Path(t['file']).name} | "
                     f"{t.get('first_audio_ms')} | {t.get('turn_ms')} | "
                     f"{t.get('cache_n')}/{t.get('prompt_n')} | {reply} |")
    return "\n".join(lines) + "\n"


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    s = report["summary"]
    table = Table(title="serial vs streamed (ms, tokens)")
    table.add_column("metric")
    for col in ("serial p50", "serial p95", "streamed p50", "streamed p95"):
        table.add_column(col, justify="right")
    for key in SHOWN:
        table.add_row(key, *(_cell(s, m, key, q) for m in ("serial", "streamed")
                             for q in ("p50", "p95")))
    console = Console()
    console.print(table)
    console.print(f"streamed/serial first_audio p50 ratio: [bold]{s['first_audio_ratio']}[/] "
                  f"· KV reuse turns 2+: [bold]{s['cache_reuse_turn2plus']}[/]")
