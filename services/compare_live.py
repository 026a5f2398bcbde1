"""``voice-llm compare --live``: speculation on vs off on turns spoken in real time.

The files are spoken in real time through the live path (``LiveConversation``,
services/replay_live.py: segmenter, barge-in watcher, live turn-taker), and the two conditions
are speculation on and off (the mode is streamed); the report counts from the end of the
user's speech (``first_audio_from_speech_end_ms``) and adds what speculation did. Same
fairness as the whole-file compare: one fresh conversation per (run, condition), alternating.
The command, the run loop and the report files are services/compare.py's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.compare import CONDITIONS, _cell, summary_table
from services.timeline import ms_or_dash
from services.turn_options import turn_config

if TYPE_CHECKING:
    import argparse

    import numpy as np
    from rich.console import Console

    from pipeline.audio_out import AudioSink
    from pipeline.events import Event
    from pipeline.live import SpeculationStats
    from services.assistant import Assistant
    from services.compare import Measured
    from services.supervisor import Supervisor
    from services.turn_options import Stopper

FROM_SPEECH_END = "first_audio_from_speech_end_ms"
# First audio counted from the end of speech, and its split (docs/live.md).
LIVE_SHOWN = (FROM_SPEECH_END, "endpoint_ms", "speech_end_ms", "speculation_confirmed_ms",
              "asr_ms", "first_sentence_ms", "tts_first_ms", "first_audio_ms", "turn_ms")
SPECULATION_SHOWN = ("started", "confirmed", "cancelled", "cancelled_idle_confirmed",
                     "saved_ms_p50", "wasted_tokens", "early_asr_started", "early_asr_used")


def live_settings(args: argparse.Namespace) -> dict[str, Any]:
    """compare.json's ``live``: how the turns were taken."""
    return {"pause_ms": args.pause_ms, "gap_ms": args.gap_ms,
            "end_silence_ms": args.end_silence_ms, "complete_ms": args.complete_ms,
            "learn_pauses": args.learn_pauses, "prime": args.prime}


async def _measure_live(args: argparse.Namespace, assistant: Assistant, sink: AudioSink,
                        audio: dict[Path, np.ndarray], stopper: Stopper,
                        supervisor: Supervisor, measured: Measured,
                        console: Console) -> None:
    """Speculation on vs off: each file spoken in real time through the live path."""
    from pipeline.conversation import Conversation
    from services.replay_live import LiveConversation, LiveOptions

    total, done = args.runs * 2 * len(audio), 0
    for run_no in range(1, args.runs + 1):
        conditions = ("on", "off") if run_no % 2 else ("off", "on")
        for cond in conditions:
            if stopper.stopped:
                return
            runner = stopper.runner = assistant.runner(
                sink, Conversation(), config=turn_config(args, "streamed"))
            options = LiveOptions.from_args(args, speculate=cond == "on")
            async with LiveConversation(runner, options) as live:
                measured.speculation[(cond, run_no)] = live.stats
                for wav, samples in audio.items():
                    if stopper.stopped:
                        break
                    turn = await live.say(samples)
                    # A pause taken for the end and the rest cutting that reply: the file's
                    # turn is the one that answered all of it, timed from its last sound.
                    while turn is not None and (following := await live.after(turn)):
                        turn = following
                    done += 1
                    key = (cond, run_no, str(wav))
                    if turn is None:
                        record = {"mode": "streamed", "file": str(wav), "run": run_no,
                                  "speculation": cond, "transcript": None, "reply": None,
                                  "heard": None, "error": "no utterance heard"}
                        measured.add(record, key, [])
                    else:
                        result = turn.result
                        if result.error is not None and (
                                line := await supervisor.check_async()):
                            console.print(f"voice-llm compare: {line}", markup=False)
                        measured.add({**result.record(str(wav), run_no), "speculation": cond,
                                      "speculative": turn.speculative,
                                      "endpoint_ms": round(turn.endpoint_ms, 1)},
                                     key, result.events)
                    console.print(f"[{done}/{total}] {live_line(measured.turns[-1])}",
                                  markup=False, highlight=False, soft_wrap=True)


def live_line(t: dict[str, Any]) -> str:
    """One --live turn on stderr, as it finishes: two lines that fit in 80 columns."""
    head = f"run {t['run']} · speculation {t['speculation']} · {Path(t['file']).name}"
    if t["error"]:
        return f"{head}: {t['error']}"

    def ms(key: str) -> str:
        return ms_or_dash(t.get(key))

    how = "speculative" if t.get("speculative") else "at the endpoint"
    return (f"{head} · {how}\n"
            f"  {ms(FROM_SPEECH_END)} ms from speech end: endpoint {ms('endpoint_ms')} · "
            f"asr {ms('asr_ms')} · 1st sentence {ms('first_sentence_ms')} · "
            f"tts {ms('tts_first_ms')}")


def build_live_report(turns: list[dict[str, Any]],
                      speculation: dict[tuple[str, int], SpeculationStats],
                      live: dict[str, Any]) -> dict[str, Any]:
    """--live: p50/p95/mean per condition, the on/off ratio of first audio from the end of
    speech, and speculation's counts per condition over all its conversations."""
    from pipeline.live import SpeculationStats
    from pipeline.metrics import summarize

    ok = [t for t in turns if not t["error"]]
    summary: dict[str, Any] = {c: summarize(t for t in ok if t["speculation"] == c)
                               for c in CONDITIONS[1]}
    fa = {c: summary[c].get(FROM_SPEECH_END, {}).get("p50") for c in CONDITIONS[1]}
    summary["first_audio_from_speech_end_ratio"] = (round(fa["on"] / fa["off"], 3)
                                                    if fa["on"] and fa["off"] else None)
    counts: dict[str, Any] = {}
    for c in CONDITIONS[1]:
        runs = [s for (cond, _), s in sorted(speculation.items()) if cond == c]
        counts[c] = SpeculationStats.total(runs).to_dict()
    summary["speculation"] = counts
    return {"live": live, "turns": turns, "summary": summary}


def _from_speech_end(events: list[Event], speech_end_ms: float) -> list[Event]:
    """A live turn's events on a clock starting at the user's last voiced sample, so the
    waterfall shows the endpoint wait (a speculative turn starts at the pause)."""
    from dataclasses import replace

    return [replace(ev, t=ev.t + speech_end_ms / 1000) for ev in events]


def live_markdown(report: dict[str, Any]) -> str:
    s, live = report["summary"], report["live"]
    lines = ["# Live turn-taking: speculation on vs off", "",
             f"{len(report['turns'])} turns spoken in real time through the live path "
             f"(pause {live['pause_ms']} ms, Whisper from a {live.get('gap_ms') or 'no'} ms "
             f"gap, end silence {live['end_silence_ms']} ms; "
             "docs/live.md). on/off first_audio_from_speech_end_ms p50 = "
             f"**{s['first_audio_from_speech_end_ratio']}**.", "",
             "| metric | on p50 | on p95 | off p50 | off p95 |", "|---|---:|---:|---:|---:|"]
    for key in LIVE_SHOWN:
        lines.append(f"| {key} | " + " | ".join(_cell(s, c, key, q) for c in CONDITIONS[1]
                                               for q in ("p50", "p95")) + " |")
    lines += ["", "| speculation | on | off |", "|---|---:|---:|"]
    for key in SPECULATION_SHOWN:
        lines.append(f"| {key} | " + " | ".join(
            _count(s["speculation"][c].get(key)) for c in CONDITIONS[1]) + " |")
    lines += ["", "![waterfall](waterfall.png)", "", "## Turns", "",
              "| run | speculation | file | from speech end ms | endpoint ms | first audio ms "
              "| started | reply |", "|---|---|---|---:|---:|---:|---|---|"]
    for t in report["turns"]:
        reply = (t["error"] or t["reply"] or "").replace("\n", " ").replace("|", "/")[:80]
        started = "-" if t["error"] else "at the pause" if t.get("speculative") else "at the end"
        lines.append(f"| {t['run']} | {t['speculation']} | {Path(t['file']).name} | "
                     f"{t.get(FROM_SPEECH_END)} | {t.get('endpoint_ms')} | "
                     f"{t.get('first_audio_ms')} | {started} | {reply} |")
    return "\n".join(lines) + "\n"


def _count(v: object) -> str:
    return "-" if v is None else str(v)


def print_live_table(report: dict[str, Any]) -> None:
    from rich.console import Console

    s = report["summary"]
    console = Console()
    console.print(summary_table("live turns: speculation on vs off (ms)", s, CONDITIONS[1],
                                LIVE_SHOWN))
    spec = s["speculation"]
    console.print("speculation on: " + ", ".join(f"{k} {_count(spec['on'].get(k))}"
                                                 for k in SPECULATION_SHOWN))
    console.print("on/off first_audio_from_speech_end p50 ratio: "
                  f"[bold]{s['first_audio_from_speech_end_ratio']}[/]")
