"""Errors meant for users: one clear sentence, exit code 2, no traceback (shared/DESIGN.md)."""

from __future__ import annotations

import difflib


class UserError(Exception):
    """Bad input from the user. The message is one sentence naming the field and what is allowed."""

    exit_code = 2


def nearest(word: str, choices, n: int = 3) -> str:
    """Return ' Did you mean: a, b?' for the closest choices, or '' when none is close."""
    close = difflib.get_close_matches(word.lower(), [c.lower() for c in choices], n=n, cutoff=0.5)
    lookup = {c.lower(): c for c in choices}
    return f" Did you mean: {', '.join(lookup[c] for c in close)}?" if close else ""
