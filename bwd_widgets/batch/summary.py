"""`summary.json`: what a batch did, one record per sample, replaced atomically after every sample."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ..core.errors import BatchError
from ..core.units import format_bytes
from ..graphnet.writer import LAYOUTS, Layout
from .records import FAILED, OUTCOMES, STATUSES, Outcome, SampleRecord, Settings, Status

if TYPE_CHECKING:
    from collections.abc import Sequence

SUMMARY_WRITER = "bwd-extract"


def status_counts(records: Sequence[SampleRecord]) -> dict[Status, int]:
    return {status: sum(r["status"] == status for r in records) for status in STATUSES}


def validation_counts(records: Sequence[SampleRecord]) -> dict[Outcome, int]:
    return {outcome: sum(r.get("validation") == outcome for r in records) for outcome in OUTCOMES}


@dataclass
class BatchSummary:
    """What a batch did, one record per sample (name, status, reason, seconds, node counts, saved bytes)."""

    out: Path
    settings: Settings
    records: list[SampleRecord]
    interrupted: bool = False

    @property
    def counts(self) -> dict[Status, int]:
        return status_counts(self.records)

    @property
    def validation(self) -> dict[Outcome, int]:
        """Samples whose written folders all passed GraphNet's validation steps, and those where one failed."""
        return validation_counts(self.records)

    @property
    def failed(self) -> list[SampleRecord]:
        return [r for r in self.records if r["status"] in FAILED]

    def __repr__(self) -> str:
        header = f"{'name':40} {'status':8} {'seconds':>8} {'fw':>6} {'bw':>6} {'saved':>9}  reason"
        lines = [header]
        for r in self.records:
            saved = r.get("saved_activation_bytes")
            lines.append(
                f"{r['name'][-40:]:40} {r['status']:8} {r.get('seconds', ''):>8} {r.get('forward_nodes', ''):>6} "
                f"{r.get('backward_nodes', ''):>6} {'' if saved is None else format_bytes(saved):>9}  "
                f"{r.get('reason', '')}"
            )
        counts = ", ".join(f"{n} {s}" for s, n in self.counts.items() if n)
        validated = self.validation
        if any(validated.values()):
            counts += f"; validated {validated['passed']} passed, {validated['failed']} failed"
        lines.append(f"{counts}{'; interrupted' if self.interrupted else ''}; summary in {self.out / 'summary.json'}")
        return "\n".join(lines)


def write_summary(out: Path, settings: Settings, records: list[SampleRecord], layout: Layout = "graphnet") -> None:
    """Replace `summary.json` atomically: a killed batch leaves the previous one or this one, whole."""
    document = {
        "written_by": SUMMARY_WRITER,
        "layout": layout,
        "settings": settings,
        "counts": status_counts(records),
        "validation": validation_counts(records),
        "samples": records,
    }
    temporary = out / f".bwd_widgets_summary_{uuid.uuid4().hex}.json"
    try:
        with open(temporary, "x") as file:
            file.write(json.dumps(document, indent=2) + "\n")
        os.replace(temporary, out / "summary.json")
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def read_previous(out: Path, resume: bool) -> tuple[dict[str, SampleRecord], Layout | None]:
    """The records of `summary.json` by name, and the layout it was written with (None: no summary)."""
    path = out / "summary.json"
    if not path.exists():
        return {}, None
    try:
        document = json.loads(path.read_text())
        ours = isinstance(document, dict) and document.get("written_by") == SUMMARY_WRITER
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise BatchError(
            f"{path} is not a summary that bwd-extract wrote (foreign or corrupt): move it away or choose another "
            "output folder."
        )
    layout = document.get("layout", "flat")  # summaries from before the layout was recorded were flat
    if layout not in LAYOUTS:
        raise BatchError(f"{path} names the unknown layout {layout!r}: move it away or choose another output folder.")
    records = document.get("samples")
    if not isinstance(records, list) or not all(isinstance(r, dict) and "name" in r for r in records):
        if resume:
            raise BatchError(f"{path} has no list of sample records: move it away, or rerun without --resume.")
        return {}, layout
    return {r["name"]: cast("SampleRecord", r) for r in records}, layout  # rows this package wrote
