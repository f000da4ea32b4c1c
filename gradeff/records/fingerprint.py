"""A record's experiment fingerprint: one digest of every input that can change its numbers, and the inputs beside it.

Two records of a cell are the same experiment exactly when their inputs are equal: the settings (profile, seed,
sizes, epochs, precision, the protocol and the rate it gives), the data (a real source by its content checksum, not
its path), the starting weights (by their checksum), the numerics (thread count, the kernels' probe, compile, the
fused optimizer kernel), the rate search, the memory budget, the meters' settings and the code's version.
``--gradeff-resume`` keeps a record only where its fingerprint equals the one the session would record now, and
names the inputs that differ where it does not (:func:`differences`): the inputs are kept, not only their hash.

The inputs are plain JSON values the cell passes in (:mod:`gradeff.cell.experiment` gathers them); nothing volatile
(a temporary folder, a process id, a time) may be among them, or equal experiments would never compare equal
across ``-n 2`` workers and reruns. This module is pure: it hashes and compares what it is given.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

__all__ = ["FINGERPRINT_VERSION", "differences", "experiment_section", "fingerprint"]

# Bump when the inputs' meaning changes: fingerprints of two versions then never compare equal.
FINGERPRINT_VERSION = 1
# How much of a long value (a checksum, a skip reason) a difference shows.
_SHOWN = 40


def _canonical(inputs: Mapping) -> str:
    """The inputs as one canonical JSON text: keys sorted, no spaces, tuples as lists (what a record stores)."""
    return json.dumps(inputs, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=repr)


def fingerprint(inputs: Mapping) -> str:
    """``v1:<24 hex digits>``: the SHA-256 of the inputs' canonical JSON (equal inputs, equal fingerprints).

    Args:
        inputs: every input that can change a record's numbers, as plain JSON values.

    Returns:
        The fingerprint's version and the first 24 hex digits of the digest.
    """
    digest = hashlib.sha256(f"{FINGERPRINT_VERSION}\n{_canonical(inputs)}".encode()).hexdigest()
    return f"v{FINGERPRINT_VERSION}:{digest[:24]}"


def experiment_section(inputs: Mapping) -> dict:
    """A record's ``experiment``: ``{"fingerprint": ..., "inputs": ...}``, the inputs as JSON gives them back."""
    plain = json.loads(_canonical(inputs))
    return {"fingerprint": fingerprint(plain), "inputs": plain}


def _diff(old: object, new: object, name: str, out: list[str]) -> None:
    """One phrase per input that differs, descending into objects both sides hold (``data.sha256``), else naming the
    whole value (``tune null → {"param": "lr", ...}``)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(old.keys() | new.keys(), key=str):
            _diff(old.get(key, _ABSENT), new.get(key, _ABSENT), f"{name}.{key}" if name else str(key), out)
    elif old != new:
        out.append(f"{name} {_shown(old)} → {_shown(new)}")


def _shown(value: object) -> str:
    text = "absent" if value is _ABSENT else json.dumps(value, sort_keys=True, default=repr)
    return text if len(text) <= _SHOWN else text[:_SHOWN - 1] + "…"


_ABSENT = object()


def differences(before: Mapping | None, after: Mapping) -> list[str]:
    """The inputs that differ between an earlier record's experiment and this one's, one phrase each.

    Args:
        before: the earlier record's ``experiment`` section (``{}`` or ``None`` for a record made before
            fingerprints).
        after: the experiment the session would record now.

    Returns:
        ``["threads 1 → 2", "data.sha256 \"9f…\" → \"03…\""]`` (dotted names into the inputs, long values cut), in
        name order; ``[]`` when the fingerprints are equal; one phrase when the earlier record has none.
    """
    if not isinstance(before, Mapping) or not isinstance(before.get("inputs"), Mapping) \
            or not isinstance(before.get("fingerprint"), str):
        return ["the earlier record has no experiment fingerprint (made before fingerprints, or by hand)"]
    if before["fingerprint"] == after.get("fingerprint"):
        return []
    changed: list[str] = []
    _diff(before["inputs"], after.get("inputs", {}), "", changed)
    return changed or [f"fingerprint {before['fingerprint']} → {after.get('fingerprint')} (its digest's version)"]
