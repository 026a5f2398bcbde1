"""Find a running llama-server or start the managed one: what every command does first.

- ``ensure_server(llm_url, *, start_if_missing=True, options=None, state_dir=None,
  quiet=False, **option_fields) -> str``: returns ``llm_url`` once a server answers
  ``/health`` there (an OpenAI-compatible server without it: ``/v1/models``); when
  nothing answers and the URL is local (127.0.0.1/localhost), starts
  the managed server on that port (``option_fields`` are ``ServerOptions`` fields, e.g.
  ``model=...``). Blocking; ``await ensure_server_async(...)`` runs it in a thread.
- ``server_log_path(llm_url, state_dir=None) -> Path | None``: the log of the managed server
  behind ``llm_url`` (the lab greps it for "cancel task"), or None when that server is not
  ours and its log cannot be read.
- ``managed_server(options, state_dir)``: a ``with`` block that starts and stops one.
- ``started_here(llm_url)``: the ``(LlamaServer, ServerOptions)`` this process started
  there, for ``services.supervisor`` (how it died, restart it the same way).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from services.errors import UserError
from services.llama_server import DEFAULT_HOST, DEFAULT_URL, LlamaServer, ServerInfo, ServerOptions
from services.server_http import get_json, wait_while_loading

log = logging.getLogger(__name__)

LOCAL_HOSTS = ("127.0.0.1", "localhost")

# Servers this process started, by URL, with the options they were started with: the
# supervisor reads how one died (Popen's return code) and restarts it the same way.
_started: dict[str, tuple[LlamaServer, ServerOptions]] = {}


def started_here(llm_url: str) -> tuple[LlamaServer, ServerOptions] | None:
    """The managed server this process started at ``llm_url``, and its options."""
    return _started.get(llm_url.rstrip("/"))


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "") in LOCAL_HOSTS


def ensure_server(llm_url: str = DEFAULT_URL, *, start_if_missing: bool = True,
                  options: ServerOptions | None = None, state_dir: Path | None = None,
                  quiet: bool = False, **option_fields: Any) -> str:
    """A URL where llama-server answers /health 200: the given one, starting ours if needed."""
    llm_url = llm_url.rstrip("/")
    state = wait_while_loading(llm_url, timeout=(options or ServerOptions()).start_timeout)
    if state == "ok":
        return llm_url
    if state is not None and _openai_models(llm_url):
        return llm_url  # an OpenAI-compatible server without /health (docs/llm-servers.md)
    if state is not None:
        raise UserError(f"the LLM server at {llm_url} answers /health with {state}")
    if not start_if_missing:
        raise UserError(f"no llama-server answers at {llm_url}: run 'voice-llm up' "
                        "or pass --llm-url")
    if not is_local(llm_url):
        raise UserError(f"no llama-server answers at {llm_url} (not local, so voice-llm "
                        "cannot start one there)")
    unknown = set(option_fields) - {f.name for f in fields(ServerOptions)}
    if unknown:
        raise TypeError(f"unknown server options: {sorted(unknown)}")
    parts = urlsplit(llm_url)
    # The URL decides where it listens; everything else comes from the caller.
    option_fields.update(port=parts.port or 80, host=DEFAULT_HOST)
    options = replace(options or ServerOptions(), **option_fields)
    server = LlamaServer(state_dir)
    info = server.start(options, quiet=quiet)
    if not info.already_running:  # our child: its exit status (the signal) is ours to read
        _started[llm_url] = (server, options)
    if info.already_running and info.url.rstrip("/") != llm_url:
        raise UserError(f"the managed llama-server runs at {info.url}, not {llm_url}: "
                        f"use --llm-url {info.url} or 'voice-llm down' first")
    log.info("llama-server ready at %s (pid %d)", info.url, info.pid)
    return llm_url


def _openai_models(llm_url: str) -> bool:
    """The server lists models at /v1/models: OpenAI-compatible, even without /health."""
    answer = get_json(f"{llm_url}/v1/models")
    return answer is not None and answer[0] == 200 and isinstance(answer[1], dict)


async def ensure_server_async(llm_url: str = DEFAULT_URL, **kwargs: Any) -> str:
    """``ensure_server`` for async callers: the waiting happens in a worker thread."""
    return await asyncio.to_thread(ensure_server, llm_url, **kwargs)


def server_log_path(llm_url: str, state_dir: Path | None = None) -> Path | None:
    """Log of the managed server answering at ``llm_url``; None if that server is not ours."""
    server = LlamaServer(state_dir)
    if server.running_pid() is None or server.url is None:
        return None
    ours, asked = urlsplit(server.url), urlsplit(llm_url)
    same_port = ours.port == asked.port
    if same_port and is_local(llm_url) and server.log_path.is_file():
        return server.log_path
    return None


@contextlib.contextmanager
def managed_server(options: ServerOptions | None = None, state_dir: Path | None = None,
                   *, quiet: bool = True) -> Iterator[ServerInfo]:
    """Start a server for the duration of a ``with`` block (tests, one-off scripts)."""
    server = LlamaServer(state_dir)
    info = server.start(options, quiet=quiet)
    try:
        yield info
    finally:
        if not info.already_running:
            server.stop()
