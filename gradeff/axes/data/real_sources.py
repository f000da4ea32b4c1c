"""What a real data source is: the datasets the suite knows (their kind and usual columns), the roles a task
reads from a row, a source given on the command line, and which source a task trains on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["BUILTIN", "KNOWN", "ROLES", "SUPPORTED_FORMATS", "SYNTHETIC_TOO", "DataSource", "KnownData",
           "parse_columns", "parse_sources", "source_for"]

# What each kind of task reads from a row.
ROLES = MappingProxyType({
    "image_classification": ("image", "label"),
    "causal_lm": ("text",),
    "image_captioning": ("image", "text"),
})

SUPPORTED_FORMATS = (
    "a folder written by save_to_disk",
    "an imagefolder (one sub-folder of images per class, optionally under train/ and test/)",
    "a folder of parquet, csv, json/jsonl or txt files (split by file name: train*, test*, validation*)",
    "one .parquet, .csv, .json, .jsonl or .txt file",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class KnownData:
    """A dataset the suite knows: its kind and where its columns usually are.

    Attributes:
        columns: role → the column names tried in order (the first present is used).
        builtin: for data every machine has, the function that writes it (``None``: the user gives a path).
    """

    key: str
    name: str
    kind: str
    columns: MappingProxyType
    builtin: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "columns", MappingProxyType(dict(self.columns)))


_IMAGE_LABEL = {"image": ("image", "img", "pixel_values"), "label": ("label", "labels", "fine_label")}
KNOWN: MappingProxyType = MappingProxyType({spec.key: spec for spec in (
    # uoft-cs/cifar100 on the hub names its columns img / fine_label (coarse_label is the 20 super-classes).
    KnownData(key="cifar100", name="CIFAR-100", kind="image_classification",
              columns={"image": ("img", "image"), "label": ("fine_label", "label")}),
    KnownData(key="dtd", name="DTD (Describable Textures)", kind="image_classification", columns=_IMAGE_LABEL),
    # The main paper's VLM task: the poster captioned with its plot.
    KnownData(key="mmimdb", name="MM-IMDb (poster → plot)", kind="image_captioning",
              columns={"image": ("image", "poster", "img"), "text": ("plot", "text", "caption")}),
    # The same copy read as multi-label classification: a poster's genres (several per film).
    KnownData(key="mmimdb_genres", name="MM-IMDb (poster → genres)", kind="image_classification",
              columns={"image": ("image", "poster", "img"), "label": ("genres", "genre", "labels", "label")}),
    KnownData(key="images", name="Local images", kind="image_classification", columns=_IMAGE_LABEL),
    KnownData(key="text", name="Local text", kind="causal_lm", columns={"text": ("text", "content")}),
    KnownData(key="digits", name="Digits (scikit-learn, real)", kind="image_classification",
              columns={"image": ("image",), "label": ("label",)}, builtin="_write_digits"),
    KnownData(key="pydoc", name="Python docs topics (real English text)", kind="causal_lm",
              columns={"text": ("text",)}, builtin="_write_pydoc"),
)})
BUILTIN = tuple(key for key, spec in KNOWN.items() if spec.builtin)


@dataclass(frozen=True, slots=True, kw_only=True)
class DataSource:
    """Where one task's real data is, and how to read it.

    Attributes:
        key: the task key it replaces or fills (``cifar100``, ``images``, ``text`` ...).
        path: the local dataset (see :data:`SUPPORTED_FORMATS`).
        columns: ``(role, column)`` overrides of the key's usual columns.
        tokenizer: a local folder ``AutoTokenizer`` reads (``None``: a BPE trained on the training split).
        allow_hub: let ``datasets`` and ``transformers`` reach the hub (off: no network call is made).
    """

    key: str
    path: str
    columns: tuple[tuple[str, str], ...] = ()
    tokenizer: str | None = None
    allow_hub: bool = False

    @property
    def spec(self) -> KnownData:
        return KNOWN[self.key]


def parse_sources(items: Iterable[str]) -> dict[str, str]:
    """``KEY=PATH`` items → {key: path}; a bad item raises ``ValueError`` naming it and the valid keys."""
    sources: dict[str, str] = {}
    for item in items:
        key, sep, path = item.partition("=")
        key = key.strip()
        if not sep or not path.strip():
            raise ValueError(f"{item!r}: expected KEY=PATH (keys: {', '.join(k for k in KNOWN if k not in BUILTIN)})")
        if key not in KNOWN or key in BUILTIN:
            raise ValueError(f"unknown data key {key!r}; valid keys: {', '.join(k for k in KNOWN if k not in BUILTIN)}")
        if key in sources:
            raise ValueError(f"{key} is given twice")
        sources[key] = path.strip()
    return sources


def parse_columns(items: Iterable[str]) -> dict[str | None, dict[str, str]]:
    """``[KEY:]ROLE=COLUMN,...`` items → {key or None (every source): {role: column}}."""
    roles = sorted({role for kind_roles in ROLES.values() for role in kind_roles})
    parsed: dict[str | None, dict[str, str]] = {}
    for item in items:
        key, colon, rest = item.partition(":")
        if not colon:
            key, rest = None, item
        elif key not in KNOWN:
            raise ValueError(f"{item!r}: unknown data key {key!r}; valid keys: {', '.join(KNOWN)}")
        for pair in rest.split(","):
            role, sep, column = (part.strip() for part in pair.partition("="))
            if not sep or not column or role not in roles:
                raise ValueError(f"{pair.strip()!r}: expected ROLE=COLUMN with a role among {', '.join(roles)}")
            parsed.setdefault(key, {})[role] = column
    return parsed


def source_for(task: str, given: Iterable[DataSource]) -> DataSource | None:
    """The real data a task trains on: a given source, else the built-in data, else ``None`` (synthetic).

    Raises:
        ValueError: a task that only exists as real data (``images``, ``text``, ``mmimdb``) without a path.
    """
    for source in given:
        if source.key == task:
            return source
    if task in BUILTIN:
        return DataSource(key=task, path="")
    if task in KNOWN and task not in SYNTHETIC_TOO:
        raise ValueError(f"the {task!r} task needs a local copy: --gradeff-data {task}=PATH")
    return None


# Keys that are also synthetic tasks, used when no path is given.
SYNTHETIC_TOO = ("cifar100", "dtd")

