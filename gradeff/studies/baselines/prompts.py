"""Class prompts: ``"a photo of a"`` + a class's name, as token ids.

There is no tokenizer without real weights, so every class gets a deterministic synthetic
token-id sequence instead:

- the words are ordinary ids of the model's vocabulary, from :data:`FIRST_WORD` upwards, skipping
  the model's special ids (padding, BOS, EOS, image tokens);
- the prompt is words 0, 1, 2, 0 ("a", "photo", "of", "a");
- a class's name is :data:`NAME_TOKENS` words that write its index in base ``b = ⌈√K⌉`` (``K``
  classes): class ``c`` is ``(digit[c // b], digit[c % b])`` with ``digit[d]`` the word ``3 + d``.
  Every name has the same length, so no class is favoured by being shorter, and no two classes
  share a name.

With real weights and a tokenizer in a local folder (:func:`load_tokenizer`), the real class
names (:mod:`gradeff.studies.baselines.classnames`) are tokenized instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FIRST_WORD", "NAME_TOKENS", "PROMPT", "ClassTokens", "load_tokenizer", "synthetic_class_tokens",
    "synthetic_words", "tokenizer_class_tokens",
]

PROMPT = "a photo of a"
# Ids below this are special in every vocabulary of the suite (pad, mask, bos, sep; CLIP's and SigLIP's
# pad and EOS): synthetic words never use them.
FIRST_WORD = 4
NAME_TOKENS = 2
_PROMPT_WORDS = (0, 1, 2, 0)  # "a", "photo", "of", "a"
_DISTINCT_PROMPT_WORDS = 3
# Files of a tokenizer saved with save_pretrained (or shipped with a model on the hub).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass(frozen=True, slots=True)
class ClassTokens:
    """The prompt's token ids and every class's name ids, without special tokens.

    Attributes:
        prompt: ids of :data:`PROMPT`.
        names: per class, the ids of its name (at least one each).
        source: ``synthetic`` or ``tokenizer``.
    """

    prompt: tuple[int, ...]
    names: tuple[tuple[int, ...], ...]
    source: str

    def __post_init__(self):
        if not self.names or any(len(name) == 0 for name in self.names):
            raise ValueError("every class needs a name of at least one token")

    @property
    def num_classes(self) -> int:
        return len(self.names)

    def texts(self) -> list[tuple[int, ...]]:
        """Per class, prompt + name."""
        return [self.prompt + name for name in self.names]


def synthetic_words(vocab_size: int, reserved: Iterable[int] = ()) -> list[int]:
    """The ordinary ids of a vocabulary that synthetic prompts use, in increasing order."""
    skip = set(reserved)
    return [i for i in range(FIRST_WORD, vocab_size) if i not in skip]


def synthetic_class_tokens(num_classes: int, *, vocab_size: int, reserved: Iterable[int] = ()) -> ClassTokens:
    """Deterministic prompt and name ids of ``num_classes`` classes (see the module's docstring).

    Args:
        vocab_size: the model's vocabulary; every id is below it.
        reserved: the model's special ids, never used as words.

    Raises:
        ValueError: the vocabulary has too few ordinary ids for the prompt and the digits.
    """
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    base = max(2, math.ceil(num_classes ** (1 / NAME_TOKENS)))
    words = synthetic_words(vocab_size, reserved)
    if len(words) < _DISTINCT_PROMPT_WORDS + base:
        raise ValueError(f"a vocabulary of {vocab_size} ids has {len(words)} ordinary ids; {num_classes} classes "
                         f"need {_DISTINCT_PROMPT_WORDS + base}")
    digit = words[_DISTINCT_PROMPT_WORDS:_DISTINCT_PROMPT_WORDS + base]
    names = []
    for c in range(num_classes):
        places = [(c // base**p) % base for p in reversed(range(NAME_TOKENS))]
        names.append(tuple(digit[d] for d in places))
    return ClassTokens(prompt=tuple(words[i] for i in _PROMPT_WORDS), names=tuple(names), source="synthetic")


def tokenizer_class_tokens(tokenizer, class_names: Sequence[str], prompt: str = PROMPT) -> ClassTokens:
    """Prompt and name ids from a real tokenizer.

    A name's ids are those that follow the prompt's in ``prompt + " " + name`` (how the name is
    tokenized after the prompt, leading space included), or those of ``" " + name`` alone where the
    tokenizer does not keep the prompt's ids as a prefix.
    """

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompt_ids = encode(prompt)
    names = []
    for name in class_names:
        full = encode(f"{prompt} {name}")
        ids = full[len(prompt_ids):] if full[:len(prompt_ids)] == prompt_ids else []
        names.append(tuple(ids or encode(f" {name}")))
    return ClassTokens(prompt=tuple(prompt_ids), names=tuple(names), source="tokenizer")


def load_tokenizer(*folders: str | Path | None):
    """The tokenizer saved in the first of ``folders`` that holds one, or ``None``.

    Loading reads local files only (``local_files_only``), never the network.
    """
    for folder in folders:
        if folder is None:
            continue
        path = Path(folder)
        if path.is_dir() and any((path / name).is_file() for name in _TOKENIZER_FILES):
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(path, local_files_only=True)
    return None
