"""Prove a llama-server binary works on this machine before setup says "ready".

A binary that starts is not yet a binary that runs: ggml picks its matrix kernels at the
first multiplication, and a build compiled for another CPU (or AMX kernels that crash in the
worker threads) dies only then, with SIGILL. So the proof is one real completion on the
bundled model: start the binary on a free port with a throw-away state folder, ask for a few
tokens, check they came back, stop it. A few seconds.

A proof is remembered in a stamp file keyed by the binary (path, size, mtime), the model and
this machine's CPU flags, so a re-run of setup with nothing changed costs nothing, and a new
build or a move to another CPU is proven again.

``python -m services.server_check [--stamp FILE] [--force]`` prints one line and exits 0
(proven) or 1 (not: the line says what happened and what to do).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services import models
from services.errors import UserError
from services.llama_server import LlamaServer, ServerOptions
from services.server_exit import REBUILD_HINT, describe_exit

PROMPT = "Say hello in one short sentence."
MAX_TOKENS = 8
# Small context: the proof needs a few tokens, not the 4096-token KV cache of a real run.
PROOF_CTX = 512
REQUEST_TIMEOUT = 60.0

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Proof:
    binary: Path
    model: Path
    tokens: int
    text: str
    seconds: float

    def line(self) -> str:
        return (f"llama-server proven on this CPU: {self.binary} answered {self.tokens} "
                f"tokens ({self.text!r}) in {self.seconds:.1f} s")


def prove(binary: Path, model: Path, *, state_dir: Path | None = None,
          timeout: float = 120.0) -> Proof:
    """Start ``binary`` on ``model``, get one completion, stop it; UserError if it cannot.

    ``state_dir`` keeps the proof's server log for a user to read after a failure (the
    error names it); without one a temporary folder is used and removed."""
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if state_dir is None:
            state_dir = Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="voice-llm-proof-")))
        server = LlamaServer(state_dir)
        options = ServerOptions(server_bin=binary, model=model, port=free_port(),
                                ctx=PROOF_CTX, start_timeout=timeout)
        info = server.start(options, quiet=True)
        try:
            tokens, text = _one_completion(info.url, server)
        finally:
            server.stop(timeout=5.0)
    return Proof(binary, model, tokens, text, time.monotonic() - started)


def _one_completion(url: str, server: LlamaServer) -> tuple[int, str]:
    body = json.dumps({"messages": [{"role": "user", "content": PROMPT}],
                       "max_tokens": MAX_TOKENS, "temperature": 0.0,
                       "cache_prompt": False}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with _opener.open(request, timeout=REQUEST_TIMEOUT) as response:
            answer: Any = json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise UserError(f"llama-server started but answered a completion with HTTP {e.code}: "
                        f"{_short(e.read())}; {REBUILD_HINT}") from e
    except (OSError, ValueError) as e:
        # The usual way a wrong-CPU build fails: it dies at the first matrix multiplication,
        # so the connection drops. Say how it died, not how the socket looked.
        code = _exit_code_soon(server)
        if code is not None:
            raise UserError(f"{describe_exit(code, 'while answering a completion')}; "
                            f"last log lines: {server.log_tail()} [{server.log_path}]") from e
        raise UserError(f"llama-server did not answer a completion ({e}); {REBUILD_HINT}") from e
    return _tokens_and_text(answer)


def _exit_code_soon(server: LlamaServer, wait: float = 2.0) -> int | None:
    # The socket drops a moment before the dying process can be reaped.
    deadline = time.monotonic() + wait
    while (code := server.returncode()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return code


def _tokens_and_text(answer: Any) -> tuple[int, str]:
    try:
        text = str(answer["choices"][0]["message"]["content"] or "")
        tokens = int(answer.get("usage", {}).get("completion_tokens", 0))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise UserError(f"llama-server answered a completion with something that is not one: "
                        f"{_short(json.dumps(answer).encode())}; {REBUILD_HINT}") from e
    if tokens < 1 or not text.strip():
        raise UserError(f"llama-server answered a completion with no tokens; {REBUILD_HINT}")
    return tokens, text.strip()


def _short(body: bytes, limit: int = 160) -> str:
    text = " ".join(body.decode(errors="replace").split())
    return text if len(text) <= limit else text[:limit] + "…"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --- the stamp ----------------------------------------------------------------------------


def cpu_flags() -> str:
    """The CPU's feature flags (first "flags" line of /proc/cpuinfo), or "" where unknown."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return ""


def proof_key(binary: Path, model: Path) -> str:
    """What a proof depends on: the exact binary and model files and this CPU."""
    parts = []
    for path in (binary, model):
        st = path.stat()
        parts.append(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}")
    parts.append(cpu_flags())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def is_proven(stamp: Path, key: str) -> bool:
    try:
        return bool(json.loads(stamp.read_text()).get("key") == key)
    except (OSError, ValueError, AttributeError):
        return False


def write_stamp(stamp: Path, key: str, proof: Proof) -> None:
    stamp.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(stamp.name + ".tmp")
    tmp.write_text(json.dumps({"key": key, "binary": str(proof.binary),
                               "proven_at": time.time(), "seconds": proof.seconds}) + "\n")
    tmp.replace(stamp)


# --- command line -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.server_check",
        description="Start the llama-server voice-llm would use on the bundled model, get one "
        "real completion, stop it. Exit 0 when it works on this CPU, 1 (one line) when not.")
    parser.add_argument("--stamp", type=Path,
                        help="remember a proof here; skip the check while binary, model and CPU "
                        "are unchanged")
    parser.add_argument("--force", action="store_true", help="check even if the stamp matches")
    args = parser.parse_args(argv)
    try:
        binary = models.llama_server_binary()
        model = models.llm_model()
        key = proof_key(binary, model)
        if args.stamp and not args.force and is_proven(args.stamp, key):
            print(f"llama-server already proven on this CPU: {binary}")
            return 0
        # Beside the stamp, so the log of a failed proof is still there to read.
        proof = prove(binary, model, state_dir=args.stamp.with_suffix(".d") if args.stamp
                      else None)
    except UserError as e:
        print(f"setup: {e}", file=sys.stderr)
        return 1
    if args.stamp:
        write_stamp(args.stamp, key, proof)
    print(proof.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
