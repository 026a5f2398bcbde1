"""``voice-llm compare``: serial vs streamed latency on the same recorded turns.

Fairness: both modes use the same models, prompt, sampling settings and warm server. Each
(run, mode) replays all files as one fresh conversation, so the KV cache is in its natural
state for every turn (turn 2+ reuse the previous turns' prefix); the order of the modes
alternates between runs so neither always goes first.

``--live`` (speculation on vs off, the files spoken in real time through the live path) is
services/compare_live.py; this module keeps the command, the run loop, the report files
(compare.json, events.jsonl, waterfall.png, compare.md) and the serial vs streamed report.
It imports compare_live only where it dispatches to it, so the import arrow points one way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.errors import UserError
from services.timeline import ms_or_dash
from services.turn_options import (
    Stopper,
    add_live_options,
    add_turn_options,
    assistant_for,
    check_live_options,
    saved_line,
    turn_config,
    write_json_atomic,
)

if TYPE_CHECKING:
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    from pipeline.audio_out import AudioSink
    from pipeline.events import Event
    from pipeline.live import SpeculationStats
    from services.assistant import Assistant
    from services.supervisor import Supervisor

# Every turn's events, by (mode, run, file); with --live by (speculation, run, file).
TurnEvents = dict[tuple[str, int, str], list["Event"]]
# What a turn record is grouped by, and its groups: (field, values).
MODES = ("mode", ("serial", "streamed"))
CONDITIONS = ("speculation", ("on", "off"))

SHOWN = ("first_audio_ms", "asr_ms", "ttft_ms", "prefill_ms", "first_sentence_ms",
         "tts_first_ms", "overhead_ms", "turn_ms", "prompt_n", "cache_n", "reply_sentences")


def add_arguments(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("inputs", nargs="+", metavar="WAV_OR_DIR",
                   help="user turns (a folder means its *.wav files, sorted)")
    p.add_argument("--runs", type=int, default=2,
                   help="conversations per mode (per condition with --live); the order "
                   "alternates between runs (default %(default)s)")
    p.add_argument("--out", type=Path, default=Path("out/compare"),
                   help="report folder: compare.json, compare.md, events.jsonl, waterfall.png "
                   "(default %(default)s)")
    p.add_argument("--live", action="store_true",
                   help="speak the files in real time into a recorded microphone and take "
                   "the turns like talk (VAD, barge-in watcher, endpoint; docs/live.md), "
                   "comparing speculation on vs off (streamed mode) instead of serial vs "
                   "streamed; reports first audio from the end of speech, its split and "
                   "what speculation did. --pause-ms and --end-silence-ms apply")
    add_live_options(p)
    for action in p._actions:  # --live runs both conditions: rejected, so not offered
        if "--no-speculate" in action.option_strings:
            action.help = argparse.SUPPRESS
    p.description = (f"{p.description or ''} With --live: speculation on vs off, the turns "
                     "spoken in real time through the live path.").strip()
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
    check_options(args)
    wavs = collect_wavs(args.inputs)
    return asyncio.run(_compare(args, wavs))


def check_options(args: argparse.Namespace) -> None:
    """The live options only mean something with --live, and --live runs both conditions."""
    if not args.speculate:
        raise UserError("--no-speculate: compare --live runs speculation on and off in the "
                        "same run (--no-speculate is for talk and replay --live)")
    if args.live:
        check_live_options(args)
        return
    defaults = argparse.ArgumentParser()
    add_live_options(defaults)
    given = [f"--{k.replace('_', '-')}" for k, v in vars(defaults.parse_args([])).items()
             if getattr(args, k) != v]
    if given:
        raise UserError(f"{', '.join(given)} only with --live (the whole-file compare hands "
                        "each file over at once)")


async def _compare(args: argparse.Namespace, wavs: list[Path]) -> int:
    from rich.console import Console

    from pipeline.audio_in import AudioFileError, load_wav
    from pipeline.audio_out import RealtimeNullSink
    from services import compare_live

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
    measured = Measured(args.out, compare_live.live_settings(args) if args.live else None)
    try:
        assistant = await assistant_for(args)
        sink = RealtimeNullSink()
        try:
            await sink.open(assistant.tts.sample_rate)
            if args.live:  # Whisper warm too: the first condition must not pay for it
                await _warm_up(assistant, sink, stopper, next(iter(audio.values())))
                await compare_live._measure_live(args, assistant, sink, audio, stopper,
                                                 supervisor, measured, console)
            else:
                await _warm_up(assistant, sink, stopper)
                await _measure_modes(args, assistant, sink, audio, stopper, supervisor,
                                     measured, console)
        finally:
            await sink.close()
            await assistant.close()
    except asyncio.CancelledError:
        stopper.absorb()  # our signal: write the report of what was measured
    finally:
        stopper.remove()
    turns = measured.turns
    if stopper.signal is not None:
        if turns:
            write_report(args.out, measured.report(), measured.events)
        print(saved_line("compare", stopper.signal, len(turns),
                         [("the report of those to", args.out if turns else None)]),
              file=sys.stderr)
        return stopper.exit_code
    report = measured.report()
    write_report(args.out, report, measured.events)
    print_table(report)
    print(f"\nreport: {args.out / 'compare.md'}  (json: {args.out / 'compare.json'}, "
          f"waterfall: {args.out / 'waterfall.png'})")
    errors = [t for t in turns if t["error"]]
    for t in errors:
        print(f"voice-llm compare: {t['file']} ({_group_of(t)}): {t['error']}",
              file=sys.stderr)
    return 1 if errors else 0


class Measured:
    """The turns measured so far, their events and (--live) each conversation's
    speculation counts; saved after every turn, so a kill or a crash keeps them."""

    def __init__(self, out: Path, live: dict[str, Any] | None = None) -> None:
        self.out, self.live = out, live
        self.turns: list[dict[str, Any]] = []
        self.events: TurnEvents = {}
        self.speculation: dict[tuple[str, int], SpeculationStats] = {}

    def report(self) -> dict[str, Any]:
        from services.compare_live import build_live_report

        if self.live is None:
            return build_report(self.turns)
        return build_live_report(self.turns, self.speculation, self.live)

    def add(self, record: dict[str, Any], key: tuple[str, int, str],
            events: list[Event]) -> None:
        self.turns.append(record)
        self.events[key] = events
        save_partial(self.out, self.report(), self.events, key)


async def _measure_modes(args: argparse.Namespace, assistant: Assistant, sink: AudioSink,
                         audio: dict[Path, np.ndarray], stopper: Stopper,
                         supervisor: Supervisor, measured: Measured,
                         console: Console) -> None:
    """Serial vs streamed: each file handed over whole (its end is t = 0)."""
    from rich.progress import Progress

    from pipeline.conversation import Conversation

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
                    progress.update(bar, description=f"run {run_no} {mode:8} {wav.name}")
                    result = await runner.run(samples)
                    if result.error is not None and (line := await supervisor.check_async()):
                        console.print(f"voice-llm compare: {line}", markup=False)
                    measured.add(result.record(str(wav), run_no), (mode, run_no, str(wav)),
                                 result.events)
                    progress.advance(bar)


def save_partial(out: Path, report: dict[str, Any], events: TurnEvents,
                 key: tuple[str, int, str]) -> None:
    """compare.json rewritten atomically, the turn's events appended to events.jsonl."""
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "compare.json", report)
    with (out / "events.jsonl").open("w" if len(report["turns"]) == 1 else "a") as f:
        f.write(_event_lines(key, events[key], _grouping(report)[0]))


def _event_lines(key: tuple[str, int, str], evs: list[Event], field: str = "mode") -> str:
    group, run_no, file = key
    return "".join(json.dumps({**ev.to_dict(), field: group, "run": run_no, "file": file},
                              ensure_ascii=False) + "\n" for ev in evs)


def _grouping(report: dict[str, Any]) -> tuple[str, tuple[str, str]]:
    return CONDITIONS if report.get("live") else MODES


def _group_of(turn: dict[str, Any]) -> str:
    return f"speculation {turn['speculation']}" if "speculation" in turn else str(turn["mode"])


async def _warm_up(assistant: Assistant, sink: AudioSink, stopper: Stopper,
                   audio: np.ndarray | None = None) -> None:
    """One unmeasured turn (text, or ``audio`` to warm Whisper too), so no mode or
    condition pays for a cold server or cold threads."""
    stopper.runner = assistant.runner(sink)
    if audio is None:
        await stopper.runner.run(text="Hello!")
    else:
        await stopper.runner.run(audio)


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


def representative(turns: list[dict[str, Any]], mode: str, field: str = "mode",
                   metric: str = "first_audio_ms") -> dict[str, Any] | None:
    """The turn of ``mode`` (a value of ``field``) whose ``metric`` is closest to its
    median."""
    mine = [t for t in turns if t.get(field) == mode and t.get(metric) is not None]
    if not mine:
        return None
    values = sorted(t[metric] for t in mine)
    median = values[len(values) // 2]
    return min(mine, key=lambda t: abs(t[metric] - median))


def write_report(out: Path, report: dict[str, Any], events: TurnEvents) -> None:
    from services import compare_live, waterfall

    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "compare.json", report)
    field, groups = _grouping(report)
    with (out / "events.jsonl").open("w") as f:  # every turn's timeline, for machines
        for key, evs in events.items():
            f.write(_event_lines(key, evs, field))
    rows = []
    # The streamed (speculating) turn nearest its median, and the other group's turn on
    # the same file and run, so the two rows differ only in the mode (speculation).
    metric = compare_live.FROM_SPEECH_END if report.get("live") else "first_audio_ms"
    pick = representative(report["turns"], groups[0 if report.get("live") else 1], field,
                          metric)
    for group in groups if pick else ():
        assert pick is not None
        t = next((x for x in report["turns"] if x.get(field) == group and
                  (x["file"], x["run"]) == (pick["file"], pick["run"])), None)
        if t is not None and events.get((group, t["run"], t["file"])):
            evs = events[(group, t["run"], t["file"])]
            label = f"speculation {group}" if report.get("live") else group
            if report.get("live"):  # t = 0 at the end of speech, the report's clock
                evs = compare_live._from_speech_end(evs, t.get("speech_end_ms") or 0.0)
            rows.append((f"{label}: {Path(t['file']).name} (run {t['run']})", evs,
                         t[metric]))
    if rows:
        waterfall.draw(rows, out / "waterfall.png")
    (out / "compare.md").write_text(compare_live.live_markdown(report) if report.get("live")
                                    else markdown(report))


def _cell(summary: dict[str, Any], mode: str, key: str, q: str) -> str:
    return ms_or_dash(summary.get(mode, {}).get(key, {}).get(q))


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


def summary_table(title: str, summary: dict[str, Any], groups: tuple[str, ...],
                  shown: tuple[str, ...]) -> Table:
    """p50 and p95 of each ``shown`` metric per group (mode or condition), for the terminal."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    for col in (f"{g} {q}" for g in groups for q in ("p50", "p95")):
        table.add_column(col, justify="right")
    for key in shown:
        table.add_row(key, *(_cell(summary, g, key, q) for g in groups for q in ("p50", "p95")))
    return table


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console

    from services.compare_live import print_live_table

    if report.get("live"):
        print_live_table(report)
        return
    s = report["summary"]
    console = Console()
    console.print(summary_table("serial vs streamed (ms, tokens)", s, MODES[1], SHOWN))
    console.print(f"streamed/serial first_audio p50 ratio: [bold]{s['first_audio_ratio']}[/] "
                  f"· KV reuse turns 2+: [bold]{s['cache_reuse_turn2plus']}[/]")
