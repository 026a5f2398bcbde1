"""Plain words for how a llama-server process ended.

A negative ``Popen.returncode`` is a signal, and "code -4" tells a user nothing. The signals
a llama-server really dies of each have a likely cause and a thing to do:

- SIGILL: the build uses CPU instructions this machine lacks (a binary compiled on or for
  another CPU; ggml's AMX kernels on some Xeons) -> rebuild with the portable flags.
- SIGKILL: nobody here sends it, so it is most likely the kernel's out-of-memory killer.
- SIGSEGV / SIGBUS: a broken build or a truncated / unreadable model file.

Every place that starts the managed server words a death the same way, through
``describe_exit``.
"""

from __future__ import annotations

import signal

REBUILD_HINT = "run `scripts/setup --rebuild-server`"

_CAUSES: dict[int, str] = {
    signal.SIGILL: ("(illegal instruction) {phase}: this build uses CPU instructions this "
                    f"machine cannot run; {REBUILD_HINT}"),
    signal.SIGKILL: ("{phase}: most likely out of memory (the kernel's OOM killer; see "
                     "`dmesg`): free memory, or use a smaller --ctx or model"),
    signal.SIGSEGV: ("(segmentation fault) {phase}: a broken build or model file; "
                     f"{REBUILD_HINT}, or try another --model"),
    signal.SIGBUS: ("(bus error) {phase}: the model file is probably truncated or unreadable; "
                    "check it, or try another --model"),
    signal.SIGABRT: "(aborted) {phase}: it hit an internal error; see its log",
}


def exit_signal(code: int) -> signal.Signals | None:
    """The signal behind a return code: -N from Popen, or 128+N from a shell wrapper."""
    number = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else None
    if number is None:
        return None
    try:
        return signal.Signals(number)
    except ValueError:
        return None


def describe_exit(code: int, phase: str) -> str:
    """One line: ``llama-server died with SIGILL (illegal instruction) while loading: ...``.

    ``phase`` says when, e.g. "while loading" or "while answering a completion".
    """
    sig = exit_signal(code)
    if sig is None:
        return f"llama-server exited {phase} (code {code})"
    cause = _CAUSES.get(sig, "{phase}").format(phase=phase)
    return f"llama-server died with {sig.name} {cause}"
