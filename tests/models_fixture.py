"""Where the bundled models are, for tests of the real ASR / TTS.

The product's own lookup (``services.models``: assembles the two-part Whisper base once
into a cache folder, finds the Piper voice); a missing package skips the test with the
reason instead of failing it. Never touches a model hub.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services import models
from services.errors import UserError


def whisper_model_dir() -> Path:
    try:
        return models.whisper_model_dir()
    except UserError as e:
        pytest.skip(f"Whisper model not available: {e}")


def piper_voice() -> tuple[Path, Path]:
    try:
        return models.piper_voice()
    except UserError as e:
        pytest.skip(f"Piper voice not available: {e}")
