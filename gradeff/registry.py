"""Registries: one read-only mapping of frozen specs per axis of the grid.

A registry is built from a tuple of specs, so a spec's key and the key it is filed
under cannot drift apart. Looking up an unknown key raises a ``KeyError`` that lists
the valid keys, which is the error message users see for a typo on the command line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Generic, Protocol, TypeVar

__all__ = ["KEY_PATTERN", "Registry", "UnknownKeyError", "validate_key"]

# Keys become parts of cell ids ("llm-adam-accum") and pytest markers, so "-" is reserved
# as the separator and nothing outside [a-z0-9_] is allowed.
KEY_PATTERN = re.compile(r"^[a-z0-9_]+$")


class _Keyed(Protocol):
    key: str


S = TypeVar("S", bound=_Keyed)


class UnknownKeyError(KeyError):
    """A key that is not in a registry; the message names the valid choices."""

    def __str__(self) -> str:  # KeyError would repr() the message, quotes and all
        return str(self.args[0])


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid registry key, else raise ``ValueError``."""
    if not isinstance(key, str) or not KEY_PATTERN.match(key):
        raise ValueError(f"invalid key {key!r}: keys use only [a-z0-9_] ('-' separates keys in cell ids)")
    return key


class Registry(Mapping[str, S], Generic[S]):
    """An immutable mapping from key to spec, in declaration order.

    Args:
        axis: what the keys name ("model", "optimizer", ...), used in error messages.
        specs: the specs; each must have a unique, valid ``key``.
    """

    def __init__(self, axis: str, specs: Iterable[S]):
        self.axis = axis
        self._specs: dict[str, S] = {}
        for spec in specs:
            validate_key(spec.key)
            if spec.key in self._specs:
                raise ValueError(f"duplicate {axis} key {spec.key!r}")
            self._specs[spec.key] = spec

    def __getitem__(self, key: str) -> S:
        try:
            return self._specs[key]
        except KeyError:
            raise UnknownKeyError(
                f"unknown {self.axis} {key!r}; valid {self.axis}s: {', '.join(self._specs)}"
            ) from None

    def __iter__(self):
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __repr__(self) -> str:
        return f"Registry({self.axis!r}, {list(self._specs)})"
