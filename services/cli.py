"""``voice-llm`` command line: one subcommand per job, each implemented in its own module.

Subcommand modules expose ``add_arguments(parser)`` and ``run(args) -> int``; they are
imported lazily so ``voice-llm --help`` stays instant and a missing optional part (no
PortAudio, say) only breaks the command that needs it.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from services.errors import UserError

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("services.server_cmd", "start the managed llama-server and wait until it is ready"),
    "down": ("services.server_cmd", "stop the managed llama-server"),
    "status": ("services.server_cmd", "show whether llama-server runs, its model and slots"),
    "lab": ("services.lab.cli",
            "LLM latency lab: TTFT, prefill, KV cache, first sentence, barge-in"),
    "replay": ("services.replay",
               "run recorded WAV turns through the pipeline as one conversation"),
    "compare": ("services.compare", "serial vs streamed latency on the same turns, with a report"),
    "talk": ("services.talk", "talk to the assistant through a microphone"),
    "serve": ("services.web", "run the HTTP/WebSocket service with a browser page"),
}

DEFAULT_LLM_URL = "http://127.0.0.1:8080"


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The full parser; only the ``selected`` command's module is imported (its options)."""
    parser = argparse.ArgumentParser(
        prog="voice-llm",
        description="A voice assistant that starts speaking when the first sentence is ready, "
        "and measures every stage of every turn.",
        epilog="Run 'voice-llm COMMAND --help' for a command's options. "
        "State (pid, logs, snapshots) lives in .voice-llm/ or $VOICE_LLM_STATE.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more logging (-v lifecycle, -vv every event)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        description = help_text[0].upper() + help_text[1:] + "."
        p = sub.add_parser(name, help=help_text, description=description)
        p.add_argument("--llm-url", default=os.environ.get("VOICE_LLM_URL", DEFAULT_LLM_URL),
                       help="llama-server to use; started (managed) if nothing answers there "
                       "(default %(default)s, env VOICE_LLM_URL)")
        if name == selected:
            importlib.import_module(module_name).add_arguments(p, name)
        p.set_defaults(_module=module_name)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The program (``argv`` None: the process's own arguments, and its exit), or one
    command in this process (tests)."""
    if argv is not None:
        return _command(argv)
    code = _command(sys.argv[1:])
    if "pipeline.echo_cancel" in sys.modules:  # talk's canceller ran: see there
        from pipeline.echo_cancel import leave_past_the_native_runtime

        leave_past_the_native_runtime(code)
    return code


def _command(argv: list[str]) -> int:
    selected = next((a for a in argv if a in COMMANDS), None)
    args = build_parser(selected).parse_args(argv)
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    module = importlib.import_module(args._module)
    try:
        code: int = module.run(args)
    except UserError as e:
        print(f"voice-llm {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"voice-llm {args.command}: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
