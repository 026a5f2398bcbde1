"""``voice-llm lab``: the LLM latency experiments (docs/lab.md), measured on this machine.

``voice-llm lab EXPERIMENT [--out DIR]`` runs one experiment (or ``all``), prints its table,
and writes ``DIR/lab.json``, ``DIR/report.md`` and the PNGs. A single experiment updates its
own section of an existing lab.json; ``all`` writes a fresh one.

Only light imports at module level: ``voice-llm --help`` imports every subcommand module.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from services.errors import UserError

EXPERIMENTS = ("ttft", "prefill", "cache", "first-sentence", "barge-in")
DEFAULT_OUT = Path("out/lab")


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("experiment", choices=(*EXPERIMENTS, "all"),
                        help="which experiment to run ('all' runs them in this order)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="folder for lab.json, report.md and the PNGs (default %(default)s)")
    parser.add_argument("--runs", type=int, default=None, metavar="N",
                        help="runs per measurement point (default: ttft 5, prefill and "
                        "first-sentence 3)")
    parser.add_argument("--at", type=float, default=0.5, metavar="SEC",
                        help="barge-in: seconds after the request to hang up / stop reading "
                        "(default %(default)s)")
    parser.add_argument("--hold-tokens", type=int, default=512, metavar="N",
                        help="barge-in: max_tokens of the long reply (default %(default)s)")
    parser.add_argument("--seed", type=int, default=42, help="sampling seed (default 42)")
    parser.add_argument("--docs", type=Path, default=None, metavar="DIR",
                        help="reference documents (*.txt) for prefill/cache "
                        "(default samples/docs)")
    parser.add_argument("--server-log", type=Path, default=None, metavar="FILE",
                        help="log of a llama-server the lab did not start, so barge-in can "
                        "confirm the cancel; without it only the managed server's log is read")


def run(args: argparse.Namespace) -> int:
    import asyncio

    _validate(args)
    return asyncio.run(_run(args))


def _validate(args: argparse.Namespace) -> None:
    if args.runs is not None and args.runs < 1:
        raise UserError(f"--runs must be at least 1, not {args.runs}")
    if args.at <= 0:
        raise UserError(f"--at must be a positive number of seconds, not {args.at}")
    if args.hold_tokens < 8:
        raise UserError(f"--hold-tokens must be at least 8, not {args.hold_tokens}")
    if args.server_log is not None and not args.server_log.is_file():
        raise UserError(f"--server-log {args.server_log}: no such file")


async def _run(args: argparse.Namespace) -> int:
    import asyncio
    from datetime import datetime

    from pipeline.llm_client import LlmClient, LlmError
    from services.lab import report, tables
    from services.lab.context import DOCS_DIR, Lab, load_docs
    from services.lab.progress import RichTracker, table_console
    from services.turn_options import Stopper

    console = table_console()
    docs = load_docs(args.docs or DOCS_DIR)
    if not docs:
        raise UserError(f"no reference documents (*.txt) in {args.docs or DOCS_DIR}")
    server = await _find_or_start(args.llm_url, args.server_log, console)
    selected = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
    # The box is shared: record how busy it was, because that moves every number here.
    machine = {"cpus": os.cpu_count(), "load_before": _load()}
    out_path = args.out / "lab.json"
    result: dict[str, Any] = {} if args.experiment == "all" else report.load(out_path)
    stopper = Stopper().install()  # no turn runner: a signal cancels the experiment
    done: list[str] = []
    idle = ""
    async with LlmClient(server.url, read_timeout=120.0) as client:
        try:
            server.props = await client.get_json("/props")
            with RichTracker() as tracker:
                lab = Lab(client, server, docs, seed=args.seed, tracker=tracker)
                for name in selected:
                    key = name.replace("-", "_")
                    result[key] = await _experiment(lab, key, args)
                    done.append(name)
                    tracker.console.print(tables.to_rich(tables.BUILDERS[key](result[key])))
        except asyncio.CancelledError:
            stopper.absorb()
            # The cancelled experiment's streams closed on the way out (async with);
            # as after a barge-in, make sure the server really stopped.
            idle = await _slot_idle(client)
        except LlmError as e:
            raise UserError(f"llama-server at {server.url} failed during the lab: {e}") from e
        except TimeoutError as e:
            where = server.log_path or "the server log"
            raise UserError(f"{e} (is the machine overloaded? see {where})") from e
        finally:
            stopper.remove()
    result["server"] = server.summary()
    result["machine"] = {**machine, "load_after": _load()}
    result["measured_at"] = datetime.now().isoformat(timespec="seconds")
    written = report.write(args.out, result)
    if stopper.signal is not None:
        print(f"voice-llm lab: stopped by {stopper.signal.name} after "
              f"{', '.join(done) or 'no experiment'} ({idle}); saved "
              + ", ".join(str(p) for p in written), file=sys.stderr)
        return stopper.exit_code
    summary = tables.checks(result)
    if summary.rows:
        console.print(tables.to_rich(summary))
    console.print("wrote " + ", ".join(str(p) for p in written))
    return 0


async def _experiment(lab: Any, key: str, args: argparse.Namespace) -> dict[str, Any]:
    from services.lab import barge_in, cache, first_sentence, prefill, ttft

    runs = {} if args.runs is None else {"runs": args.runs}
    if key == "ttft":
        return await ttft.run(lab, **runs)
    if key == "prefill":
        return await prefill.run(lab, **runs)
    if key == "cache":
        return await cache.run(lab)
    if key == "first_sentence":
        return await first_sentence.run(lab, **runs)
    return await barge_in.run(lab, at=args.at, max_tokens=args.hold_tokens)


async def _find_or_start(url: str, server_log: Path | None, console: Any) -> Any:
    """The server under test, started (managed, detached) if nothing answers at ``url``."""
    from services import find_server
    from services.lab.context import ServerUnderTest

    url = url.rstrip("/")
    was_running = await _answers(url)
    await find_server.ensure_server_async(url)
    log_path = server_log or find_server.server_log_path(url)
    if not was_running:
        console.print(f"started the managed llama-server at {url}; it keeps running "
                      "(stop it with 'voice-llm down')")
    return ServerUnderTest(url=url, log_path=log_path, started_by_lab=not was_running)


async def _slot_idle(client: Any, within: float = 15.0) -> str:
    """Poll /slots until no slot is processing; says how that went, for the stop line.
    Generous: a hung-up prefill of a long lab prompt runs to its end (seconds) before the
    server can notice the closed connection."""
    import asyncio
    import time

    from pipeline.llm_client import LlmError

    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            slots = await client.get_json("/slots")
            if not any(s.get("is_processing") for s in slots):
                return "slot confirmed idle"
            await asyncio.sleep(0.01)
    except LlmError as e:
        return f"slot idle not confirmed: {e}"
    return f"slot still busy after {within:g} s"


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


async def _answers(url: str) -> bool:
    import asyncio

    from services import server_http

    return await asyncio.to_thread(server_http.health, url) is not None
