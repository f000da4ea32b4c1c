"""Registries: one read-only mapping of frozen specs per axis of the grid.

A registry is built from a tuple of specs, so a spec's key and the key it is filed
under cannot drift apart. Looking up an unknown key raises a ``KeyError`` that lists
the valid keys, which is the error message users see for a typo on the command line.

A user's own entries (a conftest's ``pytest_gradeff_register`` hook, an installed package's entry
points) are added once, while the pytest session configures (:func:`open_for_registration`); the
registries are read-only before and after. :meth:`Registry.reset` drops them again, so a second
session in the same process (pytester) starts from the built-in entries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Generic, Protocol, TypeVar

__all__ = ["KEY_PATTERN", "Registry", "RegistryClosedError", "UnknownKeyError", "open_for_registration",
           "validate_key"]

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


class RegistryClosedError(RuntimeError):
    """An entry added outside registration: cells already collected would not see it."""


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
        plural: the plural of ``axis`` where it is not ``axis + "s"`` ("studies").
    """

    def __init__(self, axis: str, specs: Iterable[S], *, plural: str | None = None):
        self.axis = axis
        self.plural = plural or f"{axis}s"
        self._specs: dict[str, S] = {}
        for spec in specs:
            validate_key(spec.key)
            if spec.key in self._specs:
                raise ValueError(f"duplicate {axis} key {spec.key!r}")
            self._specs[spec.key] = spec
        self._builtin = dict(self._specs)
        self._sources: dict[str, str] = {}
        self._open = False

    def register(self, spec: S, *, source: str, replace: bool = False) -> S:
        """Add ``spec`` (or, with ``replace``, swap an entry for it); only during registration.

        Args:
            source: where the entry comes from (a conftest's path, an entry point), named in errors.

        Raises:
            RegistryClosedError: outside :func:`open_for_registration`.
            ValueError: an invalid key, or a key already taken (when not replacing); the message
                names what holds the key.
        """
        if not self._open:
            raise RegistryClosedError(
                f"the {self.axis} registry is read-only: add entries from a pytest_gradeff_register hook or a "
                f"gradeff entry point, which run before the grid is collected")
        validate_key(spec.key)
        if spec.key in self._specs and not replace:
            holder = self._sources.get(spec.key, "gradeff (built in)")
            raise ValueError(f"duplicate {self.axis} key {spec.key!r}: already registered by {holder}")
        self._specs[spec.key] = spec
        self._sources[spec.key] = source
        return spec

    def source(self, key: str) -> str | None:
        """Where a registered entry came from; ``None`` for a built-in one."""
        return self._sources.get(key)

    def added(self) -> list[str]:
        """The keys registered from outside gradeff, in registration order."""
        return [key for key in self._specs if key in self._sources and key not in self._builtin]

    def reset(self) -> None:
        """Drop every registered entry and replacement: the built-in entries only."""
        self._specs = dict(self._builtin)
        self._sources = {}

    def __getitem__(self, key: str) -> S:
        try:
            return self._specs[key]
        except KeyError:
            raise UnknownKeyError(
                f"unknown {self.axis} {key!r}; valid {self.plural}: {', '.join(self._specs)}"
            ) from None

    def __iter__(self):
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __repr__(self) -> str:
        return f"Registry({self.axis!r}, {list(self._specs)})"


@contextmanager
def open_for_registration(registries: Iterable[Registry]) -> Iterator[None]:
    """Let ``registries`` take entries inside the block; read-only again after it, whatever happens."""
    registries = list(registries)
    for registry in registries:
        registry._open = True
    try:
        yield
    finally:
        for registry in registries:
            registry._open = False
