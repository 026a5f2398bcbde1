#!/usr/bin/env python3
"""The Wyoming hop: the same recorded turns with in-process vs Wyoming ASR and TTS, one run.

Three conditions, alternated per run (the order rotates so none always goes first), each
run of each condition one fresh conversation of all the WAV turns, streamed, against the
same real llama-server, replies played in real time into the null sink:

- ``local``: the defaults (Whisper on the fitted window, Piper on 1 thread);
- ``local-as-servers``: in-process, but computing what the servers compute (Whisper on its
  30 s window as wyoming-faster-whisper runs it, Piper on onnxruntime's default threads as
  wyoming-piper loads it), so that ``wyoming`` minus this is what the protocol adds;
- ``wyoming``: ``--asr``/``--tts`` on wyoming-faster-whisper and wyoming-piper started here
  on loopback with the bundled models.

Then, without the LLM, the hop itself on identical work (alternating, same inputs): each
WAV transcribed in-process (30 s window) and by the server, each reply sentence synthesized
in-process (default threads) and by the server, and a bare ``describe`` round trip.

    flock /tmp/cpu.lock .venv/bin/python scripts/bench_engines.py samples/ \
        [--runs 2] [--max-sentences 1] [--llm-url URL] [--out out/engines]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pipeline.metrics import pct  # noqa: E402
from services.server_check import free_port  # noqa: E402

METRICS = ("asr_ms", "ttft_ms", "first_sentence_ms", "tts_first_ms", "first_audio_ms",
           "overhead_ms")
CONDITIONS = ("local", "local-as-servers", "wyoming")


async def turns(args: argparse.Namespace, wavs: list[Path], engines: dict[str, Any],
                rows: list[dict[str, Any]]) -> dict[str, Any]:
    from pipeline.asr import WhisperAsr
    from pipeline.audio_in import load_wav
    from pipeline.audio_out import RealtimeNullSink
    from pipeline.conversation import Conversation
    from pipeline.tts import PiperTts
    from services import models
    from services.assistant import Assistant, load_assistant, make_asr, make_tts

    local = await load_assistant(args.llm_url)
    full = WhisperAsr(models.whisper_model_dir(), window="full")
    onnx, cfg = models.piper_voice()
    default_threads = PiperTts(onnx, cfg, threads=None)
    await asyncio.to_thread(full.load)
    await asyncio.to_thread(default_threads.load)
    remote_asr = await asyncio.to_thread(make_asr, engines["asr"], language="en", threads=2,
                                         window="fitted")
    remote_tts = await asyncio.to_thread(make_tts, engines["tts"], threads=None)
    # Only the first sentence matters here (asr, its TTS, first audio): the rest of a reply
    # would be seconds of real-time playback per turn.
    config = replace(local.config, max_sentences=args.max_sentences)
    assistants = {
        "local": Assistant(local.asr, local.tts, local.llm, local.llm_url, config),
        "local-as-servers": Assistant(full, default_threads, local.llm, local.llm_url, config),
        "wyoming": Assistant(remote_asr, remote_tts, local.llm, local.llm_url, config),
    }
    audio = {wav: await asyncio.to_thread(load_wav, wav) for wav in wavs}
    sink = RealtimeNullSink()
    await sink.open(local.tts.sample_rate)
    for name, assistant in assistants.items():  # unmeasured: warm server, threads, caches
        assert assistant.tts.sample_rate == local.tts.sample_rate, name
        await assistant.runner(sink, Conversation()).run(next(iter(audio.values())))
    sentences: list[str] = []
    for run in range(1, args.runs + 1):
        shift = (run - 1) % len(CONDITIONS)
        for name in CONDITIONS[shift:] + CONDITIONS[:shift]:
            runner = assistants[name].runner(sink, Conversation())
            for wav, samples in audio.items():
                result = await runner.run(samples)
                m = result.metrics.to_dict()
                row = {"condition": name, "run": run, "file": wav.name, "error": result.error,
                       **{k: m.get(k) for k in METRICS}, "transcript": result.transcript}
                if name == "wyoming":
                    call = remote_asr.last_call  # type: ignore[attr-defined]
                    row |= {"asr_connect_ms": call.connect_ms, "asr_send_ms": call.send_ms,
                            "asr_reply_ms": call.reply_ms}
                rows.append(row)
                # after every turn: a slow machine or a timeout keeps what was measured
                (args.out / "turns.json").write_text(json.dumps(rows, indent=2))
                sentences += [e.data["text"] for e in result.events
                              if e.name == "splitter.sentence"]
                print(f"run {run} {name:17} {wav.name:28} first audio "
                      f"{m.get('first_audio_ms')} ms  asr {m.get('asr_ms')}  "
                      f"tts1 {m.get('tts_first_ms')}", file=sys.stderr, flush=True)
    await sink.close()
    await local.close()
    return {"full": full, "piper": default_threads, "remote_asr": remote_asr,
            "remote_tts": remote_tts, "audio": audio,
            "sentences": list(dict.fromkeys(sentences))[: args.sentences]}


def hop(parts: dict[str, Any], engines: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Identical work in-process and on the server, alternating: the protocol's cost."""
    from pipeline.wyoming_wire import describe

    def timed(fn: Any, *a: Any) -> float:
        t = time.perf_counter()
        fn(*a)
        return (time.perf_counter() - t) * 1000

    def paired(first_local: bool, local: Any, remote: Any, arg: Any) -> list[float]:
        """[local ms, remote ms] on the same input, the order alternating per round."""
        if first_local:
            a = timed(local, arg)
            return [a, timed(remote, arg)]
        b = timed(remote, arg)
        return [timed(local, arg), b]

    asr_pairs, tts_pairs, rtt = [], [], []
    for i in range(repeats):
        asr_pairs += [paired(i % 2 == 0, parts["full"].transcribe,
                             parts["remote_asr"].transcribe, samples)
                      for samples in parts["audio"].values()]
        tts_pairs += [paired(i % 2 == 0, parts["piper"].synthesize,
                             parts["remote_tts"].synthesize, text)
                      for text in parts["sentences"]]
    for engine in (engines["asr"], engines["tts"]):
        for _ in range(20):
            rtt.append(timed(describe, engine.host, engine.port, 5.0, str(engine)))
    return {"asr": asr_pairs, "tts": tts_pairs, "describe_ms": rtt}


def summary(rows: list[dict[str, Any]], hops: dict[str, Any]) -> dict[str, Any]:
    ok = [r for r in rows if not r["error"]]
    out: dict[str, Any] = {"conditions": {}, "paired": {}, "hop": {}}
    for name in CONDITIONS:
        mine = [r for r in ok if r["condition"] == name]
        out["conditions"][name] = {
            k: {"p50": pct([r[k] for r in mine if r.get(k) is not None], 0.5),
                "p95": pct([r[k] for r in mine if r.get(k) is not None], 0.95),
                "n": sum(r.get(k) is not None for r in mine)}
            for k in (*METRICS, "asr_connect_ms", "asr_send_ms", "asr_reply_ms")}
    by_key = {(r["condition"], r["run"], r["file"]): r for r in ok}
    for base in ("local", "local-as-servers"):
        for k in ("asr_ms", "tts_first_ms", "first_audio_ms"):
            diffs = [by_key[("wyoming", run, f)][k] - r[k]
                     for (c, run, f), r in by_key.items() if c == base
                     and ("wyoming", run, f) in by_key and r[k] is not None
                     and by_key[("wyoming", run, f)][k] is not None]
            out["paired"][f"wyoming - {base}: {k}"] = {"p50": pct(diffs, 0.5),
                                                     "n": len(diffs)}
    for stage in ("asr", "tts"):
        pairs = hops[stage]
        out["hop"][stage] = {"in_process_p50": pct([a for a, _ in pairs], 0.5),
                             "server_p50": pct([b for _, b in pairs], 0.5),
                             "added_p50": pct([b - a for a, b in pairs], 0.5),
                             "added_mean": round(statistics.fmean(b - a for a, b in pairs), 1)
                             if pairs else None, "n": len(pairs)}
    out["hop"]["describe_ms"] = {"p50": pct(hops["describe_ms"], 0.5),
                                 "p95": pct(hops["describe_ms"], 0.95)}
    return out


def markdown(s: dict[str, Any]) -> str:
    lines = ["| metric (p50 / p95 ms) | " + " | ".join(CONDITIONS) + " |",
             "|---|" + "---:|" * len(CONDITIONS)]
    for k in METRICS:
        cells = [s["conditions"][c][k] for c in CONDITIONS]
        lines.append(f"| {k} | " + " | ".join(
            "-" if v["p50"] is None else f"{v['p50']:.0f} / {v['p95']:.0f}" for v in cells)
            + " |")
    lines += ["", "| paired per turn (same file, same run) | p50 ms | n |", "|---|---:|---:|"]
    for k, v in s["paired"].items():
        lines.append(f"| {k} | {v['p50']} | {v['n']} |")
    lines += ["", "| identical work, alternating | in-process p50 | server p50 | "
              "added p50 | added mean | n |", "|---|---:|---:|---:|---:|---:|"]
    for stage in ("asr", "tts"):
        h = s["hop"][stage]
        lines.append(f"| {stage} | {h['in_process_p50']} | {h['server_p50']} | "
                     f"{h['added_p50']} | {h['added_mean']} | {h['n']} |")
    d = s["hop"]["describe_ms"]
    lines.append(f"| bare describe round trip | | | {d['p50']} (p95 {d['p95']}) | | 40 |")
    w = s["conditions"]["wyoming"]
    lines.append("")
    lines.append(f"Wyoming ASR call, p50: connect {w['asr_connect_ms']['p50']} ms, sending "
                 f"the audio {w['asr_send_ms']['p50']} ms, audio-stop -> transcript "
                 f"{w['asr_reply_ms']['p50']} ms.")
    return "\n".join(lines) + "\n"


async def main_async(args: argparse.Namespace, wavs: list[Path]) -> int:
    from services.engines import speech_servers

    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()[0]
    with speech_servers(free_port(), free_port(), log_dir=args.out / "servers") as engines:
        parts = await turns(args, wavs, engines, rows)
        hops = await asyncio.to_thread(hop, parts, engines, args.hop_repeats)
    s = summary(rows, hops)
    s["load_avg_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    (args.out / "engines.json").write_text(json.dumps({"turns": rows, "summary": s,
                                                       "hop": hops}, indent=2))
    table = markdown(s) + (f"\nLoad average (1 min) before / after: "
                           f"{s['load_avg_1min'][0]} / {s['load_avg_1min'][1]}.\n")
    (args.out / "engines.md").write_text(table)
    print(table)
    errors = [r for r in rows if r["error"]]
    for r in errors:
        print(f"bench_engines: {r['condition']} {r['file']}: {r['error']}", file=sys.stderr)
    return 1 if errors else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("inputs", nargs="?", default=str(ROOT / "samples"),
                   help="a WAV or a folder of them (default samples/)")
    p.add_argument("--runs", type=int, default=2, help="conversations per condition "
                   "(default %(default)s)")
    p.add_argument("--llm-url", default="http://127.0.0.1:8080")
    p.add_argument("--hop-repeats", type=int, default=2, metavar="N",
                   help="passes over the WAVs and sentences in the hop measure (default 2)")
    p.add_argument("--sentences", type=int, default=12, metavar="N",
                   help="reply sentences used in the TTS hop measure (default 12)")
    p.add_argument("--max-sentences", type=int, default=1, metavar="N",
                   help="sentences per reply (default %(default)s: only the first is "
                   "measured)")
    p.add_argument("--out", type=Path, default=ROOT / "out" / "engines")
    args = p.parse_args()
    # SIGTERM (timeout, kill) unwinds like Ctrl-C, so the speech servers are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    where = Path(args.inputs)
    wavs = sorted(where.glob("*.wav")) if where.is_dir() else [where]
    args.out.mkdir(parents=True, exist_ok=True)
    return asyncio.run(main_async(args, wavs))


if __name__ == "__main__":
    sys.exit(main())
