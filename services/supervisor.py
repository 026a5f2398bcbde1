"""Supervision of the managed llama-server: when a turn fails because the server died, say
how in one plain line (the signal named, ``services.server_exit``), start it again the same
way, and count the restart, so the next turn works.

``Supervisor(llm_url, state_dir=None).check() -> str | None`` (blocking; ``await
supervisor.check_async()`` from a loop) is called after a turn failed on the LLM. It
returns None when the server at the URL still answers (the fault was elsewhere) or when it
is not the managed one (voice-llm does not restart servers it does not own; the turn's error
already says what is wrong); otherwise the line to print. A server this process started is
its child, so its return code names the signal; one started by another command (``voice-llm
up``) is only known to be gone.

``SharedCheck(supervisor, on_restart)`` is the same for ``serve``, where many conversations
share one server: one check at a time, and turns wait for a restart under way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from services import find_server
from services.errors import UserError
from services.llama_server import LlamaServer, ServerOptions
from services.server_exit import describe_exit
from services.server_http import health

log = logging.getLogger(__name__)


@dataclass
class Supervisor:
    llm_url: str
    state_dir: Path | None = None
    restarts: int = 0

    async def check_async(self) -> str | None:
        return await asyncio.to_thread(self.check)

    def check(self) -> str | None:
        url = self.llm_url.rstrip("/")
        if health(url, timeout=1.0) in ("ok", "loading"):
            return None
        mine = find_server.started_here(url)
        server = mine[0] if mine else LlamaServer(self.state_dir)
        if not find_server.is_local(url) or not _same_port(server.url, url):
            return None
        code = server.returncode()  # before running_pid(), which reaps the child silently
        pid = _recorded_pid(server)
        if server.running_pid() is not None:
            return None  # alive but not answering: not a death, do not start a second one
        how = (describe_exit(code, "while answering") if code is not None else
               f"llama-server{f' (pid {pid})' if pid else ''} is gone (another command "
               "started it, so how it ended is unknown; see its log)")
        options = mine[1] if mine else _options_from_state(server)
        started = time.monotonic()
        try:
            find_server.ensure_server(url, options=options, state_dir=server.state_dir,
                                      quiet=True)
        except UserError as e:
            log.info("llama-server restart failed: %s", e)
            return f"{how}; restarting it failed: {e}"
        self.restarts += 1
        new = find_server.started_here(url)
        new_pid = _recorded_pid(new[0]) if new else None
        # info, not warning: the caller prints the one line the user sees.
        log.info("llama-server at %s restarted (restart %d, pid %s): %s", url,
                    self.restarts, new_pid, how)
        return (f"{how}; restarted it in {time.monotonic() - started:.1f} s (pid {new_pid}, "
                f"restart {self.restarts}) — the next turn uses it; log {server.log_path}")


def _same_port(managed_url: str | None, url: str) -> bool:
    return managed_url is not None and urlsplit(managed_url).port == urlsplit(url).port


def _recorded_pid(server: LlamaServer) -> int | None:
    try:
        return int(server.pid_path.read_text().strip())
    except (OSError, ValueError):
        return None


def _options_from_state(server: LlamaServer) -> ServerOptions:
    """The options of a server another command started, read back from its recorded argv
    (model, binary, threads, slots, context, extra arguments, niceness), so it restarts as it
    ran."""
    import json

    try:
        state = json.loads(server.state_path.read_text())
    except (OSError, ValueError):
        return ServerOptions()
    argv = [str(a) for a in state.get("argv") or []]

    def value(flag: str, default: int) -> int:
        try:
            return int(argv[argv.index(flag) + 1])
        except (ValueError, IndexError):
            return default

    base = ServerOptions()
    extra = tuple(argv[15:]) if argv[13:15] == ["--cache-ram", "0"] else ()
    return replace(base, model=state.get("model"), server_bin=state.get("binary"),
                   threads=value("-t", base.threads), parallel=value("-np", base.parallel),
                   ctx=value("-c", base.ctx), extra_args=extra,
                   nice=int(state.get("nice", base.nice)))


class SharedCheck:
    """``serve``'s supervision: many conversations, one managed server, one check at a time.

    ``turn_failed()`` (from any session's failed turn) starts a check unless one is already
    running; ``await ready()`` before a turn waits for a running check, so the turns that
    come during a restart run on the new server instead of failing too. A restart is
    logged (warning) and reported to ``on_restart`` with the supervisor's line."""

    def __init__(self, supervisor: Supervisor,
                 on_restart: Callable[[str], None] | None = None) -> None:
        self.supervisor = supervisor
        self.on_restart = on_restart
        self.checks = 0
        self._task: asyncio.Task[None] | None = None

    def turn_failed(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._check(), name="llm-supervisor-check")

    async def ready(self) -> None:
        if self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _check(self) -> None:
        self.checks += 1
        before = self.supervisor.restarts
        try:
            line = await self.supervisor.check_async()
        except Exception:  # a bug here must never take a session down
            log.exception("llama-server check failed")
            return
        if line is None:
            return
        log.warning("%s", line)
        if self.supervisor.restarts > before and self.on_restart is not None:
            self.on_restart(line)
