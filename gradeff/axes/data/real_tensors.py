"""A real source's columns as the suite's tensors: images resized to ``uint8``, labels as class ids or multi-hot
indicators, texts tokenised (a local ``AutoTokenizer``, or a byte-level BPE trained here and cached) into language
model windows or captions.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import MappingProxyType

from gradeff.axes.data.checksums import read_checked, write_checked
from gradeff.axes.data.image_rows import decode_images
from gradeff.axes.data.real_sources import DataSource

__all__ = ["BPE_VOCAB", "PREP_VERSION", "SPECIAL_TOKENS", "Tokenizer", "cache_key", "caption_tensors", "label_ids",
           "lm_chunks", "nonempty_texts", "to_uint8_images"]

# Bump when the prepared tensors change meaning: old cache entries are then never read.
# 3: a validation split beside the training and test splits.
# 4: files written with a checksum (gradeff.axes.data.checksums); unchecked ones of version 3 are never read.
PREP_VERSION = 4
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")
# Byte-level BPE vocabulary trained when no tokenizer folder is given, per profile: big enough to hold the 256 bytes
# and common words, small enough for the profile's embedding. At tiny, the bytes alone (no merge): a tiny model's
# few hundred steps over some 30,000 training tokens see each byte hundreds of times and learn what follows it,
# where a 512-token BPE's merges came a few dozen times each and the model stayed on the unigram's plateau.
BPE_VOCAB = MappingProxyType({"tiny": 256 + len(SPECIAL_TOKENS), "small": 4096, "paper": 32000})


def cache_key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _to_uint8(image, size: int):
    """An image (PIL, array) → ``(3, size, size)`` uint8, resized with antialiased bilinear interpolation."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    if hasattr(image, "convert"):
        array = np.asarray(image.convert("RGB"))
    else:
        array = np.asarray(image)
        if array.ndim == 2:
            array = np.repeat(array[..., None], 3, axis=2)
        elif array.ndim == 3 and array.shape[0] in (1, 3) and array.shape[2] not in (1, 3):
            array = array.transpose(1, 2, 0)
        if array.shape[2] == 1:
            array = np.repeat(array, 3, axis=2)
    pixels = torch.tensor(array).permute(2, 0, 1).float()[None]
    if pixels.shape[-2:] != (size, size):
        pixels = F.interpolate(pixels, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return pixels[0].round().clamp(0, 255).to(torch.uint8)


def to_uint8_images(cells: list, size: int, *, where: str, folder: Path | None = None):
    """An image column's cells (see :func:`undecoded_column`) → ``(N, 3, size, size)`` uint8; a cell that does
    not decode raises :class:`BadImage` naming its row and file."""
    import torch

    images = decode_images(cells, where=where, folder=folder, convert=lambda image: _to_uint8(image, size))
    return torch.stack(images) if images else torch.empty((0, 3, size, size), dtype=torch.uint8)


def _multi_hot(splits, column: str):
    """Several labels per row (MM-IMDb's genres): ``(N, K)`` uint8 indicators of the sorted distinct labels, per
    split, and the label names."""
    import torch

    rows = [[list(v or ()) for v in split[column]] for split in splits]
    names = sorted({label for split in rows for row in split for label in row}, key=str)
    index = {name: i for i, name in enumerate(names)}

    def encode(split):
        out = torch.zeros((len(split), len(names)), dtype=torch.uint8)
        for i, row in enumerate(split):
            out[i, [index[label] for label in row]] = 1
        return out

    return (*(encode(split) for split in rows), [str(n) for n in names])


def label_ids(splits, column: str):
    """Labels of every split and the class names: integer ids (a ClassLabel's, else the sorted distinct values),
    or multi-hot indicators when a row holds a list of labels. Returns one tensor per split, then the names."""
    import datasets
    import torch

    feature = splits[0].features[column]
    if isinstance(feature, datasets.ClassLabel):
        return (*(torch.tensor(split[column]) for split in splits), list(feature.names))
    values = [v for split in splits for v in split[column]]
    if any(isinstance(v, (list, tuple)) for v in values):
        return _multi_hot(splits, column)
    if any(isinstance(v, dict) or v is None for v in values):
        raise ValueError(f"label column {column!r} holds empty or dict values; classification needs an int, a string "
                         f"or a list of them per row")
    names = sorted(set(values), key=lambda v: (isinstance(v, str), v))
    if all(isinstance(v, int) for v in names) and names[0] >= 0:
        names = list(range(max(names) + 1))
    index = {name: i for i, name in enumerate(names)}
    return (*(torch.tensor([index[v] for v in split[column]]) for split in splits), [str(n) for n in names])


def nonempty_texts(split, column: str) -> list[str]:
    return [t for t in split[column] if isinstance(t, str) and t.strip()]


class Tokenizer:
    """One interface over a local ``AutoTokenizer`` and a BPE trained here: ids, special ids, vocabulary size."""

    def __init__(self, source: DataSource, train_texts: list[str], vocab_size: int, cache_root: Path, fingerprint):
        if source.tokenizer:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(source.tokenizer, local_files_only=not source.allow_hub)
            self.encode = lambda texts: tok(texts, add_special_tokens=False)["input_ids"]
            self.bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
            self.eos = tok.eos_token_id if tok.eos_token_id is not None else self.bos
            self.pad = tok.pad_token_id if tok.pad_token_id is not None else self.eos
            self.vocab_size = len(tok)
            self.name = f"AutoTokenizer {source.tokenizer}"
            if self.bos is None:
                raise ValueError(f"tokenizer {source.tokenizer} has neither a BOS nor an EOS token")
            return
        tok = _bpe(train_texts, vocab_size, cache_root, fingerprint)
        self.encode = lambda texts: [e.ids for e in tok.encode_batch(texts)]
        self.pad, self.bos, self.eos = (tok.token_to_id(s) for s in SPECIAL_TOKENS)
        self.vocab_size = tok.get_vocab_size()
        self.name = f"byte-level BPE ({self.vocab_size} tokens) trained on the training split"


def _bpe(texts: list[str], vocab_size: int, cache_root: Path, fingerprint):
    """A byte-level BPE trained on ``texts``, cached (with its checksum) by the training data's fingerprint and the
    vocabulary size."""
    from filelock import FileLock
    from tokenizers import Tokenizer

    path = cache_root / "data" / "tokenizers" / f"bpe-{cache_key(fingerprint, vocab_size, PREP_VERSION)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        # tokenizers raises a bare Exception for a file it cannot parse.
        tok = read_checked(path, lambda file: Tokenizer.from_file(str(file)), errors=(Exception,))
        if tok is None:
            tok = _train_bpe(texts, vocab_size)
            write_checked(path, lambda temporary: tok.save(str(temporary)), best_effort=True)
    return tok


def _train_bpe(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def lm_chunks(ids: list[list[int]], eos: int, seq_len: int, cap: int):
    """Documents joined with EOS and cut into ``seq_len`` windows; at most ``cap`` of them, spread evenly."""
    import torch

    stream = [token for doc in ids for token in (*doc, eos)]
    count = len(stream) // seq_len
    if count == 0:
        raise ValueError(f"{len(stream)} tokens make no window of {seq_len}")
    windows = torch.tensor(stream[:count * seq_len]).view(count, seq_len)
    if count > cap:
        # Evenly spaced windows cover the whole text rather than its first documents only.
        windows = windows[torch.linspace(0, count - 1, cap).round().long()]
    return windows


def caption_tensors(ids: list[list[int]], tok: Tokenizer, caption_len: int):
    """``[BOS, t1..tL]`` inputs padded to ``caption_len + 1``, labels ignoring BOS and padding."""
    import torch

    from gradeff.axes.data.dataset import IGNORE_INDEX  # noqa: PLC0415 - torch, 2.3 s: the plugin imports this module

    n = len(ids)
    input_ids = torch.full((n, caption_len + 1), tok.pad, dtype=torch.long)
    labels = torch.full((n, caption_len + 1), IGNORE_INDEX, dtype=torch.long)
    input_ids[:, 0] = tok.bos
    for i, doc in enumerate(ids):
        doc = [*doc[:caption_len - 1], tok.eos][:caption_len]
        input_ids[i, 1:len(doc) + 1] = torch.tensor(doc)
        labels[i, 1:len(doc) + 1] = torch.tensor(doc)
    return input_ids, labels


