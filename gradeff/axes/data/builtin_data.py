"""The real datasets every machine has (scikit-learn's digits, Python's help topics), written on first use into
files ``datasets`` reads like any other, each kept with its sha256 and written again where it does not match.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path
from pydoc_data.topics import topics

from gradeff.axes.data.checksums import sidecar, verify, warn_rebuilt, write_checked
from gradeff.axes.data.real_sources import KNOWN

__all__ = ["builtin_path"]

# Where the built-in datasets are written: a folder of their own per layout, so a copy written before checksums
# (which has none) is never taken for one cut short.
_BUILTIN_FOLDER = "builtin-2"


def builtin_path(key: str, cache_root: Path) -> Path:
    """The built-in dataset on disk, written on first use (a file ``datasets`` reads like any other), checked
    against its sha256 on every use and written again, with a warning naming it, where it does not match."""
    folder = cache_root / "data" / _BUILTIN_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    return globals()[KNOWN[key].builtin](folder)


def _checked_file(path: Path, write) -> Path:
    """``path`` as a cache file with its checksum (:func:`gradeff.axes.data.checksums.write_checked`): kept where it is
    sound, else written by ``write(temporary)``, a damaged copy warned about by name first.

    Concurrent workers share it through a file lock: the first writes it, the others find it sound. It is never
    rewritten while sound: its mtime is part of the prepared tensors' cache key (the files' fingerprint in
    :mod:`gradeff.axes.data.real`).
    """
    from filelock import FileLock

    with FileLock(str(path) + ".lock"):
        if path.exists() or sidecar(path).exists():
            problem = verify(path)
            if problem is None:
                return path
            warn_rebuilt(path, problem)
        write_checked(path, write)
    return path


def _write_digits(folder: Path) -> Path:
    """scikit-learn's 1,797 8×8 handwritten digits (0–16 levels) as a parquet file of PNG images + labels."""

    def write(tmp: Path) -> None:
        import datasets
        import numpy as np
        from PIL import Image

        pixels, labels = _bundled_digits()
        images = [Image.fromarray((image * 255 / 16).round().astype(np.uint8), mode="L") for image in pixels]
        features = datasets.Features({"image": datasets.Image(),
                                      "label": datasets.ClassLabel(names=[str(d) for d in range(10)])})
        datasets.Dataset.from_dict({"image": images, "label": labels.tolist()},
                                   features=features).to_parquet(str(tmp))

    return _checked_file(folder / "digits.parquet", write)


def _bundled_digits():
    """scikit-learn's digits as ``load_digits`` reads them (``(1797, 8, 8)`` pixels 0–16, ``(1797,)`` labels),
    from the file the package ships, without importing scikit-learn: its import takes ~5 s, more than the rest of
    a real-data cell, in every process that writes the file."""
    import numpy as np

    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the digits dataset ships with scikit-learn: pip install scikit-learn")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt", encoding="utf-8") as rows:
        data = np.loadtxt(rows, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def _write_pydoc(folder: Path) -> Path:
    """The English help topics that ship with Python (``pydoc_data.topics``), one JSON line per topic."""

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as out:
            for name in sorted(topics):
                out.write(json.dumps({"topic": name, "text": topics[name]}) + "\n")

    return _checked_file(folder / "pydoc_topics.jsonl", write)

