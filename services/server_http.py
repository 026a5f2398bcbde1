"""Asking a llama-server about itself over HTTP: ``/health``, ``/props``, ``/slots``.

Synchronous on purpose (urllib, no event loop): ``up``, ``status``, setup's proof and the
find-or-start policy run before any loop exists. Proxies are disabled: a probe of 127.0.0.1
must never go through an ``http_proxy``.

- ``get_json(url) -> (status, body) | None`` (None: nothing answers);
  ``health(url) -> "ok" | "loading" | "HTTP nnn" | None``.
- ``ServerProps.parse(body)``: the one reading of ``/props`` (its field names moved between
  llama.cpp releases), used by ``up``/``status`` and by the lab's report.
- ``probe(url) -> ServerStatus`` (health, model, n_ctx, slots); ``port_in_use(host, port)``.
"""

from __future__ import annotations

import errno
import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.errors import UserError

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get_json(url: str, timeout: float = 2.0) -> tuple[int, Any] | None:
    """(status, parsed body) of a GET, or None when nothing answers."""
    try:
        with _opener.open(url, timeout=timeout) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    except (OSError, ValueError):  # refused, reset, timeout, bad URL
        return None
    try:
        return status, json.loads(body or b"null")
    except ValueError:
        return status, body.decode(errors="replace")


def health(url: str, timeout: float = 2.0) -> str | None:
    """"ok" (200), "loading" (503), another "HTTP nnn", or None when nothing answers."""
    answer = get_json(f"{url.rstrip('/')}/health", timeout)
    if answer is None:
        return None
    return {200: "ok", 503: "loading"}.get(answer[0], f"HTTP {answer[0]}")


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # SO_REUSEADDR: a TIME_WAIT socket left by the previous server does not count
        # as "in use" (llama-server itself binds with it too).
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return True
            raise UserError(f"cannot bind {host}:{port}: {e.strerror}") from e
    return False


@dataclass(frozen=True)
class ServerProps:
    """What ``/props`` says, tolerant of missing keys across llama.cpp versions."""

    model: str | None = None  # the file name: model_alias defaults to the -m path
    model_path: str | None = None
    n_ctx: int | None = None
    total_slots: int | None = None
    build: str | None = None

    @classmethod
    def parse(cls, props: Any) -> ServerProps:
        if not isinstance(props, dict):
            return cls()
        settings = props.get("default_generation_settings") or {}
        n_ctx = settings.get("n_ctx", props.get("n_ctx"))
        slots = props.get("total_slots")
        model_path = str(props.get("model_path") or "")
        model = Path(str(props.get("model_alias") or model_path)).name
        build = props.get("build_info")
        return cls(model=model or None, model_path=model_path or None,
                   n_ctx=n_ctx if isinstance(n_ctx, int) else None,
                   total_slots=slots if isinstance(slots, int) else None,
                   build=str(build) if build is not None else None)

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "model_path": self.model_path, "n_ctx": self.n_ctx,
                "total_slots": self.total_slots, "build": self.build}


def fetch_props(url: str) -> ServerProps:
    answer = get_json(f"{url.rstrip('/')}/props")
    return ServerProps.parse(answer[1] if answer else None)


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    managed: bool
    url: str | None = None
    pid: int | None = None
    health: str | None = None  # "ok", "loading", or None when nothing answers
    model: str | None = None
    n_ctx: int | None = None
    slots: list[dict[str, Any]] = field(default_factory=list)


def probe(url: str, pid: int | None = None) -> ServerStatus:
    """What the server at ``url`` says about itself (health, model, slots)."""
    state = health(url)
    if state is None:
        return ServerStatus(running=pid is not None, managed=pid is not None, url=url, pid=pid)
    props = fetch_props(url)
    answer = get_json(f"{url}/slots")
    slots = answer[1] if answer and answer[0] == 200 and isinstance(answer[1], list) else []
    return ServerStatus(running=True, managed=pid is not None, url=url, pid=pid, health=state,
                        model=props.model, n_ctx=props.n_ctx,
                        slots=[s for s in slots if isinstance(s, dict)])


def wait_while_loading(url: str, timeout: float) -> str | None:
    """``health(url)`` once it is no longer "loading" (or ``timeout`` passed).

    A server still loading its model (503) will be ready soon: wait, don't start a second.
    """
    deadline = time.monotonic() + timeout
    state = health(url)
    while state == "loading" and time.monotonic() < deadline:
        time.sleep(0.2)
        state = health(url)
    return state
