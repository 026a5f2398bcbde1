#!/usr/bin/env python3
"""Mouth to ear, measured on the audio: `voice-llm talk` through PulseAudio, speculation on vs off.

A private PulseAudio daemon gets three sinks: ``mic`` (its monitor is talk's microphone),
``speaker`` (where talk plays) and ``both``, a combine sink feeding the two at once. Each
question WAV is played into ``both``: talk hears it through ``mic``, and the same samples
land in the ``speaker`` recording at the same moment. So one recording holds the question
and the reply on one clock, and the gap from the question's last voiced sample to the
reply's first sample is read off the samples themselves, device and buffer latency
included; no timestamp is assumed. The events file splits the gap into endpoint wait, ASR,
LLM to the first sentence, its TTS, and the rest (device / buffers / hand-offs). What talk
heard is kept too (``talk --record``, ``r<round>-<condition>/said/``).

Same questions, both conditions, alternating order per round, one talk process per
(round, condition); the LLM server is shared. ``--paused N`` adds N questions made with
espeak-ng that pause 600 ms (``--pause-ms``) after a word that cannot end them ("Can you
tell me about the ... history of bicycles?"): speculation starts at the pause and must be
cancelled, so the report counts cancellations and whether each one's slot was confirmed
idle. A pause longer than ``--end-silence-ms`` (``--pause-ms 900``) is always taken for
the end without speculation: what the report then counts is what became of the rest of the
question (``--no-cut-prepared`` against the default, as a ``--condition``). Usage:

    scripts/bench_live.py [WAV_OR_DIR ...] [--rounds 2] [--out out/live] [--llm-url URL]
                          [--paused N] [--pause-ms MS]

Writes live.json (every turn) and live.md (the table), prints the table. Needs PulseAudio
(scripts/setup installs it) and nothing else on the CPU: it is a benchmark.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
import wave
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the PulseAudio helpers the tests use
sys.path.insert(0, str(ROOT))

from pulse import EventLog, add_both, frame_rms, private_pulse  # noqa: E402

FRAME_S = 0.01  # 10 ms analysis frames
LOUD = 0.01  # RMS (about -40 dBFS): speech, not a null sink's silence
CONDITIONS = {"speculation on": [], "speculation off": ["--no-speculate"]}
# Pauses after a word that cannot end the sentence: the endpoint policy waits its longest
# there, so a 600 ms pause is not taken for the end and the speculation is cancelled.
PAUSED = [("Can you tell me about the", "history of bicycles?"),
          ("What is the best way to", "learn Spanish quickly?"),
          ("Could you explain why the", "ocean is salty?"),
          ("What should I do if my", "plants turn yellow?")]
PAUSE_MS = 600
PAUSED_PREFIX = "paused_"
STEM = 5  # letters of a word that say it was heard, whatever Whisper made of its end
PIECE_S = 2.2  # a turn on less audio than this answered part of a paused question
QUIET_S = 1.2  # no turn running for this long after an answer: the question is done


@dataclass
class Turn:
    condition: str
    round: int
    file: str
    transcript: str
    mouth_to_ear_ms: float | None  # measured on the recording
    speech_end_ms: float | None  # pipeline: last voiced window -> t = 0
    first_audio_ms: float | None  # pipeline: t = 0 -> first sample handed to the sink
    asr_ms: float | None
    first_sentence_ms: float | None
    tts_first_ms: float | None
    speculative: bool
    error: str | None
    # Prompt tokens the server prefilled at the turn's request (the rest was cached):
    # what priming the next prompt after each turn saves (TurnConfig.prime_next).
    prompt_n: int | None = None

    @property
    def device_ms(self) -> float | None:
        if None in (self.mouth_to_ear_ms, self.speech_end_ms, self.first_audio_ms):
            return None
        return round(self.mouth_to_ear_ms - self.speech_end_ms - self.first_audio_ms, 1)  # type: ignore[operator]


def loud_frames(path: Path) -> np.ndarray:
    """Which ``FRAME_S`` frames of a 16 kHz WAV are louder than ``LOUD`` (tests/pulse.py's
    framing, the one the PulseAudio tests read their recordings with)."""
    rms, rate = frame_rms(path, FRAME_S)
    if rate != 16000:
        raise SystemExit(f"{path}: the bench needs 16 kHz WAVs, not {rate} Hz")
    return np.asarray(rms > LOUD)


def make_paused(n: int, folder: Path, pause_ms: int = PAUSE_MS) -> list[Path]:
    """``n`` questions with a mid-sentence pause, made with espeak-ng (not the reply's voice)."""
    from bench_endpoint import speak  # espeak-ng at 16 kHz, trimmed to its voice

    from pipeline.audio_in import SAMPLE_RATE

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, (head, rest) in enumerate(PAUSED[:n]):
        parts = [speak(text, "en-us", 165, folder) for text in (head, rest)]
        gap = np.zeros(SAMPLE_RATE * pause_ms // 1000, np.float32)
        lead = np.zeros(SAMPLE_RATE // 5, np.float32)
        pcm = np.concatenate([lead, parts[0], gap, parts[1], lead])
        path = folder / f"{PAUSED_PREFIX}{i + 1:02d}.wav"
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SAMPLE_RATE)
            w.writeframes((np.clip(pcm, -1, 1) * 32767).astype(np.int16).tobytes())
        out.append(path)
    (folder / "say.wav").unlink(missing_ok=True)  # speak()'s scratch file
    return out


def spoken_paused(out: Path, n: int) -> list[Path]:
    """The ``n`` paused questions a finished run made in ``out``/paused (``--report-only``
    measures those, not new ones that could have another pause)."""
    made = sorted((out / "paused").glob(f"{PAUSED_PREFIX}*.wav"))[:n]
    if len(made) < n:
        raise SystemExit(f"bench_live: {out / 'paused'} holds {len(made)} paused questions, "
                         f"--paused says {n}: give the run's --paused")
    return made


def voiced_span(path: Path) -> tuple[float, float]:
    """(first, last) loud frame of a question, seconds from its start."""
    loud = np.flatnonzero(loud_frames(path))
    return loud[0] * FRAME_S, (loud[-1] + 1) * FRAME_S


def run_condition(env: dict[str, str], llm_url: str, questions: list[Path], extra: list[str],
                  work: Path) -> tuple[Path, list[dict[str, object]]]:
    """One talk process over all questions; returns (recording, events)."""
    events_path, recording = work / "events.jsonl", work / "speaker.wav"
    talk = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "talk", "--llm-url", llm_url, "--headphones",
         "--input-device", "pulse", "--output-device", "pulse", "--events", str(events_path),
         "--max-sentences", "2", "--record", str(work / "said"), *extra],
        cwd=ROOT, env={**env, "VOICE_LLM_STATE": str(work / "state")},
        stdout=subprocess.PIPE, stderr=open(work / "talk.log", "w"), text=True)
    recorder = None
    try:
        assert talk.stdout is not None
        ready = talk.stdout.readline()
        if not ready.startswith("ready:"):
            raise SystemExit(f"talk did not start: {(work / 'talk.log').read_text()[-500:]}")
        recorder = subprocess.Popen(["parecord", "--device=speaker.monitor", "--rate=16000",
                                     "--channels=1", "--file-format=wav", str(recording)],
                                    env=env)
        time.sleep(1.0)
        log = EventLog(events_path)
        before = 0  # questions answered so far
        for turn, question in enumerate(questions, 1):
            subprocess.run(["paplay", "--device=both", str(question)], env=env, check=True,
                           timeout=60)
            # Answered, and then no turn running for a while: a false endpoint (an answer
            # at a paused question's pause) is followed by a second turn on the rest.
            deadline, quiet_since = time.monotonic() + 120, None
            while quiet_since is None or time.monotonic() - quiet_since < QUIET_S:
                if time.monotonic() > deadline or talk.poll() is not None:
                    raise SystemExit(f"question {turn} ({question.name}) not answered; "
                                     f"see {work / 'talk.log'}")
                time.sleep(0.05)
                log.poll()
                idle = len(answered(log.events)) >= before + 1 and not running(log.events)
                quiet_since = (quiet_since or time.monotonic()) if idle else None
            before = len(answered(log.events))
    finally:
        talk.send_signal(signal.SIGINT)
        try:
            talk.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            talk.kill()
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            recorder.wait(timeout=10)
    log.poll()
    return recording, log.events


def answered(events: list[dict[str, object]]) -> list[int]:
    """The turn numbers that answered a question, in order. An abandoned speculation takes
    a turn number too (it ran, unheard), and so does a turn the user's voice cut before a
    word of it played (the rest of a paused question: its words go on with the rest's
    turn), so question k is the k-th answered turn."""
    names: dict[object, set[str]] = {}
    for e in events:
        names.setdefault(e["turn"], set()).add(f"{e['stage']}.{e['event']}")
    return [t for t, n in names.items() if "turn.end" in n  # type: ignore[misc]
            and ("speculation.start" not in n or "speculation.confirmed" in n)
            and ("bargein.detected" not in n or "playback.start" in n)]


def running(events: list[dict[str, object]]) -> bool:
    """A turn has started and not ended."""
    started = {e["turn"] for e in events if e["stage"] == "turn" and e["event"] == "start"}
    ended = {e["turn"] for e in events if e["stage"] == "turn" and e["event"] == "end"}
    return bool(started - ended)


def false_endpoints(events: list[dict[str, object]]) -> int:
    """Answered turns whose transcript is a paused question's first part only: its last
    words and none of the rest's. The rest's words are matched on their first ``STEM``
    letters, and any one of them will do: Whisper's "plan is so yellow" for "plants turn
    yellow" is the rest heard, not left out."""
    heads = [(_words(a)[-2:], [w[:STEM] for w in _words(b)]) for a, b in PAUSED]
    count = 0
    for t in answered(events):
        words = _words(next((str(e["text"]) for e in events if e["turn"] == t
                             and e["stage"] == "asr" and e["event"] == "end"), ""))
        joined = " ".join(words)
        count += any(" ".join(end) in joined
                     and not any(w.startswith(r) for w in words for r in rest)
                     for end, rest in heads)
    return count


def answered_in_pieces(events: list[dict[str, object]], samples: int) -> int:
    """Paused questions answered on part of their audio, whatever Whisper made of the words
    (``false_endpoints`` reads the transcripts, and a misheard whole question can look like
    a first part). The paused questions come after the ``samples`` sample questions; each
    is 2.7 s or more of voice, its first part under 1.5 s, so an answered turn on less than
    ``PIECE_S`` of audio answered a piece. A piece answered before the question's rest and
    the rest answered after it count once. A turn sent the words of a turn cut before it
    (``rejoined``, the rest of a question whose first part's reply was cut) was asked the
    whole question: not a piece."""
    pieces, previous_short = 0, False
    for t in answered(events)[samples:]:
        mine = [e for e in events if e["turn"] == t and e["stage"] == "asr"]
        audio_s = next((float(e["audio_s"]) for e in mine  # type: ignore[arg-type]
                        if e["event"] == "start"), None)
        rejoined = any("rejoined" in e for e in mine if e["event"] == "end")
        short = audio_s is not None and audio_s < PIECE_S and not rejoined
        pieces += short and not previous_short
        previous_short = short
    return pieces


def _words(text: str) -> list[str]:
    return "".join(c.lower() if c.isalnum() or c == " " else " " for c in text).split()


def played_s(events: list[dict[str, object]], turn: int) -> float:
    """How long turn ``turn``'s reply played (events), so the search skips past all of it:
    a reply's pauses between sentences can be longer than any quiet rule."""
    mine = {f"{e['stage']}.{e['event']}": float(e["t"]) for e in events  # type: ignore[arg-type]
            if e["turn"] == turn}
    start = mine.get("playback.start")
    end = mine.get("playback.end", mine.get("playback.stopped"))
    return 0.0 if start is None or end is None else end - start


def measure_gaps(recording: Path, questions: list[Path],
                 events: list[dict[str, object]]) -> list[float | None]:
    """Question end -> reply start, from the one recording holding both."""
    loud = loud_frames(recording)
    gaps: list[float | None] = []
    cursor = 0
    for turn, question in zip(answered(events), questions, strict=False):
        found = question_then_reply(loud, cursor, question)
        if found is None:  # no question from here on
            gaps.append(None)
            continue
        q_end, reply = found
        if reply is None:  # the question is there, no reply after it
            gaps.append(None)
            break
        gaps.append(round((reply - q_end) * FRAME_S * 1000, 1))
        cursor = reply + int((played_s(events, turn) + 0.3) / FRAME_S)
    return gaps


def question_then_reply(loud: np.ndarray, cursor: int, question: Path
                        ) -> tuple[int, int | None] | None:
    """(the question's last voiced frame, the reply's first), frames of ``FRAME_S`` in a
    recording's loudness from ``cursor`` on: the first loud frame is the question's
    onset, its voiced span (from its WAV) gives its end, the next loud frame after that
    is the reply. None when the question is not there; the reply None when it is not."""
    first, last = voiced_span(question)
    onsets = np.flatnonzero(loud[cursor:])
    if onsets.size == 0:
        return None
    q_end = cursor + onsets[0] + int(round((last - first) / FRAME_S))
    after = np.flatnonzero(loud[q_end + 3:])  # 30 ms past the question's last frame
    return q_end, (q_end + 3 + after[0] if after.size else None)


def turns_of(condition: str, round_: int, questions: list[Path], events: list[dict[str, object]],
             gaps: list[float | None]) -> list[Turn]:
    out = []
    for i, (turn, question) in enumerate(zip(answered(events), questions, strict=False), 1):
        mine = [e for e in events if e["turn"] == turn]
        end = next((e for e in mine if e["stage"] == "turn" and e["event"] == "end"), None)
        m = dict(end["metrics"]) if end else {}  # type: ignore[call-overload]
        text = next((str(e["text"]) for e in mine if e["stage"] == "asr" and e["event"] == "end"),
                    "")
        error = next((str(e["message"]) for e in mine if e["event"] == "error"), None)
        out.append(Turn(condition, round_, question.name, text, gaps[i - 1] if i <= len(gaps)
                        else None, m.get("speech_end_ms"), m.get("first_audio_ms"),
                        m.get("asr_ms"), m.get("first_sentence_ms"), m.get("tts_first_ms"),
                        m.get("speculation_confirmed_ms") is not None, error,
                        m.get("prompt_n")))
    return out


def speculation_counts(events: list[dict[str, object]]) -> dict[str, int]:
    counts = {"started": 0, "confirmed": 0, "cancelled": 0, "cancelled_idle": 0,
              "wasted_tokens": 0, "early_asr": 0, "asr_loops": 0, "asr_loops_cut": 0}
    by_turn: dict[object, list[dict[str, object]]] = {}
    for e in events:
        by_turn.setdefault(e["turn"], []).append(e)
    for evs in by_turn.values():
        names = {f"{e['stage']}.{e['event']}" for e in evs}
        counts["started"] += "speculation.start" in names
        counts["confirmed"] += "speculation.confirmed" in names
        # Whisper started at a gap before the pause (pipeline/early_asr.py) and was taken.
        counts["early_asr"] += any(e["stage"] == "asr" and e["event"] == "start"
                                   and "early_ms" in e for e in evs)
        # Whisper looped and was mended (asr.end redone): "cut" cost no second decode.
        mends = [e["redone"] for e in evs if e["stage"] == "asr" and e.get("redone")]
        counts["asr_loops"] += bool(mends)
        counts["asr_loops_cut"] += mends == ["cut"]
        if "speculation.cancelled" in names:
            counts["cancelled"] += 1
            idle = [e for e in evs if e["stage"] == "server" and e.get("confirmed")]
            asked = any(e["stage"] == "llm" and e["event"] == "request" for e in evs)
            counts["cancelled_idle"] += bool(idle) or not asked
            for e in evs:
                if e["stage"] == "llm" and e["event"] == "end":
                    counts["wasted_tokens"] += int((e.get("timings") or {}).get("predicted_n")  # type: ignore[union-attr]
                                                   or 0)
    return counts


def p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return round(s[lo] + (s[hi] - s[lo]) * (k - lo), 1)


def table(turns: list[Turn], counts: dict[str, dict[str, int]],
          pause_ms: int = PAUSE_MS) -> str:
    cols = [("mouth to ear (audio)", "mouth_to_ear_ms"), ("endpoint wait", "speech_end_ms"),
            ("asr", "asr_ms"), ("llm → 1st sentence", "first_sentence_ms"),
            ("tts 1st sentence", "tts_first_ms"), ("t0 → first audio", "first_audio_ms"),
            ("device / buffers", "device_ms"),
            ("prompt tokens prefilled at the request", "prompt_n")]
    # A paused question's gap includes the wait its pause asks for: not a mouth-to-ear
    # figure (and with a false endpoint its turns do not line up); counted, not timed.
    timed = [t for t in turns if not t.file.startswith(PAUSED_PREFIX)]
    lines = ["| ms, p50 (p95) | " + " | ".join(CONDITIONS) + " |",
             "|---|" + "---:|" * len(CONDITIONS)]
    for label, key in cols:
        cells = []
        for cond in CONDITIONS:
            vals = [getattr(t, key) for t in timed if t.condition == cond]
            vals = [v for v in vals if v is not None]
            cells.append(f"{p(vals, 50)} ({p(vals, 95)})" if vals else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    off = [t.mouth_to_ear_ms for t in timed if t.condition == "speculation off"
           and t.mouth_to_ear_ms]
    for cond in CONDITIONS:
        on = [t.mouth_to_ear_ms for t in timed if t.condition == cond and t.mouth_to_ear_ms]
        if cond != "speculation off" and on and off:
            lines.append(f"\nmouth-to-ear p50 {cond} / speculation off = "
                         f"**{p(on, 50) / p(off, 50):.2f}**"  # type: ignore[operator]
                         f" ({len(on)} and {len(off)} turns)")
    paused = sum(t.file.startswith(PAUSED_PREFIX) for t in turns) // max(1, len(CONDITIONS))
    if paused:
        lines.append(f"\npaused questions ({paused} per condition, {pause_ms} ms mid-sentence "
                     "pause; not in the table): answered at the pause (false endpoint): "
                     + ", ".join(f"{cond} {c.get('false_endpoints', 0)}"
                                 for cond, c in counts.items())
                     + "; answered on part of the audio (Whisper's words aside): "
                     + ", ".join(f"{cond} {c.get('answered_in_pieces', 0)}"
                                 for cond, c in counts.items()))
    if any(c.get("asr_loops") for c in counts.values()):
        lines.append("Whisper looped (every turn, mended; docs/contracts.md `asr_loop`): "
                     + ", ".join(f"{cond} {c.get('asr_loops', 0)} ({c.get('asr_loops_cut', 0)}"
                                 " cut at the repeat)" for cond, c in counts.items()))
    for cond, c in counts.items():
        if c.get("started"):
            lines.append(f"speculation ({cond}): started {c['started']}, confirmed "
                         f"{c['confirmed']}, cancelled {c['cancelled']} (slot confirmed "
                         f"idle: {c['cancelled_idle']}/{c['cancelled']}), wasted tokens "
                         f"{c['wasted_tokens']}, Whisper started at a gap "
                         f"{c.get('early_asr', 0)}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="*", type=Path, default=[ROOT / "samples"],
                    help="question WAVs or folders of them (default samples/)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds; the conditions alternate within each (default %(default)s)")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "live",
                    help="report (live.md, live.json), and per round and condition the "
                    "speaker recording, events and what talk heard (said/) (default out/live)")
    ap.add_argument("--llm-url", default="http://127.0.0.1:8080",
                    help="a running llama-server, e.g. from `voice-llm up` (default "
                    "%(default)s)")
    ap.add_argument("--talk-args", default="", metavar="ARGS",
                    help="extra talk options for every condition, e.g. "
                    "'--first-phrase-chars 30'")
    ap.add_argument("--condition", action="append", default=[], metavar="LABEL=ARGS",
                    help="an extra condition measured in the same run, e.g. "
                    "'phrase cut=--first-phrase-chars 30' (repeatable)")
    ap.add_argument("--paused", type=int, default=0, metavar="N",
                    help=f"add N (at most {len(PAUSED)}) espeak-ng questions with a "
                    "pause mid-sentence, so speculations get cancelled")
    ap.add_argument("--pause-ms", type=int, default=PAUSE_MS, metavar="MS",
                    help=f"the paused questions' pause (default {PAUSE_MS}); longer than "
                    "talk's --end-silence-ms (600) it is always taken for the end without "
                    "speculation")
    ap.add_argument("--report-only", action="store_true",
                    help="measure the recordings and events a finished run left in --out "
                    "again (same inputs, --rounds, --condition, --paused and --pause-ms), "
                    "run nothing")
    args = ap.parse_args()
    if not 0 <= args.paused <= len(PAUSED):
        ap.error(f"--paused takes 0 to {len(PAUSED)}")
    for spec in args.condition:
        label, _, extra = spec.partition("=")
        if not label or label in CONDITIONS:
            ap.error(f"--condition {spec!r}: give a new LABEL=ARGS")
        CONDITIONS[label.strip()] = extra.split()
    for cond in CONDITIONS:
        CONDITIONS[cond] = [*args.talk_args.split(), *CONDITIONS[cond]]
    questions = sorted(q for i in args.inputs for q in (i.glob("*.wav") if i.is_dir() else [i]))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:  # the paused questions the run spoke, whatever --pause-ms says now
        questions += spoken_paused(args.out, args.paused)
        if (args.out / "live.json").exists():
            run = json.loads((args.out / "live.json").read_text())
            args.pause_ms = run.get("pause_ms", args.pause_ms)
    else:
        questions += make_paused(args.paused, args.out / "paused", args.pause_ms)

    turns: list[Turn] = []
    counts: dict[str, dict[str, int]] = {}

    def add(cond: str, round_: int, recording: Path, events: list[dict[str, object]]) -> None:
        turns.extend(turns_of(cond, round_, questions, events,
                              measure_gaps(recording, questions, events)))
        got = speculation_counts(events) | {
            "false_endpoints": false_endpoints(events),
            "answered_in_pieces": answered_in_pieces(events, len(questions) - args.paused)}
        prev = counts.setdefault(cond, dict.fromkeys(got, 0))
        for k, v in got.items():
            prev[k] += v

    runs = [(r, cond, args.out / f"r{r}-{cond.replace(' ', '-')}")
            for r in range(1, args.rounds + 1)
            for cond in (list(CONDITIONS) if r % 2 else list(reversed(CONDITIONS)))]
    if args.report_only:
        for round_, cond, work in runs:
            add(cond, round_, work / "speaker.wav",
                [json.loads(line) for line in (work / "events.jsonl").read_text().splitlines()])
    else:
        from services.find_server import ensure_server

        llm_url = ensure_server(args.llm_url)
        with private_pulse() as env:
            add_both(env)
            for round_, cond, work in runs:
                work.mkdir(parents=True, exist_ok=True)
                print(f"round {round_}: {cond} ({len(questions)} questions) ...", flush=True)
                recording, events = run_condition(env, llm_url, questions,
                                                  CONDITIONS[cond], work)
                add(cond, round_, recording, events)
    report = table(turns, counts, args.pause_ms)
    (args.out / "live.json").write_text(json.dumps(
        {"turns": [asdict(t) | {"device_ms": t.device_ms} for t in turns],
         "speculation": counts, "pause_ms": args.pause_ms}, indent=2) + "\n")
    (args.out / "live.md").write_text(
        f"# Mouth to ear (`scripts/bench_live.py`), {time.strftime('%Y-%m-%d %H:%M')}\n\n"
        f"{report}\n")
    print(report)
    errors = [t for t in turns if t.error]
    for t in errors:
        print(f"  {t.condition} r{t.round} {t.file}: {t.error}")
    med = statistics.median([t.mouth_to_ear_ms for t in turns if t.mouth_to_ear_ms] or [0])
    print(f"\nreport: {args.out / 'live.md'} (all turns: live.json); overall p50 {med:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
