"""Model and binary location: Whisper assembly from split parts, binary lookup order."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services import models
from services.errors import UserError


@pytest.fixture
def parts(tmp_path: Path) -> tuple[list[Path], list[Path]]:
    src = tmp_path / "src"
    src.mkdir()
    part1, part2 = src / "model.bin.part1", src / "model.bin.part2"
    part1.write_bytes(b"A" * 3000)
    part2.write_bytes(b"B" * 1234)
    extras = []
    for name in models.WHISPER_EXTRAS:
        (src / name).write_text(f'{{"name": "{name}"}}')
        extras.append(src / name)
    return [part1, part2], extras


def test_assemble_concatenates_parts_and_copies_extras(parts: tuple[list[Path], list[Path]],
                                                       tmp_path: Path) -> None:
    target = models.assemble_whisper(*parts, target=tmp_path / "cache" / "whisper-base")
    assert (target / "model.bin").read_bytes() == b"A" * 3000 + b"B" * 1234
    for extra in parts[1]:
        assert (target / extra.name).read_text() == extra.read_text()
    assert sorted(p.name for p in target.iterdir()) == sorted(["model.bin",
                                                               *models.WHISPER_EXTRAS])


def test_assemble_reuses_a_complete_model(parts: tuple[list[Path], list[Path]], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    target = models.assemble_whisper(*parts, target=tmp_path / "w")

    def no_write(dest: Path, sources: object) -> None:
        raise AssertionError(f"rewrote {dest}")

    monkeypatch.setattr(models, "_atomic_write", no_write)
    assert models.assemble_whisper(*parts, target=tmp_path / "w") == target


def test_assemble_redoes_a_half_written_model(parts: tuple[list[Path], list[Path]],
                                              tmp_path: Path) -> None:
    target = tmp_path / "w"
    target.mkdir()
    (target / "model.bin").write_bytes(b"A" * 100)  # an interrupted earlier run
    models.assemble_whisper(*parts, target=target)
    assert (target / "model.bin").stat().st_size == 3000 + 1234
    assert not list(target.glob(".*.tmp"))


def test_assemble_missing_part_is_a_user_error(parts: tuple[list[Path], list[Path]],
                                               tmp_path: Path) -> None:
    parts[0][1].unlink()
    with pytest.raises(UserError, match="model.bin.part2.*scripts/setup"):
        models.assemble_whisper(*parts, target=tmp_path / "w")


def test_whisper_model_dir_uses_cache_env(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Path] = {}

    def fake_assemble(parts: list[Path], extras: list[Path], target: Path) -> Path:
        seen["target"] = target
        assert [p.name for p in parts] == ["model.bin.part1", "model.bin.part2"]
        return target

    monkeypatch.setenv("VOICE_LLM_CACHE", str(tmp_path / "c"))
    monkeypatch.setattr(models, "assemble_whisper", fake_assemble)
    assert models.whisper_model_dir() == tmp_path / "c" / "whisper-base"


def test_missing_package_says_run_setup() -> None:
    with pytest.raises(UserError, match="no-such-dist is not installed: run scripts/setup"):
        models.package_dir("no_such_package_xyz", "no-such-dist")


def test_bundled_model_and_voice_exist() -> None:
    assert models.default_gguf().name.endswith(".gguf")
    onnx, config = models.piper_voice()
    assert onnx.is_file() and config.name.endswith(".onnx.json")


def _exe(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_binary_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = _exe(tmp_path / "explicit")
    from_env = _exe(tmp_path / "from-env")
    bundled = _exe(tmp_path / "bundled")
    path_dir = tmp_path / "bin"
    path_dir.mkdir()
    on_path = _exe(path_dir / "llama-server")
    monkeypatch.setenv("PATH", str(path_dir))
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(from_env))
    monkeypatch.setattr(models, "bundled_server_binary", lambda: bundled)
    assert models.llama_server_binary(str(explicit)) == explicit.resolve()
    assert models.llama_server_binary() == from_env.resolve()
    monkeypatch.delenv("LLAMA_SERVER_BIN")
    assert models.llama_server_binary() == bundled
    monkeypatch.setattr(models, "bundled_server_binary", lambda: None)
    assert models.llama_server_binary() == on_path
    os.unlink(on_path)
    with pytest.raises(UserError, match="llama-server not found: run scripts/setup"):
        models.llama_server_binary()


def test_wrong_explicit_binary_does_not_fall_back(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(_exe(tmp_path / "ok")))
    with pytest.raises(UserError, match="--server-bin not found"):
        models.llama_server_binary(str(tmp_path / "missing"))


def test_llm_model_env_and_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("VOICE_LLM_MODEL", str(gguf))
    assert models.llm_model() == gguf.resolve()
    monkeypatch.setenv("VOICE_LLM_MODEL", str(tmp_path / "gone.gguf"))
    with pytest.raises(UserError, match="VOICE_LLM_MODEL"):
        models.llm_model()
