"""Which ASR and TTS engines a command uses: in-process (the default) or a Wyoming server.

``--asr ENGINE`` / ``--tts ENGINE`` take ``local`` (Whisper / Piper loaded in this process)
or ``wyoming://HOST:PORT`` (a Wyoming speech server: ``wyoming-faster-whisper``,
``wyoming-piper``, or anything else that speaks the protocol). ``parse_engine`` is the one
reading of those strings.

``python -m services.engines`` starts the two reference servers on loopback with the
bundled models (nothing downloaded), for trying the options out, the tests and
``scripts/bench_engines.py``; docs/deploy.md says how to run them on other machines.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from services.errors import UserError

LOCAL = "local"
SCHEME = "wyoming"
ASR_ENV, TTS_ENV = "VOICE_LLM_ASR", "VOICE_LLM_TTS"


@dataclass(frozen=True)
class Engine:
    """``local``, or a Wyoming server at ``host:port``."""

    host: str = ""
    port: int = 0

    @property
    def local(self) -> bool:
        return not self.host

    def __str__(self) -> str:
        return LOCAL if self.local else f"{SCHEME}://{self.host}:{self.port}"


def parse_engine(value: str, option: str = "--asr") -> Engine:
    """``local`` or ``wyoming://HOST:PORT``; a UserError naming ``option`` otherwise."""
    text = value.strip()
    if text in ("", LOCAL):
        return Engine()
    how = f"{option}: {value!r} is not an engine; use 'local' or 'wyoming://HOST:PORT'"
    try:
        url = urlsplit(text)
        port = url.port
    except ValueError as e:
        raise UserError(f"{how} ({e})") from e
    if url.scheme != SCHEME or not url.hostname or port is None:
        raise UserError(how)
    if url.path not in ("", "/") or url.query or url.fragment:
        raise UserError(f"{how} (nothing may follow the port)")
    return Engine(url.hostname, port)


def add_engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--asr", default=os.environ.get(ASR_ENV, LOCAL), metavar="ENGINE",
                   help="speech recognition: 'local' (Whisper base in this process) or "
                   "wyoming://HOST:PORT (a Wyoming ASR server, e.g. wyoming-faster-whisper; "
                   f"docs/deploy.md) (default %(default)s, env {ASR_ENV})")
    p.add_argument("--tts", default=os.environ.get(TTS_ENV, LOCAL), metavar="ENGINE",
                   help="speech synthesis: 'local' (Piper in this process) or "
                   "wyoming://HOST:PORT (a Wyoming TTS server, e.g. wyoming-piper) "
                   f"(default %(default)s, env {TTS_ENV})")


# --- the reference servers on the bundled models --------------------------------------


def asr_server_command(port: int, *, host: str = "127.0.0.1", threads: int = 2,
                       language: str = "en", data_dir: Path | None = None) -> list[str]:
    """``wyoming-faster-whisper`` on the bundled Whisper base (int8, beam 1, like ours).

    ``--model`` takes a folder: faster-whisper loads a CTranslate2 folder as it is. The
    library is named so the folder always goes to faster-whisper (``auto`` picks other
    backends for some languages when their packages are installed);
    ``--local-files-only`` makes a wrong path an error instead of a download."""
    from services import models

    return [_tool("wyoming-faster-whisper"), "--uri", f"tcp://{host}:{port}",
            "--model", str(models.whisper_model_dir()), "--stt-library", "faster-whisper",
            "--data-dir", str(data_dir or tempfile.gettempdir()), "--local-files-only",
            "--language", language, "--beam-size", "1", "--compute-type", "int8",
            "--cpu-threads", str(threads)]


def tts_server_command(port: int, *, host: str = "127.0.0.1",
                       data_dir: Path | None = None) -> list[str]:
    """``wyoming-piper`` on the bundled en_US-joe-medium voice.

    The voice is given as a path to its .onnx (with the .onnx.json beside it): a voice name
    from the server's catalog would be checked against the catalog's file list and
    downloaded when something is missing; a path is only opened."""
    from services import models

    onnx, _config = models.piper_voice()
    return [_tool("wyoming-piper"), "--uri", f"tcp://{host}:{port}", "--voice", str(onnx),
            "--data-dir", str(data_dir or tempfile.gettempdir())]


def _tool(name: str) -> str:
    """The server's console script beside this interpreter (the venv), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


def wait_ready(host: str, port: int, proc: subprocess.Popen[bytes], timeout: float,
               what: str) -> None:
    """Until the server answers a Wyoming ``describe``; UserError if it dies or is slow."""
    from pipeline.wyoming_wire import WyomingError, describe

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UserError(f"{what} exited with code {proc.returncode} while starting")
        try:
            describe(host, port, 2.0, f"wyoming://{host}:{port}")
            return
        except WyomingError:
            pass
        time.sleep(0.2)
    raise UserError(f"{what} did not answer on {host}:{port} within {timeout:.0f} s")


@contextlib.contextmanager
def speech_servers(asr_port: int | None, tts_port: int | None, *, host: str = "127.0.0.1",
                   log_dir: Path | None = None, timeout: float = 120.0,
                   asr_threads: int = 2) -> Iterator[dict[str, Engine]]:
    """Start the reference servers (either may be None: not started), wait until they
    answer, yield their engines by stage (``asr``, ``tts``), stop them (by pid) after."""
    procs: list[subprocess.Popen[bytes]] = []
    engines: dict[str, Engine] = {}
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="voice-llm-wyoming-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        for stage, port in (("asr", asr_port), ("tts", tts_port)):
            if port is None:
                continue
            cmd = (asr_server_command(port, host=host, threads=asr_threads, data_dir=log_dir)
                   if stage == "asr" else tts_server_command(port, host=host,
                                                             data_dir=log_dir))
            log = (log_dir / f"{stage}-server.log").open("wb")
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL))
            log.close()
            engines[stage] = Engine(host, port)
        for proc, (stage, engine) in zip(procs, engines.items(), strict=True):
            wait_ready(engine.host, engine.port, proc, timeout,
                       f"the Wyoming {stage} server (log: {log_dir / f'{stage}-server.log'})")
        yield engines
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m services.engines",
        description="Run wyoming-faster-whisper and wyoming-piper on the bundled models "
        "until Ctrl-C; then use --asr/--tts wyoming://HOST:PORT with voice-llm.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on "
                   "(default %(default)s; 0.0.0.0 for other machines)")
    p.add_argument("--asr-port", type=int, default=10300, help="0 = no ASR server "
                   "(default %(default)s)")
    p.add_argument("--tts-port", type=int, default=10200, help="0 = no TTS server "
                   "(default %(default)s)")
    p.add_argument("--asr-threads", type=int, default=2, help="Whisper's CPU threads "
                   "(default %(default)s)")
    args = p.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C: the servers are stopped, not orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with speech_servers(args.asr_port or None, args.tts_port or None, host=args.host,
                            asr_threads=args.asr_threads) as engines:
            for stage, engine in engines.items():
                print(f"--{stage} {engine}", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except UserError as e:
        print(f"python -m services.engines: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
