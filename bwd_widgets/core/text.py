"""Names, paths and messages shown to a person, made safe to show: control characters made visible.

A sample folder, module or parameter name, or an exception's text may hold control characters: in a
terminal they set titles, clear the screen or change colours; in SVG (XML forbids most of them) they make
the picture invalid. Both get the same visible form, `\\x1b`.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff]")
"""C0 and C1 controls and DEL (tab and newline stay), and the two non-characters XML forbids."""


def visible(text: object) -> str:
    """`text` with every control character written as its escape (`\\x1b`), tab and newline kept."""
    return _CONTROL.sub(
        lambda found: f"\\x{ord(found.group()):02x}" if ord(found.group()) < 256 else "\ufffd", str(text)
    )
