"""What every experiment gets: the client, the server it talks to, the documents, progress.

Experiments are ``async def run(lab: Lab, ...) -> dict`` returning their ``lab.json``
section; they never print. Progress goes through ``Lab.tracker`` so the CLI can show a rich
progress bar while tests run silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pipeline.llm_client import LlmClient
from services.server_http import ServerProps

DEFAULT_SEED = 42
DOCS_DIR = Path(__file__).resolve().parents[2] / "samples" / "docs"


class Tracker(Protocol):
    def start(self, label: str, total: int) -> None: ...
    def advance(self) -> None: ...


class SilentTracker:
    def start(self, label: str, total: int) -> None:
        pass

    def advance(self) -> None:
        pass


@dataclass
class ServerUnderTest:
    """The llama-server under test. ``log_path`` is None when the lab did not start the
    server and was not told where its log is: then nothing is read from the log."""

    url: str
    log_path: Path | None
    started_by_lab: bool
    props: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"url": self.url, "log_path": str(self.log_path) if self.log_path else None,
                "started_by_lab": self.started_by_lab,
                **ServerProps.parse(self.props).as_dict()}


@dataclass
class Lab:
    client: LlmClient
    server: ServerUnderTest
    docs: list[str]
    seed: int = DEFAULT_SEED
    tracker: Tracker = field(default_factory=SilentTracker)

    async def slots(self) -> list[dict[str, Any]]:
        data = await self.client.get_json("/slots")
        return list(data) if isinstance(data, list) else []

    async def wait_slots_idle(self, limit_s: float = 60.0, interval: float = 0.005) -> float:
        """The monotonic time no slot was processing any more (``LlmClient.wait_slot_idle``)."""
        idle = await self.client.wait_slot_idle(limit_s, interval=interval)
        if idle is None:
            raise TimeoutError(f"llama-server slot still busy after {limit_s:.0f} s")
        return idle


def load_docs(folder: Path = DOCS_DIR) -> list[str]:
    """The reference documents attached in the prefill and cache experiments, in name order."""
    paths = sorted(folder.glob("*.txt"))
    return [p.read_text(encoding="utf-8").strip() for p in paths]


def attach_docs(instructions: str, docs: list[str]) -> str:
    """A system prompt with retrieved documents appended, the way a RAG assistant builds it."""
    if not docs:
        return instructions
    notes = "\n\n".join(f"Note {i}: {doc}" for i, doc in enumerate(docs, 1))
    return f"{instructions}\n\nReference notes:\n\n{notes}"
