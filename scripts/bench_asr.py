#!/usr/bin/env python3
"""Whisper's fitted window against the 30 s window, the padding it needs, and the gate.

All with the real bundled Whisper base (int8, beam 1, 2 threads) on real clips:

* ``window``: the same utterances through the old path (30 s window, no gate) and the new
  one (fitted window + speech gate), interleaved, ``--repeats`` times; ASR time p50/p95,
  the ratio, and the word error rate of each on the samples and the held-out questions.
* ``pad``: word error rate, repetition loops and time of the fitted window for several
  paddings after the audio, interleaved on each clip (no fallback, so a loop shows;
  ``--mended``: each loop mended as ``WhisperAsr`` does, its time included).
* ``retry``: each question (and the halves of ``bench_live``'s paused questions) cut the
  way the live path cuts it (several lead-ins before the
  first voiced sample, several silences after the last: the gap's ~100 ms, the pause's
  ~200 ms), through the fitted window; on the cuts where Whisper loops, what each way of
  redoing it costs and gets right: the 30 s window, or the fitted window again with more
  silence after the audio (``--retry-pads``), interleaved on the same cuts, and ending the
  transcript where its repeat began (no second decode, what ``WhisperAsr`` does first).
* ``heard --run DIR``: the same comparison on what talk itself heard in a
  ``scripts/bench_live.py`` run (its ``r*/said/`` recordings, cut where each turn's
  Whisper started): the audio that came through the device path, where loops are more
  frequent than on the WAV cuts.
* ``gate``: false-reject / false-accept rates of several no-speech rules on the clips of
  ``scripts/make_gate_clips.py`` (run that first), per category for the shipped gate.

Run it alone on the machine (timings): ``flock /tmp/cpu.lock .venv/bin/python
scripts/bench_asr.py window``. Results are printed as markdown and saved as JSON in
``--out`` (default out/bench_asr).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.asr import (  # noqa: E402
    RETRY_PADS,
    Transcript,
    WhisperAsr,
    fitted_frames,
)
from pipeline.audio_in import SAMPLE_RATE, load_wav  # noqa: E402
from pipeline.metrics import pct  # noqa: E402
from pipeline.speech_gate import GateConfig, vad_verdict, whisper_verdict  # noqa: E402

CLIPS = ROOT / "out" / "gate_clips"


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()


def edits(reference: list[str], hypothesis: list[str]) -> int:
    """Word-level Levenshtein distance."""
    row = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        prev, row[0] = row[0], i
        for j, hyp in enumerate(hypothesis, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ref != hyp))
    return row[-1]


def wer(pairs: list[tuple[str, str]]) -> tuple[float, int, int]:
    """(WER, word errors, reference words) over (reference, hypothesis) pairs."""
    errors = sum(edits(words(r), words(h)) for r, h in pairs)
    total = sum(len(words(r)) for r, _ in pairs)
    return errors / max(1, total), errors, total


def speech_clips(clips_dir: Path) -> list[tuple[str, str, str, np.ndarray]]:
    """(set, name, reference text, audio): the samples, then the held-out questions."""
    out = []
    transcripts = json.loads((ROOT / "samples" / "transcripts.json").read_text())
    for name, text in sorted(transcripts.items()):
        out.append(("samples", name, text, load_wav(ROOT / "samples" / name)))
    manifest = clips_dir / "manifest.json"
    if manifest.exists():
        for name, item in sorted(json.loads(manifest.read_text()).items()):
            if item["category"] == "held-out question":
                out.append(("held-out", name, item["text"], load_wav(clips_dir / name)))
    else:
        print(f"(no {manifest}: samples only; run scripts/make_gate_clips.py for more)")
    return out


def load_asr(args: argparse.Namespace, **kwargs: Any) -> WhisperAsr:
    from services.models import whisper_model_dir

    asr = WhisperAsr(whisper_model_dir(), threads=args.threads, **kwargs)
    asr.load()
    asr.recognize(np.zeros(SAMPLE_RATE, dtype=np.float32), window="full", gated=False)
    return asr


def timed(fn: Callable[[], Transcript]) -> tuple[float, Transcript]:
    started = time.perf_counter()
    result = fn()
    return (time.perf_counter() - started) * 1000, result


def bench_window(args: argparse.Namespace) -> dict[str, Any]:
    asr = load_asr(args)
    clips = speech_clips(args.clips)
    ways: dict[str, Callable[[np.ndarray], Transcript]] = {
        "full (old: 30 s window, no gate)":
            lambda a: asr.recognize(a, window="full", gated=False),
        "fitted, no gate": lambda a: asr.recognize(a, window="fitted", gated=False),
        "fitted + gate (new default)": lambda a: asr.recognize(a, window="fitted"),
    }
    ms: dict[str, list[float]] = {k: [] for k in ways}
    texts: dict[str, dict[str, str]] = {k: {} for k in ways}
    fell_back: dict[str, int] = {k: 0 for k in ways}
    for rep in range(args.repeats):
        for i, (_set, name, _text, audio) in enumerate(clips):
            order = list(ways) if (rep + i) % 2 == 0 else list(reversed(ways))
            for way in order:
                took, result = timed(lambda w=way, a=audio: ways[w](a))
                ms[way].append(took)
                if rep == 0:
                    texts[way][name] = result.text
                    fell_back[way] += bool(result.fell_back)
    rows = []
    base = statistics.median(ms[next(iter(ways))])
    for way in ways:
        row: dict[str, Any] = {"way": way, "p50": statistics.median(ms[way]),
                               "p95": pct(ms[way], 0.95), "fell_back": fell_back[way]}
        row["ratio"] = row["p50"] / base
        for subset in ("samples", "held-out"):
            pairs = [(t, texts[way][n]) for s, n, t, _ in clips if s == subset]
            if pairs:
                row[subset] = wer(pairs)
        rows.append(row)
    print(f"\n{len(clips)} utterances ({sum(c[0] == 'samples' for c in clips)} samples, "
          f"{sum(c[0] == 'held-out' for c in clips)} held-out) x {args.repeats} repeats, "
          f"interleaved; {args.threads} threads\n")
    print("| path | asr ms p50 | p95 | p50 vs old | WER samples | WER held-out | fell back |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        def w(key: str, r: dict[str, Any] = r) -> str:
            return (f"{r[key][0]:.3f} ({r[key][1]}/{r[key][2]})" if key in r else "-")
        print(f"| {r['way']} | {r['p50']:.0f} | {r['p95']:.0f} | {r['ratio']:.2f} | "
              f"{w('samples')} | {w('held-out')} | {r['fell_back']} |")
    diffs = [(n, texts[a][n], texts[b][n]) for a, b in [(list(ways)[0], list(ways)[2])]
             for _s, n, _t, _a in clips if words(texts[a][n]) != words(texts[b][n])]
    for name, old, new in diffs:
        print(f"  differs {name}: old {old!r} / new {new!r}")
    return {"rows": rows, "texts": texts, "ms": ms}


def bench_pad(args: argparse.Namespace) -> dict[str, Any]:
    asr = load_asr(args, gate=False)
    clips = speech_clips(args.clips)
    if args.live_cuts:  # each question as the live path cuts it, and the paused halves
        clips = [(set_, f"{name} {lead:g}/{tail:g}", text, cut)
                 for set_, name, text, audio in clips + paused_parts(args.out)
                 for lead, tail, cut in live_cuts(audio, args.leads, args.tails, args.noise)]

    def decode(audio: np.ndarray, pad: float) -> tuple[Transcript, bool]:
        """The first decode at ``pad``; with --mended, a loop mended as WhisperAsr does."""
        result = asr._fitted(audio, fitted_frames(audio.size, pad))
        why = asr._looks_broken(result, audio.size)
        if why and args.mended:
            result = asr._mend(result, audio, why)
        return result, bool(why)

    pairs: dict[float, list[tuple[str, str]]] = {p: [] for p in args.pads}
    loops = {p: 0 for p in args.pads}
    ms: dict[float, list[float]] = {p: [] for p in args.pads}
    for i, (_set, _name, text, audio) in enumerate(clips):
        # interleaved, the order alternating: the pads share the machine's drift
        for pad in args.pads if i % 2 == 0 else list(reversed(args.pads)):
            started = time.perf_counter()
            result, looped = decode(audio, pad)
            ms[pad].append(1000 * (time.perf_counter() - started))
            pairs[pad].append((text, result.text))
            loops[pad] += looped
    rows = []
    mended = " (loops mended as shipped; ms include the mend)" if args.mended else ""
    print(f"\n{len(clips)} clips{mended}\n")
    print("| pad after audio | WER (errors/words) | loops | fitted ms p50 | mean |")
    print("|---:|---:|---:|---:|---:|")
    for pad in args.pads:
        rate, errors, total = wer(pairs[pad])
        rows.append({"pad_s": pad, "wer": rate, "errors": errors, "words": total,
                     "loops": loops[pad], "p50": statistics.median(ms[pad]),
                     "mean": statistics.fmean(ms[pad])})
        print(f"| {pad:.1f} s | {rate:.3f} ({errors}/{total}) | {loops[pad]}/{len(clips)} | "
              f"{statistics.median(ms[pad]):.0f} | {statistics.fmean(ms[pad]):.0f} |")
    return {"mended": args.mended, "rows": rows}


def voiced_span(audio: np.ndarray) -> tuple[int, int]:
    """First and last sample of the 10 ms frames louder than 5 % of the loudest one."""
    frame = SAMPLE_RATE // 100
    n = audio.size // frame
    rms = np.sqrt(np.mean(audio[:n * frame].reshape(n, frame) ** 2, axis=1))
    loud = np.nonzero(rms > 0.05 * rms.max())[0]
    return int(loud[0]) * frame, int(loud[-1] + 1) * frame


def live_cuts(audio: np.ndarray, leads: list[float], tails: list[float],
              noise: float = 0.0) -> list[tuple[float, float, np.ndarray]]:
    """The utterance as the segmenter hands it over, for each lead-in and trailing silence;
    ``noise``: the RMS of a room's noise floor added to it (seeded: the same every run)."""
    first, last = voiced_span(audio)
    padded = np.concatenate([audio, np.zeros(SAMPLE_RATE, dtype=np.float32)])
    rng = np.random.default_rng(7)
    cuts = []
    for lead in leads:
        for tail in tails:
            cut = padded[max(0, first - int(lead * SAMPLE_RATE)):last + int(tail * SAMPLE_RATE)]
            if noise:
                cut = cut + rng.normal(0.0, noise, cut.size).astype(np.float32)
            cuts.append((lead, tail, cut))
    return cuts


def paused_parts(workdir: Path) -> list[tuple[str, str, str, np.ndarray]]:
    """The two halves of ``bench_live``'s paused questions, each as the live path hears it
    alone (espeak-ng): the words before the pause, and the rest after a cut."""
    import tempfile

    from bench_endpoint import speak
    from bench_live import PAUSED

    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        return [("paused", f"paused_{i + 1:02d}_{half}", text,
                 speak(text, "en-us", 165, Path(tmp)))
                for i, pair in enumerate(PAUSED)
                for half, text in zip(("head", "rest"), pair, strict=True)]


def first_decode(asr: WhisperAsr, audio: np.ndarray) -> tuple[float, Transcript]:
    """The first fitted decode of ``audio`` (``DEFAULT_PAD_S``), timed, no mending."""
    return timed(lambda: asr._fitted(audio, fitted_frames(audio.size, asr.pad_s)))


def compare_mends(asr: WhisperAsr, looped: list[dict[str, Any]],
                  args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each way of mending the looped first decodes in ``looped`` (``audio``, ``first``,
    ``text``), interleaved on the same cuts; the time is the mend's, after the first."""
    ways: dict[str, Callable[[dict[str, Any]], Transcript]] = {
        "30 s window": lambda item: asr._full(item["audio"])}
    for pad in args.retry_pads:
        ways[f"fitted, pad {pad:g} s"] = (
            lambda item, p=pad: asr._fitted(item["audio"], fitted_frames(item["audio"].size, p)))
    pads = ", ".join(f"{p:g} s" for p in RETRY_PADS)
    ways[f"fitted {pads}, then 30 s (session 14)"] = (
        lambda item: asr._redo(item["audio"], "bench"))
    # What WhisperAsr does now: end where the repeat began, else the chain above.
    ways[f"cut at the repeat, else {pads}, 30 s (shipped)"] = (
        lambda item: asr._mend(item["first"], item["audio"], "bench"))
    rows: list[dict[str, Any]] = []
    if not looped:
        return rows
    ms: dict[str, list[float]] = {w: [] for w in ways}
    ok: dict[str, int] = {w: 0 for w in ways}
    cut: dict[str, int] = {w: 0 for w in ways}
    pairs: dict[str, list[tuple[str, str]]] = {w: [] for w in ways}
    for i, item in enumerate(looped):
        order = list(ways) if i % 2 == 0 else list(reversed(ways))
        for way in order:
            took, result = timed(lambda w=way, it=item: ways[w](it))
            ms[way].append(took)
            ok[way] += not asr._looks_broken(result, item["audio"].size)
            cut[way] += result.cut_at_loop
            pairs[way].append((item["text"], result.text))
            item[way] = result.text
    print("\n| mend the looped first decodes with | ms p50 | max | cut at the repeat "
          "| no loop | WER (errors/words) |")
    print("|---|---:|---:|---:|---:|---:|")
    for way in ways:
        rate, errors, total = wer(pairs[way])
        rows.append({"way": way, "p50": statistics.median(ms[way]), "max": max(ms[way]),
                     "cut": cut[way], "ok": ok[way], "wer": rate, "errors": errors,
                     "words": total})
        print(f"| {way} | {statistics.median(ms[way]):.0f} | {max(ms[way]):.0f} | "
              f"{cut[way]} | {ok[way]}/{len(looped)} | {rate:.3f} ({errors}/{total}) |")
    ends = [item["first"].loop_end for item in looped]
    probs = sorted(e.end_prob for e in ends if e is not None)
    print(f"\n{len(probs)} of {len(looped)} repeat from their first word; Whisper's "
          f"chance of ending there: " + (", ".join(f"{p:.2f}" for p in probs) or "-"))
    if args.verbose:
        for item in looped:
            print(f"- {item['name']}: {item['first'].text!r} -> " + " / ".join(
                f"{w}: {item[w]!r}" for w in ways))
    return rows


def _strip(looped: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: (v.text if k == "first" else v) for k, v in item.items() if k != "audio"}
            for item in looped]


def bench_retry(args: argparse.Namespace) -> dict[str, Any]:
    asr = load_asr(args, gate=False)
    clips = speech_clips(args.clips) + paused_parts(args.out)
    looped: list[dict[str, Any]] = []
    first_ms: list[float] = []
    cuts = 0
    for _set, name, text, audio in clips:
        for lead, tail, cut in live_cuts(audio, args.leads, args.tails, args.noise):
            cuts += 1
            took, result = first_decode(asr, cut)
            first_ms.append(took)
            if asr._looks_broken(result, cut.size):
                looped.append({"name": f"{name} lead {lead:g} tail {tail:g}", "text": text,
                               "audio": cut, "first": result})
    print(f"\n{cuts} cuts of {len(clips)} questions (lead-ins {args.leads} s, trailing "
          f"silence {args.tails} s, noise floor RMS {args.noise:g}): fitted window (pad "
          f"{asr.pad_s:g} s) p50 "
          f"{statistics.median(first_ms):.0f} ms; **{len(looped)} looped**")
    rows = compare_mends(asr, looped, args)
    return {"cuts": cuts, "fitted_p50": statistics.median(first_ms), "rows": rows,
            "looped": _strip(looped)}


def heard_turns(run: Path, asr: WhisperAsr
                ) -> list[tuple[str, int, str, str, np.ndarray, Transcript]]:
    """What talk transcribed in a ``bench_live`` run, from its recordings: per condition
    folder, each turn's (folder, turn, text, redone, audio, first decode), the audio being the
    utterance it belonged to (``said/``) cut to the turn's ``asr.start`` length. A turn
    is matched to the utterance (this one or one of the next two) whose cut Whisper
    hears most like talk did, so speculative turns on a part of one find it."""
    found = []
    for folder in sorted(p for p in run.glob("r*") if (p / "said").is_dir()):
        said = [load_wav(p) for p in sorted((folder / "said").glob("utterance-*.wav"))]
        turns: dict[int, dict[str, Any]] = {}
        for line in (folder / "events.jsonl").read_text().splitlines():
            e = json.loads(line)
            if e["stage"] != "asr":
                continue
            turn = turns.setdefault(e["turn"], {"text": "", "redone": ""})
            if e["event"] == "start":
                turn["n"] = round(e["audio_s"] * SAMPLE_RATE)
            elif e["event"] == "end":
                turn.update(text=e["text"], redone=e.get("redone", ""))
        u = 0
        for number, turn in sorted(turns.items()):
            best: tuple[float, int, Transcript] | None = None
            for c in range(u, min(u + 3, len(said))):
                if said[c].size + 160 < turn["n"]:
                    continue
                _took, heard = first_decode(asr, said[c][:turn["n"]])
                score = _overlap(heard.text, turn["text"])
                if best is None or score > best[0] + 0.05:
                    best = (score, c, heard)
            if best is None:
                continue
            _score, u, first = best
            found.append((folder.name, number, turn["text"], turn["redone"],
                          said[u][:turn["n"]], first))
    return found


def _overlap(a: str, b: str) -> float:
    wa, wb = set(words(a)), set(words(b))
    return len(wa & wb) / max(1, len(wa | wb))


def bench_heard(args: argparse.Namespace) -> dict[str, Any]:
    if args.run is None:
        raise SystemExit("heard needs --run DIR: a scripts/bench_live.py --out folder whose "
                         "talk runs recorded what they heard (r*/said/)")
    asr = load_asr(args, gate=False)
    turns = heard_turns(args.run, asr)
    if not turns:
        raise SystemExit(f"no r*/said/ recordings with events in {args.run}: run "
                         "scripts/bench_live.py first")
    looped: list[dict[str, Any]] = []
    talk_redone: dict[str, int] = {}
    for folder, number, text, redone, audio, result in turns:
        talk_redone[redone or "-"] = talk_redone.get(redone or "-", 0) + 1
        if asr._looks_broken(result, audio.size):
            # talk's own words are the reference: what it heard once mended
            looped.append({"name": f"{folder} turn {number}", "text": text,
                           "audio": audio, "first": result})
    print(f"\n{len(turns)} turns of {args.run} cut from their recordings; talk mended "
          f"{sum(v for k, v in talk_redone.items() if k != '-')} ({talk_redone}); "
          f"their first decode here: **{len(looped)} looped**")
    rows = compare_mends(asr, looped, args)
    return {"turns": len(turns), "talk_redone": talk_redone, "rows": rows,
            "looped": _strip(looped)}


RULES: dict[str, Callable[[dict[str, Any], GateConfig], bool]] = {
    # True = "this is speech, send it on"
    "no gate (any text)": lambda c, g: bool(words(c["text"])),
    "Whisper: no-speech > 0.6 and log-prob < -1": lambda c, g: bool(words(c["text"])) and not (
        c["no_speech"] > 0.6 and c["logprob"] < -1.0),
    "Whisper: no-speech > 0.4": lambda c, g: bool(words(c["text"])) and c["no_speech"] <= 0.4,
    "Silero only": lambda c, g: bool(words(c["text"])) and vad_verdict(c["ev"], g).speech,
    "shipped gate (Silero, then Whisper)": lambda c, g: vad_verdict(c["ev"], g).speech
    and whisper_verdict(c["text"], c["no_speech"], c["logprob"], g).speech,
    # Not shipped: the price of also refusing voices without words (reversed speech).
    "shipped gate + log-prob floor -1.5": lambda c, g: vad_verdict(c["ev"], g).speech
    and whisper_verdict(c["text"], c["no_speech"], c["logprob"], g).speech
    and c["logprob"] >= -1.5,
}


def bench_gate(args: argparse.Namespace) -> dict[str, Any]:
    manifest_path = args.clips / "manifest.json"
    if not manifest_path.exists():
        sys.exit(f"{manifest_path}: missing; run scripts/make_gate_clips.py first")
    manifest = json.loads(manifest_path.read_text())
    asr = load_asr(args)
    assert asr.gate is not None
    config = asr.gate.config
    results: dict[str, list[dict[str, Any]]] = {}
    for window in args.windows:
        rows = []
        for name, item in sorted(manifest.items()):
            audio = load_wav(args.clips / name)
            ev = asr.gate.evidence(audio)
            raw = asr.recognize(audio, window=window, gated=False)
            rows.append({"name": name, **item, "ev": ev, "text": raw.text,
                         "no_speech": raw.no_speech_prob, "logprob": raw.avg_logprob,
                         "fell_back": raw.fell_back})
        results[window] = rows
        speech = [r for r in rows if r["speech"]]
        other = [r for r in rows if not r["speech"]]
        print(f"\n### {window} window: {len(speech)} speech clips, {len(other)} non-speech\n")
        print("| rule | false rejects (speech dropped) | false accepts (non-speech sent on) |")
        print("|---|---:|---:|")
        for rule, accepts in RULES.items():
            fr = [r["name"] for r in speech if not accepts(r, config)]
            fa = [r["name"] for r in other if accepts(r, config)]
            print(f"| {rule} | {len(fr)}/{len(speech)} ({len(fr) / len(speech):.0%}) | "
                  f"{len(fa)}/{len(other)} ({len(fa) / len(other):.0%}) |")
        print("\nshipped gate by category:\n")
        print("| category | clips | sent on to the LLM |")
        print("|---|---:|---:|")
        for category in dict.fromkeys(r["category"] for r in rows):
            group = [r for r in rows if r["category"] == category]
            passed = sum(RULES["shipped gate (Silero, then Whisper)"](r, config) for r in group)
            print(f"| {category} ({'speech' if group[0]['speech'] else 'not speech'}) | "
                  f"{len(group)} | {passed} |")
        if args.verbose:
            print("\n| clip | speech | voiced ms | no-speech | log-prob | text |")
            print("|---|---|---:|---:|---:|---|")
            for r in rows:
                print(f"| {r['name']} | {r['speech']} | {r['ev'].voiced_ms:.0f} | "
                      f"{r['no_speech']:.2f} | {r['logprob']:.2f} | {r['text'][:50]!r} |")
    return {w: [{k: (v.__dict__ if k == "ev" else v) for k, v in r.items()} for r in rows]
            for w, rows in results.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("window", "pad", "retry", "heard", "gate"),
                        help="the bench to run (above)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="window: passes over the clips (default %(default)s)")
    parser.add_argument("--threads", type=int, default=2,
                        help="Whisper's CPU threads (default %(default)s)")
    parser.add_argument("--pads", type=float, nargs="+",
                        default=[0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0],
                        help="pad: silences after the audio to compare, s")
    parser.add_argument("--leads", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3],
                        help="retry, pad --live-cuts: lead-ins before the first voiced sample, s")
    parser.add_argument("--tails", type=float, nargs="+",
                        default=[0.05, 0.1, 0.15, 0.2, 0.3],
                        help="retry, pad --live-cuts: silences after the last voiced sample, s")
    parser.add_argument("--live-cuts", action="store_true",
                        help="pad: cut each question as the live path does (--leads, "
                        "--tails) and add the paused questions' halves")
    parser.add_argument("--mended", action="store_true",
                        help="pad: mend each loop as WhisperAsr does (cut at the repeat, "
                        "else more silence, else 30 s) and count the mend's time")
    parser.add_argument("--noise", type=float, default=0.0, metavar="RMS",
                        help="retry, pad --live-cuts: add a noise floor of this RMS to every "
                        "cut (0.001 is about -60 dBFS, a quiet room; default none)")
    parser.add_argument("--retry-pads", type=float, nargs="+", default=[4.0, 5.0, 6.0, 8.0],
                        help="retry: paddings for a second fitted decode, s")
    parser.add_argument("--run", type=Path, metavar="DIR",
                        help="heard: a scripts/bench_live.py --out folder (its r*/said/)")
    parser.add_argument("--windows", nargs="+", default=["fitted", "full"],
                        help="window: the windows to compare")
    parser.add_argument("--clips", type=Path, default=CLIPS,
                        help="clips of scripts/make_gate_clips.py (default out/gate_clips)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench_asr",
                        help="where <bench>.json goes (default out/bench_asr)")
    parser.add_argument("-v", "--verbose", action="store_true", help="gate: every clip")
    args = parser.parse_args()
    import os

    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    benches = {"window": bench_window, "pad": bench_pad, "retry": bench_retry,
               "heard": bench_heard, "gate": bench_gate}
    result = benches[args.what](args)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.what}.json"
    path.write_text(json.dumps(result, indent=1, default=str))
    print(f"\n(json: {path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
