"""Shared fixtures.

``llama_server`` (session scope): the REAL llama-server with the bundled model (or
``$VOICE_LLM_MODEL``) on a free port, with its own temporary state folder and the seed's
flags (``-t 2 -np 1 -c 4096 --cache-ram 0``). Yields an object with ``url: str``,
``log_path: Path`` (the server log, e.g. to grep "cancel task") and ``pid: int``; stops the
server at the end of the session. Skips, with the reason, when the binary or model is not
installed (run scripts/setup).
"""

from __future__ import annotations

import atexit
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.server_check import free_port


@dataclass(frozen=True)
class RunningLlamaServer:
    url: str
    log_path: Path
    pid: int


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningLlamaServer]:
    from services import models
    from services.errors import UserError
    from services.llama_server import LlamaServer, ServerOptions

    try:
        models.llama_server_binary()
        models.llm_model()
    except UserError as e:
        pytest.skip(f"real llama-server not available: {e}")
    server = LlamaServer(tmp_path_factory.mktemp("llama-server-state"))
    for attempt in range(3):
        # Another test run on this shared machine may grab the port between the probe and
        # the server's bind; that shows up as "exited while loading", so try another port.
        options = ServerOptions(port=free_port(), threads=2, parallel=1, ctx=4096)
        try:
            info = server.start(options, quiet=True)
            break
        except UserError:
            if attempt == 2:
                raise
    try:
        yield RunningLlamaServer(url=info.url, log_path=server.log_path, pid=info.pid)
    finally:
        server.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Once pytest has reported and cleaned up, leave without finalizing the interpreter
    if the echo canceller's native runtime ran here (its threads can abort the
    finalization: ``pipeline.echo_cancel.leave_past_the_native_runtime``). Registered
    last, this runs first at exit."""
    from pipeline.echo_cancel import leave_past_the_native_runtime

    atexit.register(leave_past_the_native_runtime, int(exitstatus))
