"""``voice-llm up | down | status`` and ``ensure_server``: error paths and lifecycle.

Most tests use a fake "llama-server" (a small Python HTTP server honouring --port, /health,
/props, /slots) so the lifecycle is exercised in well under a second; the last test runs
the real binary.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services import cli, models
from services.errors import UserError
from services.find_server import ensure_server, server_log_path
from services.llama_server import LlamaServer
from services.server_check import free_port

FAKE_SERVER = textwrap.dedent('''\
    #!{python}
    """A stand-in for llama-server: 503 while "loading", then 200."""
    import http.server, json, os, signal, sys, time
    argv = sys.argv[1:]
    with open(os.environ["FAKE_ARGV_FILE"], "w") as f:
        json.dump(argv, f)
    if os.environ.get("FAKE_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    port = int(argv[argv.index("--port") + 1])
    model = argv[argv.index("-m") + 1]
    ready_at = time.monotonic() + 0.3
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if time.monotonic() < ready_at:
                code, body = 503, {{"error": {{"message": "Loading model"}}}}
            elif self.path == "/health":
                code, body = 200, {{"status": "ok"}}
            elif self.path == "/props":
                code, body = 200, {{"model_path": model, "build_info": "b1-fake",
                                    "default_generation_settings": {{"n_ctx": 4096}}}}
            elif self.path == "/slots":
                code, body = 200, [{{"id": 0, "id_task": -1, "is_processing": False}}]
            else:
                code, body = 404, {{}}
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_POST(self):
            # FAKE_COMPLETION: "ok" answers a completion, "sigill" dies like a build for
            # another CPU does at its first matrix multiplication; unset: 501 (no such route).
            mode = os.environ.get("FAKE_COMPLETION")
            if mode == "sigill":
                os.kill(os.getpid(), signal.SIGILL)
            if mode != "ok":
                self.send_error(501)
                return
            data = json.dumps({{"choices": [{{"message": {{"content": "Hello there."}}}}],
                               "usage": {{"completion_tokens": 3}}}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def log_message(self, *args):
            pass
    print("fake llama-server listening", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
''')

# Dies the way a llama-server built for another CPU dies (SIGILL at the first matmul).
SIGILL_SERVER = textwrap.dedent("""\
    #!/bin/sh
    echo "llama threadpool init, n_threads = 2"
    kill -ILL $$
""")

FAILING_SERVER = textwrap.dedent("""\
    #!/bin/sh
    for i in 1 2 3 4 5 6 7; do echo "load line $i"; done
    echo "error: failed to load model" >&2
    exit 1
""")


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state_dir = tmp_path / "state"
    monkeypatch.setenv("VOICE_LLM_STATE", str(state_dir))
    monkeypatch.delenv("VOICE_LLM_URL", raising=False)
    monkeypatch.delenv("VOICE_LLM_MODEL", raising=False)
    monkeypatch.setenv("FAKE_ARGV_FILE", str(tmp_path / "argv.json"))
    # Only the server commands: the other subcommand modules are not this test's business.
    monkeypatch.setattr(cli, "COMMANDS", {k: v for k, v in cli.COMMANDS.items()
                                          if v[0] == "services.server_cmd"})
    return state_dir


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF")
    return path


def make_executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def fake_bin(tmp_path: Path, state: Path) -> Iterator[Path]:
    script = FAKE_SERVER.format(python=sys.executable)
    path = make_executable(tmp_path / "fake-llama-server", script)
    yield path
    LlamaServer(state).stop(timeout=2)  # never leave a fake server behind


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    def _run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err
    return _run


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code != 0
    assert err.count("\n") == 1, err
    for needle in needles:
        assert needle in err


# --- error paths --------------------------------------------------------------------------


def test_binary_missing_says_how_to_get_it(run: Run, state: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLAMA_SERVER_BIN", raising=False)
    monkeypatch.setattr(models, "bundled_server_binary", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = run("up", "--port", str(free_port()))
    assert_one_line_error(code, err, "llama-server not found", "scripts/setup", "--server-bin")


def test_explicit_binary_missing(run: Run, state: Path) -> None:
    code, _, err = run("up", "--server-bin", "/nonexistent/llama-server")
    assert_one_line_error(code, err, "--server-bin", "/nonexistent/llama-server")


def test_env_binary_not_executable(run: Run, state: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "llama-server"
    plain.write_text("")
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(plain))
    code, _, err = run("up")
    assert_one_line_error(code, err, "LLAMA_SERVER_BIN", "not executable")


def test_model_missing(run: Run, fake_bin: Path) -> None:
    code, _, err = run("up", "--server-bin", str(fake_bin), "--model", "/nonexistent.gguf")
    assert_one_line_error(code, err, "model file not found", "/nonexistent.gguf")


def test_port_busy(run: Run, fake_bin: Path, model_file: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run("up", "--server-bin", str(fake_bin), "--model", str(model_file),
                           "--port", str(port))
    assert_one_line_error(code, err, f"port {port} is already in use")


def test_server_exiting_during_start_shows_last_log_lines(run: Run, state: Path,
                                                          tmp_path: Path,
                                                          model_file: Path) -> None:
    failing = make_executable(tmp_path / "llama-server", FAILING_SERVER)
    code, _, err = run("up", "--server-bin", str(failing), "--model", str(model_file),
                       "--port", str(free_port()))
    assert_one_line_error(code, err, "exited while loading", "code 1",
                          "error: failed to load model", "load line 7", "load line 4")
    assert "load line 3" not in err  # only the tail
    assert not (state / "llama-server.pid").exists()


def test_death_by_signal_is_named_with_what_to_do(run: Run, state: Path, tmp_path: Path,
                                                   model_file: Path) -> None:
    crashing = make_executable(tmp_path / "llama-server", SIGILL_SERVER)
    code, _, err = run("up", "--server-bin", str(crashing), "--model", str(model_file),
                       "--port", str(free_port()))
    assert_one_line_error(code, err, "died with SIGILL (illegal instruction) while loading",
                          "CPU instructions this machine cannot run",
                          "scripts/setup --rebuild-server", "threadpool init")
    assert "code -4" not in err
    assert not (state / "llama-server.pid").exists()


@pytest.mark.parametrize(("code", "needles"), [
    (-signal.SIGILL, ("SIGILL (illegal instruction)", "--rebuild-server")),
    (128 + signal.SIGILL, ("SIGILL (illegal instruction)",)),  # through a shell wrapper
    (-signal.SIGKILL, ("SIGKILL", "out of memory")),
    (-signal.SIGSEGV, ("SIGSEGV (segmentation fault)", "--rebuild-server")),
    (-signal.SIGTERM, ("died with SIGTERM while loading",)),
    (1, ("exited while loading (code 1)",)),
])
def test_describe_exit_words(code: int, needles: tuple[str, ...]) -> None:
    from services.server_exit import describe_exit

    line = describe_exit(code, "while loading")
    assert "\n" not in line
    for needle in needles:
        assert needle in line


# --- setup's proof: one real completion before "ready" -------------------------------------


def test_proof_rejects_a_binary_that_cannot_answer_a_completion(fake_bin: Path,
                                                                 model_file: Path) -> None:
    from services.server_check import prove

    with pytest.raises(UserError, match="answered a completion with HTTP 501"):
        prove(fake_bin, model_file, timeout=10)


def test_proof_names_a_death_during_the_completion(fake_bin: Path, model_file: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from services.server_check import prove

    monkeypatch.setenv("FAKE_COMPLETION", "sigill")
    with pytest.raises(UserError, match=r"died with SIGILL \(illegal instruction\) while "
                       "answering a completion"):
        prove(fake_bin, model_file, timeout=10)


def test_proof_is_remembered_until_the_binary_changes(fake_bin: Path, model_file: Path,
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from services import server_check

    monkeypatch.setenv("FAKE_COMPLETION", "ok")
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(fake_bin))
    monkeypatch.setenv("VOICE_LLM_MODEL", str(model_file))
    argv_file = tmp_path / "argv.json"
    stamp = tmp_path / "proof.json"

    assert server_check.main(["--stamp", str(stamp)]) == 0
    assert "proven on this CPU" in capsys.readouterr().out
    assert argv_file.exists() and stamp.exists()  # the binary really ran

    argv_file.unlink()
    assert server_check.main(["--stamp", str(stamp)]) == 0
    assert "already proven" in capsys.readouterr().out
    assert not argv_file.exists()  # nothing was started the second time

    os.utime(fake_bin, ns=(time.time_ns(), time.time_ns() + 10**9))  # "a new build"
    monkeypatch.setenv("FAKE_COMPLETION", "sigill")
    assert server_check.main(["--stamp", str(stamp)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "SIGILL" in err


def test_setup_refuses_a_server_bin_that_fails_its_proof(fake_bin: Path, model_file: Path,
                                                         tmp_path: Path) -> None:
    """scripts/setup itself: a LLAMA_SERVER_BIN that cannot answer stops it before "ready"."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    if not (root / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv: run scripts/setup first")
    env = {**os.environ, "LLAMA_SERVER_BIN": str(fake_bin), "VOICE_LLM_MODEL": str(model_file)}
    env.pop("FAKE_COMPLETION", None)
    done = subprocess.run(["bash", str(root / "scripts" / "setup")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "answered a completion with HTTP 501" in done.stderr
    assert "LLAMA_SERVER_BIN" in done.stderr and "fix or unset it" in done.stderr
    assert "ready:" not in done.stdout


def test_start_timeout_kills_the_server(state: Path, fake_bin: Path, model_file: Path) -> None:
    from services.llama_server import ServerOptions

    server = LlamaServer(state)
    options = ServerOptions(server_bin=fake_bin, model=model_file, port=free_port(),
                            start_timeout=0.1)  # the fake answers 503 for 0.3 s
    with pytest.raises(UserError, match="not ready after"):
        server.start(options, quiet=True)
    assert server.running_pid() is None


def test_down_when_nothing_runs(run: Run, state: Path) -> None:
    code, out, _ = run("down", "--llm-url", f"http://127.0.0.1:{free_port()}")
    assert code == 0
    assert "nothing is running" in out


def test_status_when_nothing_runs(run: Run, state: Path) -> None:
    code, out, _ = run("status", "--llm-url", f"http://127.0.0.1:{free_port()}")
    assert code == 3
    assert "nothing is running" in out


def test_stale_pid_file_is_ignored_and_removed(run: Run, state: Path) -> None:
    state.mkdir()
    (state / "llama-server.pid").write_text("999999999\n")
    code, out, _ = run("status", "--llm-url", f"http://127.0.0.1:{free_port()}")
    assert code == 3
    assert not (state / "llama-server.pid").exists()


# --- lifecycle with the fake server -------------------------------------------------------


def test_up_twice_status_down(run: Run, state: Path, fake_bin: Path, model_file: Path,
                              tmp_path: Path) -> None:
    port = free_port()
    base = ("--server-bin", str(fake_bin), "--model", str(model_file), "--port", str(port))
    code, out, _ = run("up", *base, "--", "--metrics")
    assert code == 0, out
    assert f"ready at http://127.0.0.1:{port}" in out
    assert "b1-fake" in out
    argv = json.loads((tmp_path / "argv.json").read_text())
    for flag in (["-t", "2"], ["-np", "1"], ["-c", "4096"], ["--cache-ram", "0"], ["--metrics"]):
        assert " ".join(flag) in " ".join(argv)
    for name in ("health.json", "props.json", "server.json", "llama-server.log"):
        assert (state / name).is_file()
    assert json.loads((state / "health.json").read_text()) == {"status": "ok"}
    pid = int((state / "llama-server.pid").read_text())
    # The voice stages come first on the shared cores (ServerOptions.nice).
    assert os.getpriority(os.PRIO_PROCESS, pid) == 19
    autogroup = Path(f"/proc/{pid}/autogroup")
    if autogroup.exists():  # its own session's scheduling group is niced too
        assert autogroup.read_text().split()[-1] == "19"
    assert json.loads((state / "server.json").read_text())["nice"] == 19

    code, out, _ = run("up", *base)
    assert code == 0
    assert "already running" in out and str(pid) in out

    code, out, _ = run("status")
    assert code == 0
    assert "ok (managed" in out and "slot 0: idle" in out

    code, out, _ = run("down")
    assert code == 0 and f"stopped (pid {pid})" in out
    assert not (state / "llama-server.pid").exists()
    # `up` ran in this process, so the server was our child: an exited child stays a zombie
    # until reaped, and kill(0) would still find it. Reap, then it must be gone.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_down_kills_a_server_that_ignores_sigterm(run: Run, state: Path, fake_bin: Path,
                                                  model_file: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_IGNORE_TERM", "1")
    code, _, _ = run("up", "--server-bin", str(fake_bin), "--model", str(model_file),
                     "--port", str(free_port()))
    assert code == 0
    pid = int((state / "llama-server.pid").read_text())
    started = time.monotonic()
    code, out, _ = run("down", "--timeout", "0.3")
    assert code == 0 and "stopped" in out
    assert time.monotonic() - started < 5
    assert _dead(pid)


def _dead(pid: int) -> bool:
    """Gone, or a zombie: killed, and only waiting for its parent (here, possibly this
    test process, which started it through ``up``) to reap it."""
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


# --- ensure_server ------------------------------------------------------------------------


def test_ensure_server_without_start_says_what_to_do(state: Path) -> None:
    with pytest.raises(UserError, match="voice-llm up"):
        ensure_server(f"http://127.0.0.1:{free_port()}", start_if_missing=False)


def test_ensure_server_does_not_start_remote(state: Path) -> None:
    with pytest.raises(UserError, match="not local"):
        ensure_server("http://192.0.2.1:8080")


def test_ensure_server_starts_managed_then_reuses(state: Path, fake_bin: Path,
                                                  model_file: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert ensure_server(url, quiet=True, server_bin=fake_bin, model=model_file) == url
    pid = LlamaServer(state).running_pid()
    assert pid is not None
    assert ensure_server(url + "/") == url  # answered: nothing new started
    assert LlamaServer(state).running_pid() == pid
    assert server_log_path(url) == state / "llama-server.log"
    assert server_log_path(f"http://127.0.0.1:{free_port()}") is None


def test_concurrent_ensure_server_starts_one(state: Path, fake_bin: Path, model_file: Path,
                                             tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    url = f"http://127.0.0.1:{free_port()}"
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(
            lambda _: ensure_server(url, quiet=True, server_bin=fake_bin, model=model_file),
            range(2)))
    assert results == [url, url]
    assert "fake llama-server listening" in (state / "llama-server.log").read_text()
    assert LlamaServer(state).running_pid() is not None


# --- the real thing -----------------------------------------------------------------------


@pytest.mark.integration
def test_real_server_up_status_down(run: Run, state: Path) -> None:
    try:
        models.llama_server_binary()
    except UserError as e:
        pytest.skip(str(e))
    port = free_port()
    code, out, err = run("up", "--port", str(port))
    try:
        assert code == 0, err
        assert "n_ctx 4096" in out
        code, out, _ = run("status", "--llm-url", f"http://127.0.0.1:{port}")
        assert code == 0
        assert "slot 0: idle" in out
        assert "SmolLM2" in out
    finally:
        code, out, _ = run("down")
    assert code == 0 and "stopped" in out


@pytest.mark.integration
def test_llama_server_fixture_serves_the_bundled_model(llama_server: object) -> None:
    from services.server_http import probe

    url, log_path, pid = (getattr(llama_server, a) for a in ("url", "log_path", "pid"))
    status = probe(url)
    assert status.health == "ok" and status.n_ctx == 4096
    assert [s.get("is_processing") for s in status.slots] == [False]  # -np 1: one idle slot
    assert "--cache-ram" in Path(f"/proc/{pid}/cmdline").read_text()
    assert "listening" in log_path.read_text()


def test_up_slots_passes_np_and_states_context_per_slot(run: Run, state: Path,
                                                        fake_bin: Path, model_file: Path,
                                                        tmp_path: Path) -> None:
    port = free_port()
    code, out, _ = run("up", "--server-bin", str(fake_bin), "--model", str(model_file),
                       "--port", str(port), "--slots", "3", "--ctx", "6144")
    assert code == 0, out
    argv = " ".join(json.loads((tmp_path / "argv.json").read_text()))
    assert "-np 3" in argv and "-c 6144" in argv
    assert "context per slot 2048 tokens" in out
    run("down")


def test_up_slots_must_be_positive(run: Run, state: Path) -> None:
    code, _, err = run("up", "--slots", "0")
    assert_one_line_error(code, err, "--slots")
