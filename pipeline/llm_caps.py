"""What an OpenAI-compatible LLM server offers beyond ``/v1/chat/completions``.

llama-server adds extras the pipeline uses when they are there: ``timings`` in the stream
(server-side prefill, KV-cache reuse), ``/slots`` (the proof that a hang-up stopped the
generation), ``/props``, ``/health``, and request fields (``cache_prompt``, ``id_slot``,
``timings_per_token``). Any other OpenAI-compatible server (vLLM, Ollama, a hosted API)
may have none of them. ``LlmClient`` detects them once per client (docs/llm-servers.md):

- the endpoints, from the answers to four GETs (``from_answers``: pure, no I/O);
- what the stream carries, from the first stream that produced a token (``observe``):
  ``timings`` on its chunks, ``usage`` on its last one (asked with
  ``stream_options.include_usage``).

A figure the server does not report is ``None`` in the metrics, never 0, and is named by
``unknowable()`` so the reports can say "n/a (not reported by this server)".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NOT_REPORTED = "not reported by this server"
NOT_VERIFIABLE = "stream closed; server-side stop not verifiable"

# Request fields only llama-server understands: a strict OpenAI server rejects unknown
# fields (HTTP 400), so they are sent only where /props and /slots say it is llama-server.
LLAMA_ONLY_FIELDS = ("cache_prompt", "id_slot", "timings_per_token", "repeat_penalty",
                     "repeat_last_n")

# The metrics each missing capability leaves unknown (names as in TurnMetrics).
_FROM_TIMINGS = ("prefill_ms", "prompt_n", "cache_n")
_FROM_SLOTS = ("bargein_to_slot_idle_ms",)
_FROM_USAGE = ("prompt_tokens", "completion_tokens", "cached_tokens")

# (HTTP status, decoded JSON or None) of one GET; None when nothing answered at all.
Answer = tuple[int, Any] | None


@dataclass
class LlmCapabilities:
    """One server's extras. ``timings``/``usage`` are None until a stream showed them."""

    health: bool = False  # GET /health answers 200
    props: bool = False  # GET /props answers a JSON object (llama-server's settings)
    slots: bool = False  # GET /slots answers a list: barge-in can confirm the slot idle
    models: tuple[str, ...] = ()  # ids from GET /v1/models (sent as "model" when needed)
    timings: bool | None = None  # stream chunks carry llama-server's timings
    usage: bool | None = None  # the last chunk carries usage (stream_options.include_usage)
    n_ctx: int | None = None  # from /props or /v1/models, when either says

    @classmethod
    def from_answers(cls, *, health: Answer, props: Answer, slots: Answer,
                     models: Answer) -> LlmCapabilities:
        props_body = props[1] if props and props[0] == 200 else None
        models_body = models[1] if models and models[0] == 200 else None
        entries = models_body.get("data") if isinstance(models_body, dict) else None
        entries = [m for m in entries if isinstance(m, dict)] if isinstance(entries,
                                                                            list) else []
        return cls(health=bool(health and health[0] == 200),
                   props=isinstance(props_body, dict),
                   slots=bool(slots and slots[0] == 200 and isinstance(slots[1], list)),
                   models=tuple(str(m["id"]) for m in entries if m.get("id")),
                   n_ctx=_n_ctx(props_body, entries))

    @property
    def llama_server(self) -> bool:
        """The llama-server extras are there (its /props and /slots both answer)."""
        return self.props and self.slots

    @property
    def server(self) -> str:
        return "llama-server" if self.llama_server else "openai-compatible"

    def request_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as this server takes it: llama-only fields dropped elsewhere, and the
        ``model`` most OpenAI servers require added when the server listed one."""
        if self.llama_server:
            return body
        out = {k: v for k, v in body.items() if k not in LLAMA_ONLY_FIELDS}
        if "model" not in out and self.models:
            out["model"] = self.models[0]
        return out

    def observe(self, *, timings_seen: bool, usage_seen: bool | None) -> None:
        """What one stream showed; the first conclusive stream decides, once."""
        if self.timings is None:
            self.timings = timings_seen
        if self.usage is None and usage_seen is not None:
            self.usage = usage_seen

    def unknowable(self) -> list[str]:
        """The metrics this server cannot give (``None`` in them, "n/a" in reports)."""
        missing: list[str] = []
        if self.timings is False:
            missing += _FROM_TIMINGS
        if not self.slots:
            missing += _FROM_SLOTS
        if self.usage is False:
            missing += _FROM_USAGE
        return missing

    def to_dict(self) -> dict[str, Any]:
        """The ``llm.capabilities`` event's data and replay's ``llm_capabilities``."""
        return {"server": self.server, "health": self.health, "props": self.props,
                "slots": self.slots, "models": list(self.models), "timings": self.timings,
                "usage": self.usage, "n_ctx": self.n_ctx, "unknowable": self.unknowable()}


def unknowable_of(caps: dict[str, Any] | None) -> list[str]:
    """``unknowable`` read back from a recorded ``llm.capabilities`` event's data."""
    value = (caps or {}).get("unknowable")
    return [str(v) for v in value] if isinstance(value, list) else []


def _n_ctx(props: Any, models: list[dict[str, Any]]) -> int | None:
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        value = (settings.get("n_ctx") if isinstance(settings, dict) else None) \
            or props.get("n_ctx")
        if isinstance(value, int):
            return value
    for entry in models:  # llama-server's /v1/models has meta.n_ctx; others say nothing
        meta = entry.get("meta")
        if isinstance(meta, dict) and isinstance(meta.get("n_ctx"), int):
            return int(meta["n_ctx"])
    return None


# How reports name the metrics a server cannot give (the per-turn line of replay).
_FIGURES = (("prefill", ("prefill_ms",)), ("cache", ("cache_n", "prompt_n")),
            ("usage", ("prompt_tokens", "completion_tokens")))


def not_reported_line(not_reported: list[str] | tuple[str, ...], *,
                      interrupted: bool) -> str | None:
    """One line for a turn's report: each figure this server cannot give, said as such
    ("prefill n/a (not reported by this server)"), and a barge-in nobody can verify."""
    missing = set(not_reported)
    parts = [f"{label} n/a ({NOT_REPORTED})" for label, keys in _FIGURES
             if missing.intersection(keys)]
    if interrupted and "bargein_to_slot_idle_ms" in missing:
        parts.append(f"barge-in: {NOT_VERIFIABLE}")
    return "llm server: " + " · ".join(parts) if parts else None
