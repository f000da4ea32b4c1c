"""Every cache file's checksum: written last, checked on every read; a mismatch rebuilds the cache with a warning.

A cache the suite fills itself (drawn synthetic data, prepared real tensors, the built-in real files, trained
tokenizers, pretrained backbones) is trusted only as far as its checksum: a file cut short by a full disk or a killed
writer, a copy interrupted, bytes zeroed or rotted on disk would otherwise give a cell other numbers ("cache hit", no
word) or an error in every later session that does not name the file.

One file: the payload is written to a temporary file beside it, flushed to disk and renamed into place, and only
then its ``<name>.sha256`` sidecar (``sha256sum`` format) is written the same way: a sidecar that exists vouches for a
complete payload. One folder (a pretrained backbone): a ``checksums.sha256`` manifest of every file in it, written
last. A reader checks the payload against it; a payload without one, or whose bytes differ, is reported by
:func:`verify` / :func:`verify_manifest`, and :func:`read_checked` warns naming the file
(:class:`CacheRebuiltWarning`), removes it and hands the caller nothing, so the caller rebuilds it. A cache that
cannot be rebuilt is refused instead (:class:`CacheCorrupted`, naming the file).

A file's hash is computed once per process for a given size and modification time (a cell's data is read by every
cell of a process): checking costs one read of the file per process.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import secrets
import warnings
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

__all__ = ["MANIFEST", "SUFFIX", "CacheCorrupted", "CacheNotWrittenWarning", "CacheRebuiltWarning", "content_sha256",
           "file_sha256",
           "read_checked", "sidecar", "verify", "verify_manifest", "warn_rebuilt", "write_checked", "write_manifest"]

SUFFIX = ".sha256"
MANIFEST = "checksums.sha256"
T = TypeVar("T")


class CacheRebuiltWarning(UserWarning):
    """A cache file (or folder) failed its checksum, or did not load, and is built again; the message names it."""


class CacheNotWrittenWarning(UserWarning):
    """A cache file could not be written (a full or read-only disk); what was built is used all the same."""


class CacheCorrupted(ValueError):
    """A cache that failed its checksum and cannot be rebuilt here; the message names the file."""


def sidecar(path: Path) -> Path:
    """Where ``path``'s checksum is kept: ``<name>.sha256`` beside it."""
    return path.with_name(path.name + SUFFIX)


@lru_cache(maxsize=64)
def _hash(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The file's SHA-256 (hex), computed once per process for its size and modification time."""
    stat = os.stat(path)
    return _hash(str(path), stat.st_size, stat.st_mtime_ns)


def content_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of what ``path`` holds: a file's bytes, or a folder's files (each one's relative path and
    SHA-256, in path order; hidden files and lock files left out). The same content gives the same digest wherever it
    is kept, so a record names its data and weights by it, never by their path.

    Raises:
        OSError: the path cannot be read.
    """
    path = Path(path)
    if not path.is_dir():
        return file_sha256(path)
    files = []
    for root, folders, names in os.walk(path):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in sorted(names):
            if not (name.startswith(".") or name.endswith(".lock")):
                file = Path(root) / name
                stat = file.stat()
                files.append((file.relative_to(path).as_posix(), str(file), stat.st_size, stat.st_mtime_ns))
    return _folder_sha256(tuple(files))


@lru_cache(maxsize=16)
def _folder_sha256(files: tuple) -> str:
    # Keyed by every file's path, size and modification time: a folder of many files is hashed once per process.
    digest = hashlib.sha256()
    for relative, path, size, mtime_ns in files:
        digest.update(f"{relative}\0{_hash(path, size, mtime_ns)}\n".encode())
    return digest.hexdigest()


def _fsync_folder(folder: Path) -> None:
    """The folder's entries on disk too: after a crash a renamed file is there under its new name."""
    with contextlib.suppress(OSError):  # a file system that cannot sync a folder (some network ones) still renamed
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _replace_durably(temporary: Path, path: Path) -> None:
    with open(temporary, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_folder(path.parent)


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def write_checked(path: str | os.PathLike[str], write: Callable[[Path], object], *,
                  best_effort: bool = False) -> Path | None:
    """Write a cache file and then its checksum: ``write(temporary)`` fills a file beside ``path``, which is flushed
    and renamed into place; the sidecar follows the same way, so it exists only for a complete payload.

    Args:
        path: the cache file; its folder is created.
        write: fills the file at the path it is given (``torch.save``, ``to_parquet``, ...).
        best_effort: a disk that refuses (full, read-only) costs the next process a rebuild, never this one what it
            built: a :class:`CacheNotWrittenWarning` names the file and the reason, and ``None`` is returned.

    Returns:
        ``path`` (``None``: not written, under ``best_effort``).

    Raises:
        OSError: the disk refused (the caller keeps what it built; the next reader finds no sound cache).
    """
    if best_effort:
        try:
            return write_checked(path, write)
        except OSError as exc:
            warnings.warn(f"cache {path}: not written ({exc.strerror or exc}); the next process builds it again",
                          CacheNotWrittenWarning, stacklevel=2)
            return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    check = sidecar(path)
    check.unlink(missing_ok=True)  # an old checksum never vouches for the new payload
    payload, summed = _temporary(path), _temporary(check)
    try:
        write(payload)
        _replace_durably(payload, path)
        summed.write_text(f"{file_sha256(path)}  {path.name}\n", encoding="utf-8")
        _replace_durably(summed, check)
    finally:
        payload.unlink(missing_ok=True)
        summed.unlink(missing_ok=True)
    return path


def verify(path: str | os.PathLike[str]) -> str | None:
    """Why the cache file at ``path`` cannot be trusted, or ``None`` when it matches its checksum.

    Returns:
        ``None``: sound. Else one phrase: no checksum (it was never completed), a malformed checksum, the file
        missing, or its bytes not those the checksum names (truncated or changed).
    """
    path = Path(path)
    try:
        line = sidecar(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return f"no readable {sidecar(path).name} (written last: the file was never completed)"
    expected = line.split("  ", 1)[0]
    if len(expected) != 64 or any(c not in "0123456789abcdef" for c in expected):
        return f"{sidecar(path).name} is malformed"
    try:
        actual = file_sha256(path)
    except OSError as exc:
        return f"the file cannot be read ({exc.strerror or exc})"
    if actual != expected:
        return "its bytes do not match its sha256 (truncated or changed)"
    return None


def warn_rebuilt(path: str | os.PathLike[str], problem: str, *, stacklevel: int = 3) -> None:
    """Say, naming the file, that a cache is rebuilt and why."""
    warnings.warn(f"cache {path}: {problem}; rebuilding it", CacheRebuiltWarning, stacklevel=stacklevel)


def _remove(path: Path) -> None:
    for stale in (path, sidecar(path)):
        with contextlib.suppress(OSError):
            stale.unlink()


def read_checked(path: str | os.PathLike[str], read: Callable[[Path], T], *,
                 errors: tuple[type[BaseException], ...] = (OSError, ValueError, RuntimeError, EOFError,
                                                            pickle.UnpicklingError),
                 rebuild: bool = True) -> T | None:
    """``read(path)`` when the cache file matches its checksum; ``None`` when there is no sound copy to read.

    A file that is there but fails its checksum, or passes it and still does not load (``errors``: another
    library's version cannot read it), is warned about (:class:`CacheRebuiltWarning`, naming it and why) and
    removed with its checksum, and ``None`` tells the caller to build it again. No file at all is ``None`` without a
    word (a cache never filled).

    Args:
        path: the cache file.
        read: loads it.
        errors: what ``read`` raises for a file it cannot load.
        rebuild: ``False`` for a cache that cannot be rebuilt: a bad one raises instead.

    Raises:
        CacheCorrupted: a bad cache that cannot be rebuilt, naming the file and why.
    """
    path = Path(path)
    if not path.exists() and not sidecar(path).exists():
        return None
    problem = verify(path)
    if problem is None:
        try:
            return read(path)
        except errors as exc:
            problem = f"it does not load ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    if not rebuild:
        raise CacheCorrupted(f"cache {path}: {problem}; it cannot be rebuilt here: remove it and give its source again")
    warn_rebuilt(path, problem)
    _remove(path)
    return None


def write_manifest(folder: Path) -> Path:
    """Write ``folder``'s manifest (every other file's sha256, ``sha256sum`` format) last, after every file it names
    is on disk: a manifest that exists vouches for complete files."""
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST)
    for name in names:
        with open(folder / name, "rb") as handle:
            os.fsync(handle.fileno())
    manifest = folder / MANIFEST
    with open(manifest, "w", encoding="utf-8") as handle:
        handle.write("".join(f"{file_sha256(folder / name)}  {name}\n" for name in names))
        handle.flush()
        os.fsync(handle.fileno())
    _fsync_folder(folder)  # the directory entries too, before the folder is renamed into place
    return manifest


def verify_manifest(folder: Path, *, required: str | None = None) -> str | None:
    """Why a cached folder cannot be trusted (no manifest, a file missing or changed, ``required`` not listed), or
    ``None`` when every file matches its checksum."""
    manifest = folder / MANIFEST
    try:
        lines = manifest.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return f"no readable {MANIFEST} (written last: the folder was never completed)"
    entries = [line.split("  ", 1) for line in lines if line.strip()]
    if not entries or any(len(entry) != 2 for entry in entries) or \
            (required is not None and required not in {name for _, name in entries}):
        return f"{MANIFEST} is malformed"
    for expected, name in entries:
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if file_sha256(path) != expected:
            return f"{name} does not match its sha256 (truncated or changed)"
    return None
