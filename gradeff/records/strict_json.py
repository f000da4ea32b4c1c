"""A record's strict-JSON form: non-finite numbers written as ``null`` and named by JSON Pointers, put back on
reading, every value checked against the kind its dataclass field declares, and lone UTF-16 surrogates made whole.

The store is strict JSON, one object per line: any JSON reader (``jq``, a browser, another language)
reads every line. JSON has no NaN or infinity, so a non-finite number (a diverged cell's loss, a
meter's failed reading) is written as ``null`` and named in the record's ``nonfinite`` object, a
JSON Pointer (RFC 6901) per value with ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``::

    {"schema_version": 3, ..., "epochs": [{"loss": null, ...}], "nonfinite": {"/epochs/0/loss": "NaN"}}

Reading puts the value back, so a NaN survives the round trip as a NaN, never as ``None``.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import MISSING, fields

__all__ = [
    "NONFINITE", "NONFINITE_KEY", "SURROGATE_ESCAPE", "check_kinds", "replace_nonfinite", "restore_nonfinite",
    "version_at_least", "whole_characters",
]

# The record-level object naming the values stored as null because they were NaN or infinite.
NONFINITE_KEY = "nonfinite"
NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


# A JSON escape of a UTF-16 surrogate: a string may then hold a lone one, which is no character at all.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def whole_characters(value: object) -> object:
    """``value`` with every lone surrogate in its strings (``"\\ud800"`` in JSON, from a writer that cut a character
    in half) replaced by U+FFFD, and escaped pairs joined into their character: a lone surrogate is no text any
    encoder writes, so a terminal, a CSV or a parquet file would fail on it instead of showing the record."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {whole_characters(key): whole_characters(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_characters(item) for item in value]
    return value


# What each annotation of the record's dataclasses admits from JSON (``float`` takes an integer too; neither number
# takes a boolean).
_KINDS = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "dict": (dict,), "None": (type(None),),
          "tuple": (list, tuple), "Summary": (dict,), "EpochRecord": (dict,)}


def _admits(annotation: str, value: object) -> bool:
    for part in annotation.split("|"):
        kind = part.strip().split("[")[0]
        if kind in ("int", "float") and isinstance(value, bool):
            continue
        if isinstance(value, _KINDS.get(kind, (object,))):
            return True
    return False


def check_kinds(cls: type, data: object, where: str, skip: tuple[str, ...] = ()) -> None:
    """Raise ``ValueError`` naming the first field of ``data`` (a record's, an epoch's or its summary's) that is
    missing, unknown or of another kind than ``cls`` declares (``epochs[0].seconds is null, expected float``)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where.rstrip('.') or 'a record'} is {_kind(data)}, expected an object")
    declared = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(declared))
    if unknown:
        raise ValueError(f"unknown {where.rstrip('.') or 'record'} fields: {unknown}")
    for name, spec in declared.items():
        if name in skip:
            continue
        if name not in data:
            if spec.default is MISSING and spec.default_factory is MISSING:
                raise ValueError(f"{where}{name} is missing")
            continue
        if not _admits(spec.type, data[name]):
            raise ValueError(f"{where}{name} is {_kind(data[name])}, expected {spec.type}")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    text = json.dumps(value, default=repr)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:39] + '…'}"


def version_at_least(version: object, least: int) -> bool:
    return isinstance(version, int) and not isinstance(version, bool) and version >= least


def _pointer_token(key: object) -> str:
    # RFC 6901: "~" and "/" inside a key are escaped, so any key (a module path, a ratio "1/2") is safe.
    return str(key).replace("~", "~0").replace("/", "~1")


def replace_nonfinite(value: object, pointer: str, found: dict[str, str]) -> object:
    """``value`` with every non-finite float replaced by ``None``, its pointer and kind added to ``found``."""
    if isinstance(value, float) and not math.isfinite(value):
        found[pointer] = "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
        return None
    if isinstance(value, dict):
        return {key: replace_nonfinite(item, f"{pointer}/{_pointer_token(key)}", found) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [replace_nonfinite(item, f"{pointer}/{index}", found) for index, item in enumerate(value)]
    return value


def restore_nonfinite(data: dict, flags: object) -> dict:
    """A copy of ``data`` with the values ``flags`` names (pointer → kind) put back where they are ``null``."""
    if not isinstance(flags, dict):
        raise ValueError(f"{NONFINITE_KEY} must be an object of JSON Pointers, got {type(flags).__name__}")
    data = copy.deepcopy(data)
    for pointer, kind in flags.items():
        if kind not in NONFINITE:
            raise ValueError(f"{NONFINITE_KEY}: {pointer!r} is {kind!r}; expected one of {', '.join(NONFINITE)}")
        if not pointer.startswith("/"):
            raise ValueError(f"{NONFINITE_KEY}: {pointer!r} is not a JSON Pointer")
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]
        parent: object = data
        try:
            for token in tokens[:-1]:
                parent = parent[int(token)] if isinstance(parent, list) else parent[token]
            last = int(tokens[-1]) if isinstance(parent, list) else tokens[-1]
            if parent[last] is not None:
                raise ValueError(f"{NONFINITE_KEY}: {pointer!r} holds {parent[last]!r}, not null")
            parent[last] = NONFINITE[kind]
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(f"{NONFINITE_KEY}: {pointer!r} names no value ({type(exc).__name__}: {exc})") from None
    return data
