#!/usr/bin/env python3
"""False endpoints on the live path itself: bench_endpoint's corpus spoken in real time
through ``replay --live``'s machinery, with the real LLM server, Whisper and Piper.

``scripts/bench_endpoint.py`` runs the real segmenter, Whisper, pitch cue and policy on each
utterance, but *models* when the reply is ready ("held until the reply is ready N ms after
the pause"). Here nothing is modelled: every held-out utterance (test and fresh splits) is
spoken into a ``RecordedMic`` in real time and taken by the same pieces as ``talk``
(Silero segmenter, barge-in watcher, ``LiveTurnTaker`` with speculation, the endpoint
policy, the end held until the reply is ready, the speaker's pauses learned), one
conversation per espeak-ng voice, in the order bench_endpoint's ``learns`` rows use
(``--order``). So the host's own time to a ready reply decides what the hold catches, and
the latency the policy buys comes from the same run.

A paused utterance is a **false endpoint** when a reply started playing before it was over
(``false_endpoint``): the rest of the utterance came and cut a reply that was playing, or
the reply started before the last word ended (``started_early``). A turn taken at the pause
but cut by the rest of the request before a sample of it played is not one (nothing was
heard; its words went into the next turn, which answers the whole). For the whole questions it
reports first audio from the end of speech (``first_audio_from_speech_end_ms``, the
pipeline's clocks) and the endpoint wait.

    flock /tmp/cpu.lock .venv/bin/python scripts/bench_endpoint_live.py --llm-url URL
        [--splits test,fresh] [--order 1] [--out out/endpoint_live] [--no-learn-pauses]
        [--complete-ms MS] [--voices en-029+f2,...] [--limit N] [--events FILE]

``--voices`` and ``--limit`` speak a part of it (one speaker, the first N of each
conversation: to reproduce one utterance's turns); ``--events`` writes every turn's events
as JSON lines (docs/events.md) to see where a turn went. ``--report-only DIR`` judges a
finished run again.

About 7 s of real time per utterance (test: 120, fresh: 80; ~25 minutes for both).
Writes endpoint_live.json (every utterance, its turns) and endpoint_live.md, after each
conversation, so a stopped run keeps what it measured. It is a benchmark: nothing else on
the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_endpoint import (  # noqa: E402
    LEAD_S,
    Utterance,
    make_corpus,
    mid_sentence,
    speaker_orders,
)

from pipeline.audio_in import SAMPLE_RATE  # noqa: E402
from pipeline.endpoint import EndpointPolicy  # noqa: E402
from pipeline.metrics import pct  # noqa: E402
from pipeline.mic import SegmenterConfig  # noqa: E402

# A turn's audio starts this much before its first voiced window (the segmenter's pre-roll).
PRE_ROLL_S = SegmenterConfig().pre_roll_ms / 1000


@dataclass(frozen=True)
class HeardTurn:
    """What the benchmark keeps of one turn of an utterance."""

    transcript: str | None
    audio_s: float | None  # the audio the turn was taken on (asr.start)
    speech_end_ms: float  # its silence after the last voiced window
    played: bool  # a sample of its reply was played
    speculative: bool
    endpoint: dict[str, Any] | None  # speculation.endpoint's data
    from_speech_end_ms: float | None
    error: str | None
    # t = 0 (the pause, for a speculative turn) -> its first sentence synthesized: what
    # bench_endpoint models as "the reply ready N ms after the pause"
    ready_ms: float | None = None

    @property
    def voiced_s(self) -> float | None:
        """The audio up to its last voiced window (pre-roll included)."""
        if self.audio_s is None:
            return None
        return self.audio_s - self.speech_end_ms / 1000


def started_early(turn: HeardTurn, utterance_voiced_s: float) -> bool:
    """Did the turn's reply start before the utterance's last word? Its audio may stop
    short of the utterance's voice (a pause taken for the end, or a quiet last syllable
    the VAD heard as silence); the reply started that long after the turn's last voiced
    window (``from_speech_end_ms``). Unknown audio or no reply counts as no."""
    if turn.voiced_s is None or turn.from_speech_end_ms is None:
        return False
    missing_s = utterance_voiced_s - (turn.voiced_s - PRE_ROLL_S)
    return turn.from_speech_end_ms < missing_s * 1000


def false_endpoint(turns: list[HeardTurn], utterance_voiced_s: float) -> bool:
    """A reply started playing before the utterance was over: one whose turn was followed
    by another of the same utterance (the rest of it came and cut the reply), or the
    first, started before the last word. (A later turn starts at the rest of the
    utterance, with the words before it carried: its audio is not the whole.)"""
    if turns and turns[0].played and started_early(turns[0], utterance_voiced_s):
        return True
    return any(t.played for t in turns[:-1])


def voiced_s(u: Utterance) -> float:
    """The utterance's voice, from its start to its last word."""
    return u.speech_end / SAMPLE_RATE - LEAD_S


def heard(turn: Any) -> HeardTurn:
    """A LiveTurn (pipeline/live.py) as the benchmark keeps it."""
    events = turn.result.events
    asr = next((e for e in events if e.name == "asr.start"), None)
    endpoint = next((e for e in events if e.name == "speculation.endpoint"), None)
    ready = next((e for e in events if e.name == "tts.end"), None)
    return HeardTurn(turn.result.transcript, asr.data.get("audio_s") if asr else None,
                     turn.speech_end_ms, any(e.name == "playback.start" for e in events),
                     turn.speculative, dict(endpoint.data) if endpoint else None,
                     turn.first_audio_from_speech_end_ms, turn.result.error,
                     round(ready.t * 1000) if ready else None)


async def speak_conversation(assistant: Any, utterances: list[Utterance], options: Any,
                             listeners: list[Any] | None = None) -> list[dict[str, Any]]:
    """One speaker's utterances, in order, as one live conversation."""
    from pipeline.audio_out import RealtimeNullSink
    from pipeline.conversation import Conversation
    from services.replay_live import LiveConversation

    sink = RealtimeNullSink()
    await sink.open(assistant.tts.sample_rate)
    rows = []
    try:
        runner = assistant.runner(sink, Conversation(), listeners=listeners)
        async with LiveConversation(runner, options) as live:
            for u in utterances:
                turns = []
                turn = await live.say(u.audio)
                while turn is not None:
                    turns.append(heard(turn))
                    turn = await live.after(turn)
                rows.append(row(u, turns))
                print(progress(rows[-1]), flush=True)
    finally:
        await sink.close()
    return rows


def row(u: Utterance, turns: list[HeardTurn]) -> dict[str, Any]:
    answer = turns[-1] if turns else None
    return {"name": u.name, "split": u.split, "variant": u.variant, "text": u.text,
            "voice": u.voice, "pause_ms": u.pause_ms, "voiced_s": round(voiced_s(u), 3),
            "false_endpoint": false_endpoint(turns, voiced_s(u)),
            "turns": [t.__dict__ | {"voiced_s": t.voiced_s} for t in turns],
            "from_speech_end_ms": answer.from_speech_end_ms if answer else None,
            "error": None if turns else "no turn"}


def progress(r: dict[str, Any]) -> str:
    mark = "FALSE ENDPOINT" if r["false_endpoint"] else r["error"] or "ok"
    said = r["text"] if len(r["text"]) <= 44 else r["text"][:41] + "..."
    ms = r["from_speech_end_ms"]
    return f"  {r['name']:<22} {said:<44} {mark}" + (f" {ms:.0f} ms" if ms and not
                                                     r["false_endpoint"] else "")


def report(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    lines = ["# False endpoints on the live path (scripts/bench_endpoint_live.py)", "",
             f"Settings: {json.dumps(settings)}. A false endpoint: a reply started playing "
             "before the utterance was over (the rest of it cut the reply, or the reply "
             "started before the last word ended). Mid-sentence: bench_endpoint's column of "
             "that name, every ssml utterance and the separate ones whose first part could "
             "not end a request; the rest are two sentences, each said as finished.", "",
             "| split | false: separate | false: ssml | false: both | false: mid-sentence "
             "| whole questions: "
             "from speech end p50 / mean / p95 ms | endpoint p50 ms | reply ready after "
             "the pause p50 ms | ended at the pause, cut before it played | no turn |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for split in dict.fromkeys(r["split"] for r in rows):
        rs = [r for r in rows if r["split"] == split]
        cells = []
        paused = [r for r in rs if r["variant"] in ("separate", "ssml")]
        mid = [r for r in paused if mid_sentence(r)]
        for vs in ([r for r in rs if r["variant"] == "separate"],
                   [r for r in rs if r["variant"] == "ssml"], paused, mid):
            n = sum(r["false_endpoint"] for r in vs)
            cells.append(f"{n}/{len(vs)} ({100 * n / len(vs):.0f} %)" if vs else "-")
        whole = [r for r in rs if r["variant"] == "whole" and r["from_speech_end_ms"]]
        fa = [r["from_speech_end_ms"] for r in whole]
        waits = [t["endpoint"]["wait_ms"] for r in whole for t in r["turns"][-1:]
                 if t["endpoint"]]
        fa_cell = (f"{statistics.median(fa):.0f} / {statistics.fmean(fa):.0f} / "
                   f"{pct(fa, 0.95):.0f}" if fa else "-")
        wait_cell = f"{statistics.median(waits):.0f}" if waits else "-"
        ready = [t["ready_ms"] for r in rs for t in r["turns"][:1]
                 if t["speculative"] and t.get("ready_ms") is not None]
        ready_cell = f"{statistics.median(ready):.0f}" if ready else "-"
        caught = sum(len(r["turns"]) > 1 and not r["turns"][0]["played"] for r in rs)
        lines.append(f"| {split} | {' | '.join(cells)} | {fa_cell} | {wait_cell} | "
                     f"{ready_cell} | {caught} | {sum(r['error'] is not None for r in rs)} |")
    lines += ["", "## The false endpoints", ""]
    for r in rows:
        if r["false_endpoint"]:
            said = " → ".join(repr(t["transcript"]) for t in r["turns"])
            why = [f"{t['endpoint']['reason']} {t['endpoint']['wait_ms']}"
                   for t in r["turns"] if t["endpoint"]]
            lines.append(f"- {r['name']} ({r['voice']}, pause {r['pause_ms']} ms): "
                         f"{said}; endpoint {', '.join(why) or '-'}")
    return "\n".join(lines) + "\n"


def conversations(corpus: list[Utterance], splits: list[str],
                  order: int) -> list[list[Utterance]]:
    """One per (split, voice) of ``splits``, shuffled as bench_endpoint's ``learns`` rows."""
    return [talk for talk in speaker_orders(corpus, order) if talk[0].split in splits]


async def run(args: argparse.Namespace) -> int:
    from pipeline.turn import TurnConfig
    from services.assistant import load_assistant
    from services.replay_live import LiveOptions
    from services.turn_options import EventWriter

    print("making the corpus with espeak-ng ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = make_corpus(Path(tmp))
    talks = [t[:args.limit] for t in conversations(corpus, args.splits, args.order)
             if not args.voices or t[0].voice in args.voices]
    if not talks:
        print("bench_endpoint_live: no conversation left: --voices names none of "
              f"{sorted({u.voice for u in corpus})}", file=sys.stderr)
        return 2
    options = LiveOptions(complete_ms=args.complete_ms, learn_pauses=args.learn_pauses)
    settings = {"order": args.order, "complete_ms": args.complete_ms,
                "learn_pauses": args.learn_pauses, "max_sentences": args.max_sentences}
    assistant = await load_assistant(args.llm_url, config=TurnConfig(
        max_sentences=args.max_sentences))
    rows: list[dict[str, Any]] = []
    args.out.mkdir(parents=True, exist_ok=True)
    write_event = EventWriter(args.events)
    try:
        for i, talk in enumerate(talks, 1):
            print(f"[{i}/{len(talks)}] {talk[0].split}, voice {talk[0].voice}: "
                  f"{len(talk)} utterances", flush=True)
            rows += await speak_conversation(assistant, talk, options, [write_event])
            (args.out / "endpoint_live.json").write_text(json.dumps(
                {"settings": settings, "utterances": rows}, indent=1, default=str) + "\n")
            (args.out / "endpoint_live.md").write_text(report(rows, settings))
    finally:
        await assistant.close()
        write_event.close()
    print(report(rows, settings))
    print(f"report: {args.out / 'endpoint_live.md'} (every utterance: endpoint_live.json)")
    return 0


def report_again(out: Path) -> int:
    """--report-only: judge a finished run's turns again and rewrite its report."""
    data = json.loads((out / "endpoint_live.json").read_text())
    for r in data["utterances"]:
        turns = [HeardTurn(**{k: v for k, v in t.items() if k != "voiced_s"})
                 for t in r["turns"]]
        r["false_endpoint"] = false_endpoint(turns, r["voiced_s"])
    (out / "endpoint_live.json").write_text(json.dumps(data, indent=1) + "\n")
    text = report(data["utterances"], data["settings"])
    (out / "endpoint_live.md").write_text(text)
    print(text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llm-url", default="http://127.0.0.1:8080")
    ap.add_argument("--splits", default="test,fresh",
                    type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                    help="bench_endpoint's splits to speak (default test,fresh)")
    ap.add_argument("--order", type=int, default=1,
                    help="the shuffle of each speaker's utterances (bench_endpoint's seeds)")
    ap.add_argument("--complete-ms", type=int, default=EndpointPolicy.complete_ms)
    ap.add_argument("--no-learn-pauses", dest="learn_pauses", action="store_false")
    ap.add_argument("--max-sentences", type=int, default=1,
                    help="replies capped at N sentences (default 1: only their start counts)")
    ap.add_argument("--limit", type=int, default=None,
                    help="only the first N utterances of each conversation (a quick look)")
    ap.add_argument("--voices", default="",
                    type=lambda s: {x.strip() for x in s.split(",") if x.strip()},
                    help="only these espeak-ng voices' conversations, e.g. en-029+f2")
    ap.add_argument("--events", type=Path, default=None, metavar="FILE",
                    help="every turn's events as JSON lines (docs/events.md), to see "
                    "where a turn went")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "endpoint_live")
    ap.add_argument("--report-only", type=Path, metavar="DIR",
                    help="judge DIR/endpoint_live.json (a finished run) again and rewrite "
                    "its report; run nothing")
    args = ap.parse_args()
    if args.report_only is not None:
        return report_again(args.report_only)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
