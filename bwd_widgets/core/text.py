"""Names, paths and messages shown to a person, made safe to show: control characters made visible.

A sample folder, module or parameter name, or an exception's text may hold control characters: in a
terminal they set titles, clear the screen or change colours; in SVG (XML forbids most of them) they make
the picture invalid; a bidirectional override (U+202E) shows the text after it reversed, anywhere. All get
the same visible form, their escape: `\\x1b`, `\\u202e`.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ufffe\uffff]")
"""C0 and C1 controls and DEL (tab and newline stay); Unicode's bidirectional controls (the embeddings,
overrides and isolates, U+202A-U+202E and U+2066-U+2069, and the marks U+061C, U+200E, U+200F), which
reorder the text shown around them; and the two non-characters XML forbids."""


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    if code < 256:
        return f"\\x{code:02x}"
    return "\ufffd" if code >= 0xFFFE else f"\\u{code:04x}"


def visible(text: object) -> str:
    """`text` with every control character written as its escape (`\\x1b`, `\\u202e`), tab and newline kept."""
    return _CONTROL.sub(_escape, str(text))
