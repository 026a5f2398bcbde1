#!/usr/bin/env python3
"""Soak through the service API (issue 12): N consecutive WAV turns in one session of
``voice-llm serve``, a third of them barged in with ``POST /v1/sessions/{id}/interrupt``.

Starts its own llama-server (on a free port, own state folder) and its own ``serve``
against it (scripts/load_serve.py's stack), unless ``--url`` names a running serve. Every
turn is a sample WAV uploaded to ``POST /v1/sessions/{id}/turns`` (real Whisper, real LLM,
real Piper); the NDJSON stream is read to its end. The client behaves like one that plays
the reply itself, in real time from its first audio line: a barge-in comes a random
0-1.5 s after the turn's first sentence line and says how much was played
(``played_samples``). serve hands audio over faster than it is played, so some barge-ins
find the turn still generating (a server-side hang-up: its slot must be confirmed idle) and
the rest find it over (the history must be cut at what was played). Reports turns
completed, errors, both kinds of barge-in with their checks (``server.slot_idle``
confirmed; the history's last reply marked ``…``), and serve's RSS, open fds, sockets and
asyncio tasks after a warm-up, every 20 turns and at the end. A benchmark, not a test:

    flock /tmp/cpu.lock .venv/bin/python scripts/soak_serve.py [--turns 200] [--out out/soak]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_serve import SAMPLES, health, proc_stats, start_stack  # noqa: E402
from soak import SHORT_REPLY_CHARS, passed, resource_table  # noqa: E402

from pipeline.heard import worth_keeping  # noqa: E402

WAVS = {wav: wav.read_bytes() for wav in SAMPLES}


def resources(pid: int | None, tasks: int | None) -> dict[str, Any]:
    """serve's RSS, open fds and sockets (load_serve's proc_stats) and asyncio tasks."""
    if pid is None:
        return {"asyncio_tasks": tasks}
    stats = proc_stats(pid)
    return {"rss_mb": stats.get("rss_mb"), "fds": stats.get("fds"),
            "sockets": stats.get("sockets"), "asyncio_tasks": tasks}


async def one_turn(http: aiohttp.ClientSession, url: str, sid: str, wav: Path,
                   bargein_at: float | None, max_sentences: int | None = None
                   ) -> dict[str, Any]:
    body = WAVS[wav]
    record: dict[str, Any] = {"file": wav.name, "bargein_at": bargein_at, "error": None,
                              "interrupted": False, "slot_idle": None, "cut": None}
    interrupter: asyncio.Task[None] | None = None
    received, rate = 0, 0
    first_audio: float | None = None

    async def interrupt_later(delay: float) -> None:
        await asyncio.sleep(delay)
        playing = 0.0 if first_audio is None else time.monotonic() - first_audio
        played = min(received, int(playing * rate))  # what a real-time player has played
        async with http.post(f"{url}/v1/sessions/{sid}/interrupt",
                             json={"played_samples": played}) as resp:
            answer = await resp.json()
        record.update(played_samples=played, interrupt_answer=answer.get("interrupted"))
        if answer.get("cut") is not None:  # the turn was over: cut at once
            record["cut"] = answer["cut"]

    query = {} if max_sentences is None else {"max_sentences": str(max_sentences)}
    async with http.post(f"{url}/v1/sessions/{sid}/turns", data=body, params=query,
                         headers={"Content-Type": "audio/wav"}) as resp:
        if resp.status != 200:
            record["error"] = f"HTTP {resp.status}: {(await resp.text())[:200]}"
            return record
        async for raw in resp.content:
            line = json.loads(raw)
            kind = line["type"]
            if kind == "sentence" and bargein_at is not None and interrupter is None:
                interrupter = asyncio.create_task(interrupt_later(bargein_at))
            elif kind == "audio":
                first_audio = first_audio or time.monotonic()
                received, rate = received + line["samples"], line["sample_rate"]
            elif kind == "event" and line["event"].get("stage") == "server" and \
                    line["event"].get("event") == "slot_idle":
                record["slot_idle"] = line["event"].get("confirmed")
            elif kind == "error":
                record["error"] = line["error"]
            elif kind == "result":
                record.update(error=line["error"], interrupted=line["interrupted"],
                              first_audio_ms=line["metrics"].get("first_audio_ms"),
                              audio_samples=received, reply=line["reply"][:80],
                              transcript=line["transcript"],
                              reply_chars=len(line["reply"]),
                              heard_chars=len(line["heard"]))
    if interrupter is not None:  # the player goes on after the stream has ended
        await interrupter
        async with http.get(f"{url}/v1/sessions/{sid}") as resp:
            described = await resp.json()
        history = described["history"]
        heard = described["records"][-1]["heard"]  # after a cut made once the turn was over
        record.update(hung_up=record.get("interrupt_answer") is True, heard=heard[:80],
                      heard_chars=len(heard))
        # What the client played is what the history says was said: the reply marked as
        # cut, or, when too little of it was heard, the turn not kept at all.
        kept_this = len(history) >= 2 and history[-2]["content"] == record.get("transcript")
        record["history_cut"] = (history[-1]["content"].endswith("…") and worth_keeping(heard)
                                 if kept_this else not worth_keeping(heard))
    return record


async def soak(args: argparse.Namespace, url: str, pid: int | None) -> dict[str, Any]:
    rng = random.Random(args.seed)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as http:
        async with http.post(f"{url}/v1/sessions") as resp:
            sid = (await resp.json())["id"]
        for wav in SAMPLES[:3]:  # warm-up: models, pools and caches reach their size
            await one_turn(http, url, sid, wav, None, args.max_sentences)
        await asyncio.sleep(1.0)
        samples = [{"turn": 0, **resources(pid, (await health(http, url)).get("tasks"))}]
        turns: list[dict[str, Any]] = []
        started = time.monotonic()
        for i in range(args.turns):
            at = round(rng.uniform(0.0, 1.5), 2) if rng.random() < 1 / 3 else None
            turns.append({"turn": i + 1, **await one_turn(
                http, url, sid, SAMPLES[i % len(SAMPLES)], at, args.max_sentences)})
            if (i + 1) % 20 == 0:
                await asyncio.sleep(0.5)  # let the turn's handler task finish
                samples.append({"turn": i + 1, **resources(
                    pid, (await health(http, url)).get("tasks"))})
                print(f"soak: {i + 1}/{args.turns} turns, {samples[-1]}", file=sys.stderr)
        seconds = round(time.monotonic() - started, 1)
        async with http.get(f"{url}/v1/sessions/{sid}") as resp:
            history = (await resp.json()).get("history", [])
        async with http.delete(f"{url}/v1/sessions/{sid}"):
            pass
    await asyncio.sleep(1.0)  # our keep-alive connection closed: count what serve kept
    async with aiohttp.ClientSession() as http:
        end = resources(pid, (await health(http, url)).get("tasks"))
    interrupted = [t for t in turns if t["interrupted"]]
    bargeins = [t for t in turns if t["bargein_at"] is not None]
    hung_up = [t for t in bargeins if t.get("hung_up")]
    cut_after = [t for t in bargeins if t["cut"]]
    return {
        "via": "serve", "turns": args.turns,
        "completed": sum(t["error"] is None for t in turns),
        "errors": [t for t in turns if t["error"]],
        "planned_bargeins": sum(t["bargein_at"] is not None for t in turns),
        "interrupted": len(interrupted),
        "interrupted_confirmed_idle": sum(t["slot_idle"] is True for t in interrupted),
        "hung_up_mid_turn": len(hung_up), "cut_after_turn": len(cut_after),
        "played_everything": sum(t["cut"] is False for t in bargeins),
        # answered without a sound and not barged in on: a reply that says nothing
        "silent_turns": sum(t.get("audio_samples") == 0 and t["bargein_at"] is None
                            for t in turns),
        "short_replies": sum((t.get("reply_chars") or 0) < SHORT_REPLY_CHARS
                             and not t["interrupted"] for t in turns),
        # every barge-in that stopped playback short left a history marked as cut
        "history_cut_ok": sum(t.get("history_cut") is True for t in hung_up + cut_after),
        "history_messages": len(history), "seconds": seconds,
        "start": samples[0], "end": end, "samples": samples, "per_turn": turns,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=200)
    p.add_argument("--url", help="a running serve (default: start llama-server and serve)")
    p.add_argument("--out", type=Path, default=Path("out/soak"))
    p.add_argument("--seed", type=int, default=12)
    p.add_argument("--max-sentences", type=int, metavar="N",
                   help="the turns' max_sentences option (default: the product's 4); 2 "
                   "makes a shorter run")
    args = p.parse_args()
    stack = None
    pid: int | None = None
    if args.url:
        url = args.url.rstrip("/")
    else:
        print("starting llama-server and serve ...", file=sys.stderr, flush=True)
        url, pids, stack = start_stack(slots=1, ctx=4096)
        pid = pids[0]
    try:
        r = asyncio.run(soak(args, url, pid))
    finally:
        if stack is not None:
            _state, server, serve = stack
            serve.terminate()
            serve.wait(timeout=30)
            server.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak_serve.json").write_text(json.dumps(r, indent=2) + "\n")
    print(f"via serve: turns completed {r['completed']}/{r['turns']} · errors "
          f"{len(r['errors'])} · interrupted {r['interrupted']} of {r['planned_bargeins']} "
          f"planned, slot confirmed idle after {r['interrupted_confirmed_idle']}/"
          f"{r['interrupted']} · {r['seconds']} s")
    print(f"barge-ins: {r['hung_up_mid_turn']} hung up mid-turn, {r['cut_after_turn']} cut "
          f"the history after the turn, {r['played_everything']} came after all was played; "
          f"history marked as cut {r['history_cut_ok']}/"
          f"{r['hung_up_mid_turn'] + r['cut_after_turn']} · silent replies "
          f"{r['silent_turns']} · short replies {r['short_replies']}")
    print(resource_table(r))
    print(f"wrote {args.out / 'soak_serve.json'}")
    history_ok = r["history_cut_ok"] == r["hung_up_mid_turn"] + r["cut_after_turn"]
    return passed(r) or (0 if history_ok and r["silent_turns"] == 0 else 1)

if __name__ == "__main__":
    sys.exit(main())
