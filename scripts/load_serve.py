#!/usr/bin/env python3
"""Load benchmark for ``voice-llm serve``: N concurrent API sessions on loopback.

Starts its own llama-server (``--slots``, on a free port, own state folder) and its own
``voice-llm serve`` against it, unless ``--url`` names a running serve. Each level runs N
sessions at once; each session replays ``--turns`` sample WAVs through
``POST /v1/sessions/{id}/turns`` and reads the NDJSON stream to its end. Bounded: at most
``--turns`` turns per session, each level stops at ``--level-timeout`` seconds, and
everything started here is stopped by pid at the end.

Reports per level: turns completed, errors, first_audio p50/p95 (end of upload -> first
audio line, as the service measured it), queue wait p50/max, KV cache reuse on turns 2+
(cache_n / (cache_n + prompt_n)), and the serve process's sockets / asyncio tasks / RSS
before and after. Run it alone on the machine (``flock /tmp/cpu.lock``):

    flock /tmp/cpu.lock .venv/bin/python scripts/load_serve.py --levels 1,2,4 --turns 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pipeline.metrics import pct  # noqa: E402
from services.server_check import free_port  # noqa: E402

SAMPLES = sorted((ROOT / "samples").glob("*.wav"))


def proc_stats(pid: int | None) -> dict[str, Any]:
    """A process's open fds, sockets among them and RSS, from /proc ({} when it is gone)."""
    if pid is None:
        return {}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        sockets = sum(_link(pid, fd).startswith("socket:") for fd in fds)
        rss = next(int(line.split()[1]) for line in
                   Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return {}
    return {"fds": len(fds), "sockets": sockets, "rss_mb": round(rss / 1024, 1)}


def _link(pid: int, fd: str) -> str:
    """Where one fd points; "" when it closed since the listing (not a reason to give up)."""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return ""


async def health(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(f"{url}/health") as resp:
        data: dict[str, Any] = await resp.json()
        return data


async def one_session(http: aiohttp.ClientSession, url: str, turns: int, offset: int
                      ) -> list[dict[str, Any]]:
    async with http.post(f"{url}/v1/sessions") as resp:
        sid = (await resp.json())["id"]
    records = []
    try:
        for i in range(turns):
            wav = SAMPLES[(offset + i) % len(SAMPLES)]
            record: dict[str, Any] = {"session": sid, "turn": i + 1, "queue_wait_ms": 0.0}
            async with http.post(f"{url}/v1/sessions/{sid}/turns", data=wav.read_bytes(),
                                 headers={"Content-Type": "audio/wav"}) as resp:
                if resp.status != 200:
                    record["error"] = f"HTTP {resp.status}: {await resp.text()}"
                else:
                    async for raw in resp.content:
                        line = json.loads(raw)
                        if line["type"] == "slot":
                            record["queue_wait_ms"] = line["queue_wait_ms"]
                        elif line["type"] == "error":
                            record["error"] = line["error"]
                        elif line["type"] == "result":
                            record.update(line["metrics"], error=line["error"],
                                          id_slot=line["id_slot"])
            records.append(record)
    finally:
        async with http.delete(f"{url}/v1/sessions/{sid}"):
            pass
    return records


async def level(url: str, n: int, turns: int, limit_s: float, pid: int | None
                ) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=limit_s)) as http:
        before = {**proc_stats(pid), "tasks": (await health(http, url)).get("tasks")}
        start = time.monotonic()
        jobs = [one_session(http, url, turns, offset=k * turns) for k in range(n)]
        try:
            results = await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True),
                                             limit_s)
        except TimeoutError:
            results = [TimeoutError(f"level {n} took over {limit_s:g} s")]
        wall = time.monotonic() - start
    # Counted after our client closed its keep-alive connections (each open one is a
    # handler task and a socket in serve), so what remains is what serve kept.
    await asyncio.sleep(1.0)
    async with aiohttp.ClientSession() as http:
        after = {**proc_stats(pid), "tasks": (await health(http, url)).get("tasks")}
    records = [r for res in results if isinstance(res, list) for r in res]
    failures = [str(res) for res in results if isinstance(res, BaseException)]
    ok = [r for r in records if not r.get("error") and r.get("first_audio_ms") is not None]
    later = [r for r in ok if r["turn"] >= 2 and r.get("cache_n") is not None
             and r.get("prompt_n") is not None]
    cached = sum(r["cache_n"] for r in later)
    total = sum(r["cache_n"] + r["prompt_n"] for r in later)
    fa = [r["first_audio_ms"] for r in ok]
    qw = [r["queue_wait_ms"] for r in records]
    return {"sessions": n, "turns": len(ok), "errors": len(records) - len(ok) + len(failures),
            "error_lines": [r["error"] for r in records if r.get("error")] + failures,
            "first_audio_p50": pct(fa, 0.5), "first_audio_p95": pct(fa, 0.95),
            "queue_wait_p50": pct(qw, 0.5), "queue_wait_max": max(qw, default=None),
            "cache_reuse_turn2plus": round(cached / total, 3) if total else None,
            "slots_used": sorted({r.get("id_slot") for r in ok if r.get("id_slot") is not None}),
            "wall_s": round(wall, 1), "before": before, "after": after,
            "records": [{k: r.get(k) for k in ("session", "turn", "id_slot", "queue_wait_ms",
                                               "first_audio_ms", "cache_n", "prompt_n",
                                               "error")} for r in records]}


def start_stack(slots: int, ctx: int) -> tuple[str, list[int], Any]:
    """Our own llama-server (-np slots) and serve; returns serve's URL and the pids."""
    from services.llama_server import LlamaServer, ServerOptions

    state = tempfile.TemporaryDirectory(prefix="load-serve-")
    server = LlamaServer(Path(state.name))
    info = server.start(ServerOptions(port=free_port(), parallel=slots, ctx=ctx), quiet=True)
    port = free_port()
    log = open(Path(state.name) / "serve.log", "wb")  # noqa: SIM115 - lives as long as serve
    serve = subprocess.Popen([str(ROOT / ".venv/bin/voice-llm"), "serve", "--port", str(port),
                              "--llm-url", info.url, "--max-sessions", "32",
                              "--rate-limit", "0"],  # all sessions share one address
                             stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            raise SystemExit(f"serve exited; see {log.name}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.5)
    else:
        raise SystemExit("serve did not start in 180 s")
    return url, [serve.pid, info.pid], (state, server, serve)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", help="a running serve (default: start llama-server + serve here)")
    p.add_argument("--serve-pid", type=int, help="with --url: its pid, for sockets / RSS")
    p.add_argument("--levels", default="1,2,4", help="concurrent sessions per level")
    p.add_argument("--turns", type=int, default=3, help="turns per session (max 6)")
    p.add_argument("--slots", type=int, default=4, help="llama-server -np when started here")
    p.add_argument("--ctx", type=int, default=8192, help="llama-server -c when started here")
    p.add_argument("--level-timeout", type=float, default=240.0)
    p.add_argument("--json", type=Path, help="write the results here too")
    args = p.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    if not 1 <= args.turns <= 6 or not all(1 <= n <= 8 for n in levels):
        p.error("--turns 1-6 and levels 1-8: this is a bounded benchmark")
    stack = None
    url, pid = args.url, args.serve_pid
    if url is None:
        url, pids, stack = start_stack(args.slots, args.ctx)
        pid = pids[0]
        print(f"started llama-server (pid {pids[1]}, -np {args.slots}) and serve "
              f"(pid {pid}) at {url}", file=sys.stderr)
    try:
        rows = [asyncio.run(level(url, n, args.turns, args.level_timeout, pid))
                for n in levels]
    finally:
        if stack is not None:
            state, server, serve = stack
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(20)
            except subprocess.TimeoutExpired:
                serve.kill()
            server.stop()
            state.cleanup()
    print("| sessions | turns ok | errors | first audio p50 / p95 ms | queue wait p50 / max ms "
          "| cache reuse turns 2+ | slots | sockets before → after | tasks before → after "
          "| RSS MB before → after | wall s |")
    print("|---:|---:|---:|---:|---:|---:|---|---|---|---|---:|")
    for r in rows:
        b, a = r["before"], r["after"]
        print(f"| {r['sessions']} | {r['turns']} | {r['errors']} | {r['first_audio_p50']} / "
              f"{r['first_audio_p95']} | {r['queue_wait_p50']} / {r['queue_wait_max']} | "
              f"{r['cache_reuse_turn2plus']} | {r['slots_used']} | {b.get('sockets')} → "
              f"{a.get('sockets')} | {b.get('tasks')} → {a.get('tasks')} | "
              f"{b.get('rss_mb')} → {a.get('rss_mb')} | {r['wall_s']} |")
        for line in r["error_lines"][:3]:
            print(f"  error: {line}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["errors"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
