"""The images of a ``datasets`` split, decoded row by row, a bad one named by its file and row.

``datasets`` decodes an ``Image`` column lazily, inside a column read, and a corrupt file then raises an error
that names neither the file nor the row. A parquet file written by pandas (``df.to_parquet``) keeps its image
column as plain ``{"bytes": ..., "path": ...}`` structs that ``datasets`` does not decode at all. Reading the
column undecoded and decoding each cell here handles both, and names what failed.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

__all__ = ["BadImage", "decode_images", "undecoded_column"]


class BadImage(ValueError):
    """An image cell that does not decode; the message names the split, the row and the file."""


def undecoded_column(split, column: str) -> list:
    """The column's cells as stored: ``{"bytes", "path"}`` dicts for an ``Image`` feature (decoding switched
    off), pandas-written image structs as they are, anything else (arrays, lists, PIL images) unchanged."""
    import datasets

    if isinstance(split.features.get(column), datasets.Image):
        split = split.cast_column(column, datasets.Image(decode=False))
    return split[column]


def _open(cell, folder: Path | None):
    """A decoded PIL image (or an array) from one cell of an image column."""
    from PIL import Image

    if cell is None:
        raise ValueError("the cell is empty (null)")
    if isinstance(cell, dict) and ("bytes" in cell or "path" in cell):
        data, path = cell.get("bytes"), cell.get("path")
        if data is None:
            if not path:
                raise ValueError("neither bytes nor a path")
            file = Path(path)
            if not file.is_absolute() and folder is not None and not file.exists():
                file = folder / file
            data = file.read_bytes()
        cell = bytes(data)
    if isinstance(cell, (bytes, bytearray, memoryview)):
        image = Image.open(io.BytesIO(cell))
        image.load()  # a truncated file raises here, not later inside a cell
        return image
    return cell


def _describe(cell) -> str:
    path = cell.get("path") if isinstance(cell, dict) else None
    if cell is None:
        return "null"
    return f"file {path}" if path else "embedded bytes" if isinstance(cell, (dict, bytes, bytearray)) else "a value"


def decode_images(cells: list, *, where: str, folder: Path | None = None,
                  convert: Callable[[object], object] = lambda image: image) -> list:
    """Decode every cell of an image column, converting each decoded image with ``convert``.

    Args:
        cells: the column's cells, from :func:`undecoded_column`.
        where: the source and split, for messages (``cifar100=/data/c100, the 'train' split``).
        folder: where relative paths of ``{"path": ...}`` cells are looked for (the dataset's folder).
        convert: applied to each decoded image (to an array, resized), inside the guard.

    Raises:
        BadImage: a cell that does not decode, named by its row (0-based, in the split) and file.
    """
    out = []
    for row, cell in enumerate(cells):
        try:
            out.append(convert(_open(cell, folder)))
        except Exception as exc:  # noqa: BLE001 - PIL raises many kinds (UnidentifiedImageError, OSError, SyntaxError, ...)
            raise BadImage(f"{where}, row {row} ({_describe(cell)}): cannot decode the image: "
                           f"{type(exc).__name__}: {exc}") from None
    return out
