"""Real data through Hugging Face datasets: every format on disk, the checks before any cell, no network, and tiny
cells that learn on scikit-learn's digits and Python's help text."""

import fnmatch
import json
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

datasets = pytest.importorskip("datasets")
from PIL import Image

from gradeff.axes.data import builtin_data, real, real_sources
from gradeff.axes.data.real import load_real, validate_source
from gradeff.axes.data.real_sources import DataSource
from gradeff.cell.config import RunConfig
from gradeff.cell.run import run_cell
from gradeff.records.results import EpochRecord, Summary
from gradeff.studies.grid import Cell
from gradeff.studies.hparams import largest_caps

PLUGIN = ("-p", "gradeff.pytest_plugin")


def _pattern_image(label: int, rng: np.random.Generator, size=(12, 12)) -> Image.Image:
    """A class-dependent bright quadrant plus noise: learnable in a few steps."""
    pixels = rng.integers(0, 60, (*size, 3), dtype=np.uint8)
    half = size[0] // 2
    row, col = divmod(label % 4, 2)
    pixels[row * half:(row + 1) * half, col * half:(col + 1) * half] += 180
    return Image.fromarray(pixels)


def _image_rows(n: int, classes: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    labels = [int(i % classes) for i in range(n)]
    return {"image": [_pattern_image(label, rng) for label in labels], "label": labels}


def _features(classes: int):
    return datasets.Features({"image": datasets.Image(),
                              "label": datasets.ClassLabel(names=[f"c{i}" for i in range(classes)])})


_TEXT = ("The quick brown fox jumps over the lazy dog. " * 4 + "Numbers are written one two three four. ") * 3


def _image_folder(root: Path, sizes: dict[str, int], classes: int, *, seed: int) -> Path:
    """An imagefolder: ``root/<split>/class<k>/<i>.png``, image ``i`` of each split in class ``i mod classes``."""
    rng = np.random.default_rng(seed)
    for split, n in sizes.items():
        for i in range(n):
            folder = root / split / f"class{i % classes}"
            folder.mkdir(parents=True, exist_ok=True)
            _pattern_image(i % classes, rng).save(folder / f"{i}.png")
    return root


def _write_formats(root: Path) -> dict[str, tuple[str, Path]]:
    """One small dataset per supported format: key → (task key, path)."""
    out = {}
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(_image_rows(64, 4, 0), features=_features(4)),
                               "test": datasets.Dataset.from_dict(_image_rows(16, 4, 1), features=_features(4))})
    dd.save_to_disk(str(root / "saved"))
    out["save_to_disk"] = ("images", root / "saved")
    out["imagefolder"] = ("images", _image_folder(root / "imagefolder", {"train": 64, "test": 16}, 4, seed=2))
    datasets.Dataset.from_dict(_image_rows(80, 4, 3), features=_features(4)).to_parquet(str(root / "images.parquet"))
    out["parquet"] = ("images", root / "images.parquet")
    # A dataset repository's snapshot in the local hub cache: parquet shards named by split, in a sub-folder.
    (root / "snapshot" / "plain_text").mkdir(parents=True)
    for split, n, seed in (("train", 64, 4), ("test", 16, 5)):
        datasets.Dataset.from_dict(_image_rows(n, 4, seed), features=_features(4)).to_parquet(
            str(root / "snapshot" / "plain_text" / f"{split}-00000-of-00001.parquet"))
    out["hub snapshot"] = ("images", root / "snapshot")
    docs = [f"{_TEXT} Document {i}." for i in range(40)]
    datasets.Dataset.from_dict({"text": docs}).to_csv(str(root / "docs.csv"))
    out["csv"] = ("text", root / "docs.csv")
    (root / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    out["jsonl"] = ("text", root / "docs.jsonl")
    (root / "docs.txt").write_text("\n".join(docs))
    out["txt"] = ("text", root / "docs.txt")
    (root / "textdir").mkdir()
    (root / "textdir" / "train.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[:32]))
    (root / "textdir" / "test.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[32:]))
    out["json folder"] = ("text", root / "textdir")
    return out


@pytest.fixture(scope="module")
def formats(tmp_path_factory) -> dict[str, tuple[str, Path]]:
    return _write_formats(tmp_path_factory.mktemp("formats"))


def _cell(model: str, dataset: str, source: DataSource | None, cache: Path, **config):
    cell = Cell(model, "adamw", "standard", dataset=dataset, grid="main")
    # The shared rate unless a test says otherwise: these tests read data, and under the tuned protocol a cell on
    # given data searches its own rate first (tests/cell/test_self_tune.py).
    return run_cell(cell, RunConfig(data=(source,) if source else (), cache_dir=str(cache),
                                    **({"protocol": "shared"} | config)))


@pytest.mark.parametrize("fmt", ["save_to_disk", "imagefolder", "parquet", "hub snapshot", "csv", "jsonl", "txt",
                                 "json folder"])
@pytest.mark.slow
def test_every_format_trains_a_tiny_cell(formats, fmt, tmp_path):
    """Each format is read by datasets alone and a tiny cell trains on it, with data-wait seconds recorded."""
    key, path = formats[fmt]
    record = _cell("vit" if key == "images" else "llm", key, DataSource(key=key, path=str(path)), tmp_path, epochs=1)
    assert record.status == "ok", record.detail
    assert record.loss_floor is None and record.task["loss_floor"] is None
    assert record.task["info"]["real"] and record.task["info"]["source"] == str(path)
    epoch = record.epochs[0]
    assert 0 < epoch.data_seconds < epoch.seconds
    assert record.summary.data_fraction == pytest.approx(epoch.data_seconds / epoch.seconds)
    assert epoch.heldout_accuracy is not None
    if key == "images":
        assert record.hparams["num_classes"] == 4
        expected = "the dataset's own 'test' split" if fmt != "parquet" else "20% of 'train' held out"
        assert record.task["info"]["heldout_split"].startswith(expected)


def test_prepared_tensors_are_cached_and_reused(formats, tmp_path):
    """The second load reads the cached file (memory-mapped), not the dataset, and gives the same tensors."""
    source = DataSource(key="images", path=str(formats["parquet"][1]))
    settings = {"kind": "image_classification", "image_size": 16, "train_cap": 32, "heldout_cap": 8,
                "cache_root": tmp_path}
    first, second = load_real(source, **settings), load_real(source, **settings)
    assert (first.info["cache"], second.info["cache"]) == ("miss", "hit")
    assert torch.equal(first.tensors["pixel_values"], second.tensors["pixel_values"])
    batch = second.batch(torch.arange(4))
    assert batch["pixel_values"].dtype == torch.float32 and batch["pixel_values"].shape == (4, 3, 16, 16)
    assert -1.0 <= float(batch["pixel_values"].min()) and float(batch["pixel_values"].max()) <= 1.0
    assert len(list((tmp_path / "data" / "prepared").glob("*.pt"))) == 1


def test_a_built_file_is_written_once_and_kept_while_sound(tmp_path):
    """The built-in datasets are written by whichever worker takes the lock first, with their checksum; a later caller
    finds the file sound and never writes it again (its mtime is part of the prepared tensors' cache key), and no
    temporary is left behind."""
    target = tmp_path / "digits.parquet"
    assert builtin_data._checked_file(target, lambda tmp: tmp.write_bytes(b"first")) == target
    mtime = target.stat().st_mtime_ns
    assert builtin_data._checked_file(target, lambda tmp: pytest.fail("a sound file is not written again")) == target
    assert target.read_bytes() == b"first" and target.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits.parquet", "digits.parquet.lock",
                                                          "digits.parquet.sha256"]


def test_no_network_call_is_attempted(formats, tmp_path, monkeypatch):
    """With the hub disabled, reading every format (and the built-in data) never opens a connection."""
    attempts = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(address)
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: refuse(None, address))
    for key, path in formats.values():
        source = DataSource(key=key, path=str(path))
        kind = "image_classification" if key == "images" else "causal_lm"
        load_real(source, kind=kind, image_size=8, seq_len=16, train_cap=8, heldout_cap=4, vocab_size=300,
                  cache_root=tmp_path)
    for key in real_sources.BUILTIN:
        validate_source(DataSource(key=key, path=""), tmp_path)
    assert attempts == []


def test_bad_sources_are_named_with_the_valid_choices(formats, tmp_path):
    """Missing path, unsupported format, wrong column, empty split, no train split: the message says what and why."""
    (tmp_path / "table.xlsx").write_text("x")
    (tmp_path / "sheets").mkdir()
    (tmp_path / "sheets" / "train.xlsx").write_text("x")
    rows = datasets.Dataset.from_dict(_image_rows(8, 4, 0), features=_features(4))
    (tmp_path / "empty_test").mkdir()
    rows.to_parquet(str(tmp_path / "empty_test" / "train.parquet"))
    rows.select([]).to_parquet(str(tmp_path / "empty_test" / "test.parquet"))
    only_val = datasets.DatasetDict({"dev": datasets.Dataset.from_dict({"text": ["a b c"]})})
    only_val.save_to_disk(str(tmp_path / "no_train"))
    cases = [
        (DataSource(key="images", path=str(tmp_path / "absent")), "*absent: no such file or folder"),
        (DataSource(key="images", path=str(tmp_path / "table.xlsx")),
         "*unsupported format '.xlsx'; supported formats: a folder written by save_to_disk*.parquet*"),
        (DataSource(key="images", path=str(tmp_path / "sheets")),
         "*sheets: no data files datasets can read (No (supported) data files found*); supported formats: *"),
        (DataSource(key="images", path=str(formats["parquet"][1]), columns=(("image", "img"),)),
         "*column 'img' (given for image) is not in the dataset; columns: image, label"),
        (DataSource(key="text", path=str(formats["parquet"][1])),
         ("*no text column (tried text, content); columns: image, label; "
          "name it with --gradeff-data-columns text:text=*")),
        (DataSource(key="images", path=str(tmp_path / "empty_test")), "*the 'test' split is empty"),
        (DataSource(key="text", path=str(tmp_path / "no_train")), "*no 'train' split; splits: dev"),
    ]
    for source, message in cases:
        with pytest.raises(ValueError) as caught:
            validate_source(source, tmp_path)
        assert fnmatch.fnmatch(str(caught.value), message), str(caught.value)
    with pytest.raises(ValueError, match="unknown data key 'imagenet'; valid keys: cifar100, dtd, mmimdb"):
        real_sources.parse_sources(["imagenet=/x"])
    with pytest.raises(ValueError, match="expected ROLE=COLUMN with a role among image, label, text"):
        real_sources.parse_columns(["cifar100:colour=c"])


def test_option_errors_stop_the_session_before_any_cell(pytester, formats, tmp_path):
    """--gradeff-data problems are usage errors at session start, naming the option, the source and the problem."""
    grid = Path(__file__).parents[3] / "benchmarks" / "test_real_grid.py"
    pytester.makepyfile(test_real_grid=grid.read_text())
    cache = f"--gradeff-cache={tmp_path}"
    cases = [
        ((f"--gradeff-data=cifar100={tmp_path / 'nowhere'}",),
         "*--gradeff-data cifar100=*nowhere: *no such file or folder*"),
        (("--gradeff-data=imagenet=/x",), "*--gradeff-data: unknown data key 'imagenet'; valid keys: cifar100, dtd*"),
        ((f"--gradeff-data=images={formats['parquet'][1]}", "--gradeff-data-columns=images:label=fine"),
         "*--gradeff-data images=*column 'fine' (given for label) is not in the dataset; columns: image, label*"),
        (("--gradeff-datasets=images",),
         "*--gradeff-datasets images: real data only; give --gradeff-data images=PATH*"),
    ]
    for args, message in cases:
        outcome = pytester.runpytest(*PLUGIN, cache, *args)
        assert outcome.ret == pytest.ExitCode.USAGE_ERROR, args
        assert any(fnmatch.fnmatch(line, message) for line in outcome.errlines + outcome.outlines), outcome.errlines


def test_old_epoch_records_without_data_seconds_still_read():
    epoch = EpochRecord(epoch=0, loss=1.0, seconds=1.0, optimizer_steps=1, closure_calls=1, samples=8, targets=8)
    assert epoch.data_seconds is None and Summary.of([epoch], 1.0).data_fraction is None


@pytest.mark.slow
def test_tiny_vit_learns_digits_and_tiny_llm_learns_python_help_text(tmp_path):
    """The real data every machine has, at the default profile and rate: the ViT reaches 90 % test accuracy on the
    digits (a logistic regression on their pixels: 97 %), the LLM's test loss on the help text lies below a bigram
    count's of the same training split (gradeff.axes.data.trivial), over the very windows the cell was scored on."""
    from gradeff.axes.data.trivial import trivial_baselines
    from gradeff.cell.plan import cell_data, plan_cell

    torch.set_num_threads(1)
    vit = _cell("vit", "digits", None, tmp_path)
    assert vit.status == "ok", vit.detail
    assert vit.hparams["image_size"] == 8  # the digits' own size, no resampling
    assert vit.summary.final_heldout_accuracy >= 0.9, vit.summary.final_heldout_accuracy
    llm = _cell("llm", "pydoc", None, tmp_path)
    assert llm.status == "ok", llm.detail
    cell, config = Cell("llm", "adamw", "standard", dataset="pydoc", grid="main"), RunConfig(cache_dir=str(tmp_path))
    data, _ = cell_data(plan_cell(cell, config))
    assert len(data.heldout) == llm.task["heldout_samples"]
    bigram = trivial_baselines(data, "causal_lm")["bigram"]["value"]
    assert llm.summary.final_heldout_loss < bigram - 0.1, (llm.summary.final_heldout_loss, bigram)


def _cifar_shaped(root: Path) -> Path:
    """CIFAR-100's layout on the hub: img (32×32 RGB), fine_label (100 names), coarse_label; train and test."""
    rng = np.random.default_rng(5)
    features = datasets.Features({"img": datasets.Image(),
                                  "fine_label": datasets.ClassLabel(names=[f"fine{i}" for i in range(100)]),
                                  "coarse_label": datasets.ClassLabel(names=[f"coarse{i}" for i in range(20)])})

    def rows(n):
        fine = rng.integers(0, 100, n)
        return {"img": [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(n)],
                "fine_label": fine.tolist(), "coarse_label": (fine // 5).tolist()}

    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows(300), features=features),
                          "test": datasets.Dataset.from_dict(rows(100), features=features)}).save_to_disk(str(root))
    return root


def _mmimdb_shaped(root: Path) -> Path:
    """MM-IMDb's fields: a poster (portrait, sizes vary), the plot, the genres (several per film), an id."""
    rng = np.random.default_rng(6)
    genres = ["Drama", "Comedy", "Romance", "Thriller", "Action", "Horror"]
    root.mkdir(parents=True)
    for split, n in (("train", 200), ("test", 50)):
        rows = {"poster": [Image.fromarray(rng.integers(0, 256, (int(rng.integers(40, 60)), 27, 3), dtype=np.uint8))
                           for _ in range(n)],
                "plot": [f"A {rng.choice(genres).lower()} about {rng.choice(['a detective', 'two friends', 'a town'])} "
                         f"who {rng.choice(['find love', 'lose everything', 'solve a crime'])}." for _ in range(n)],
                "genres": [sorted(set(rng.choice(genres, 2).tolist())) for _ in range(n)],
                "imdb_id": [f"tt{i:07d}" for i in range(n)]}
        datasets.Dataset.from_dict(rows, features=datasets.Features({
            "poster": datasets.Image(), "plot": datasets.Value("string"),
            "genres": datasets.Sequence(datasets.Value("string")), "imdb_id": datasets.Value("string"),
        })).to_parquet(str(root / f"{split}.parquet"))
    return root


@pytest.mark.slow
def test_cifar100_and_mmimdb_shaped_copies_train(tmp_path):
    """A local CIFAR-100 replaces the synthetic stand-in (100 classes from the data); MM-IMDb captions posters."""
    cifar = _cell("vit", "cifar100", DataSource(key="cifar100", path=str(_cifar_shaped(tmp_path / "cifar100"))),
                  tmp_path, epochs=1)
    assert cifar.status == "ok", cifar.detail
    assert cifar.hparams["num_classes"] == 100 and cifar.task["info"]["columns"] == {"image": "img",
                                                                                      "label": "fine_label"}
    assert cifar.task["info"]["heldout_split"] == "the dataset's own 'test' split" and cifar.loss_floor is None
    mmimdb_path = str(_mmimdb_shaped(tmp_path / "mmimdb"))
    mmimdb = _cell("vlm", "mmimdb", DataSource(key="mmimdb", path=mmimdb_path), tmp_path, epochs=2)
    assert mmimdb.status == "ok", mmimdb.detail
    assert mmimdb.task["info"]["columns"] == {"image": "poster", "text": "plot"}
    assert mmimdb.summary.final_loss < mmimdb.summary.first_loss
    genres = _cell("vit", "mmimdb_genres", DataSource(key="mmimdb_genres", path=mmimdb_path), tmp_path, epochs=1)
    assert genres.status == "ok", genres.detail
    assert genres.hparams["num_classes"] == 6 and genres.task["info"]["multi_label"]
    epoch = genres.epochs[0]
    assert epoch.heldout_accuracy is None and 0 <= epoch.heldout_f1_macro <= 1 and 0 <= epoch.heldout_f1_micro <= 1


def test_f1_counts():
    """Micro-F1 pools every decision; macro-F1 averages the labels' own F1, a label never true nor predicted being 1."""
    from gradeff.cell.evaluation import _f1

    # label 0: tp 2 fp 0 fn 0 (F1 1); label 1: tp 0 fp 1 fn 1 (F1 0); label 2: nothing (F1 1).
    counts = torch.tensor([[2, 0, 0], [0, 1, 0], [0, 1, 0]])
    scores = _f1(counts)
    assert scores["f1_micro"] == pytest.approx(4 / 6) and scores["f1_macro"] == pytest.approx(2 / 3)


def test_a_local_tokenizer_folder_sets_the_vocabulary(formats, tmp_path):
    """--gradeff-tokenizer: an AutoTokenizer folder read with local files only; the model's vocabulary follows it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([_TEXT], trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>", "<s>", "</s>"]))
    folder = tmp_path / "tokenizer"
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                            unk_token="<unk>").save_pretrained(str(folder))
    key, path = formats["jsonl"]
    record = _cell("llm", key, DataSource(key=key, path=str(path), tokenizer=str(folder)), tmp_path, epochs=1)
    assert record.status == "ok", record.detail
    info = record.task["info"]
    assert info["tokenizer"] == f"AutoTokenizer {folder}" and info["vocab_size"] == tok.get_vocab_size()
    from gradeff.axes.models import build_model

    expected = build_model("llm", "tiny", vocab_size=tok.get_vocab_size(), device="meta")
    assert record.parameters["total"] == sum(p.numel() for p in expected.parameters())


def test_short_text_rows_still_fill_the_windows(tmp_path):
    """One short sentence per row: enough rows are read to fill the asked number of windows."""
    path = tmp_path / "lines.txt"
    path.write_text("\n".join(f"line {i} says hello." for i in range(400)))
    data = load_real(DataSource(key="text", path=str(path)), kind="causal_lm", seq_len=16, vocab_size=300,
                     train_cap=12, heldout_cap=4, cache_root=tmp_path)
    assert (len(data), len(data.heldout)) == (12, 4)


def _png(image: Image.Image) -> bytes:
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _pandas_parquet(path: Path, n: int, corrupt_row: int | None = None) -> Path:
    """An image parquet as pandas writes one: the image column holds plain {bytes, path} structs, no datasets
    features."""
    import pandas as pd

    rng = np.random.default_rng(7)
    images = [{"bytes": _png(_pattern_image(i % 4, rng)), "path": f"img{i}.png"} for i in range(n)]
    if corrupt_row is not None:
        images[corrupt_row]["bytes"] = images[corrupt_row]["bytes"][:40]  # a PNG cut short
    pd.DataFrame({"image": images, "label": [i % 4 for i in range(n)]}).to_parquet(path)
    return path


def test_a_pandas_written_image_parquet_trains(tmp_path):
    """{bytes, path} image structs (pandas' df.to_parquet) are decoded like datasets' own Image column."""
    source = DataSource(key="images", path=str(_pandas_parquet(tmp_path / "pandas.parquet", 80)))
    found = validate_source(source, tmp_path, largest_caps(source.key, "tiny"))
    assert found["images_decoded"] == 80  # 64 training + 16 held-out rows
    record = _cell("vit", "images", source, tmp_path, epochs=1)
    assert record.status == "ok", record.detail
    assert record.hparams["num_classes"] == 4


def test_a_corrupt_image_is_named_by_file_and_row(tmp_path):
    """A PNG cut short in row 5 of a pandas parquet: validation names the split, the row and the file; so does a
    cell that reads it anyway (the per-row guard of every decode)."""
    source = DataSource(key="images", path=str(_pandas_parquet(tmp_path / "bad.parquet", 40, corrupt_row=5)))
    with pytest.raises(ValueError) as caught:
        validate_source(source, tmp_path, largest_caps(source.key, "tiny"))
    assert "row " in str(caught.value) and "(file img5.png): cannot decode the image: " in str(caught.value)
    assert str(caught.value).startswith(f"images={tmp_path / 'bad.parquet'}, the ")
    validate_source(source, tmp_path)  # without a profile: splits and columns only
    record = _cell("vit", "images", source, tmp_path, epochs=1)
    assert record.status == "error" and "(file img5.png): cannot decode the image" in record.detail


def test_a_corrupt_image_in_an_imagefolder_stops_the_session_before_any_cell(pytester, tmp_path):
    """An imagefolder with one truncated file: the session stops at its start (usage error) naming that file,
    not in every cell with an error that names none."""
    # (40 training rows: more than one optimizer step, so only the image stops the session.)
    _image_folder(tmp_path / "folder", {"train": 40, "test": 4}, 2, seed=3)
    bad = tmp_path / "folder" / "train" / "class1" / "7.png"
    bad.write_bytes(bad.read_bytes()[:30])
    grid = Path(__file__).parents[3] / "benchmarks" / "test_real_grid.py"
    pytester.makepyfile(test_real_grid=grid.read_text())
    outcome = pytester.runpytest(*PLUGIN, f"--gradeff-cache={tmp_path / 'cache'}",
                                 f"--gradeff-data=images={tmp_path / 'folder'}")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    message = "\n".join(outcome.errlines + outcome.outlines)
    assert f"--gradeff-data images={tmp_path / 'folder'}: images=" in message
    assert "row " in message and f"(file {bad}): cannot decode the image" in message


def test_real_data_has_three_disjoint_splits(tmp_path):
    """Own test and validation splits are taken as they are; without them, fixed carve-outs of the training rows
    (20 % test, then 10 % of the rest validation), disjoint from what is trained on and the same every time."""
    rows = {"text": [f"row {i}" for i in range(100)]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows),
                          "validation": datasets.Dataset.from_dict({"text": ["v1", "v2"]}),
                          "test": datasets.Dataset.from_dict({"text": ["t1"]})}).save_to_disk(str(tmp_path / "own"))
    train, test, validation, _, notes = real.open_splits(DataSource(key="text", path=str(tmp_path / "own")), tmp_path)
    assert (len(train), test["text"], validation["text"]) == (100, ["t1"], ["v1", "v2"])
    assert notes == {"heldout_split": "the dataset's own 'test' split",
                     "validation_split": "the dataset's own 'validation' split"}
    datasets.Dataset.from_dict(rows).to_parquet(str(tmp_path / "bare.parquet"))
    source = DataSource(key="text", path=str(tmp_path / "bare.parquet"))
    train, test, validation, _, notes = real.open_splits(source, tmp_path)
    assert (len(train), len(test), len(validation)) == (72, 20, 8)
    split_rows = [set(split["text"]) for split in (train, test, validation)]
    assert set.union(*split_rows) == set(rows["text"]) and sum(map(len, split_rows)) == 100
    assert notes["validation_split"].startswith("10% of the training rows held out")
    again = real.open_splits(source, tmp_path)
    assert again[2]["text"] == validation["text"] and again[1]["text"] == test["text"]


def test_the_digits_are_read_from_scikit_learns_file_exactly_as_load_digits_reads_them():
    """The bundled file, read without importing scikit-learn, gives load_digits' images and labels bit for bit."""
    from sklearn.datasets import load_digits

    pixels, labels = builtin_data._bundled_digits()
    digits = load_digits()
    assert pixels.shape == (1797, 8, 8) and np.array_equal(pixels, digits.images)
    assert np.array_equal(labels, digits.target) and labels.dtype.kind == "i"


def _rows_parquet(path: Path, rows: int, *, null_image: int | None = None, null_label: int | None = None) -> Path:
    """A CIFAR-100-shaped parquet (img, fine_label) of ``rows`` rows, one image or label left empty where asked."""
    data = _image_rows(rows, 4, 7)
    images = [None if i == null_image else image for i, image in enumerate(data["image"])]
    labels = [None if i == null_label else label for i, label in enumerate(data["label"])]
    features = datasets.Features({"img": datasets.Image(), "fine_label": datasets.ClassLabel(num_classes=4)})
    datasets.Dataset.from_dict({"img": images, "fine_label": labels}, features=features).to_parquet(str(path))
    return path


@pytest.mark.parametrize(("broken", "message"), [
    ({"null_image": 3}, r"the 'train' split, row 3: the image \('img'\) is empty \(null\); each row needs an image"),
    ({"null_label": 5}, r"the 'train' split, row 5: the label \('fine_label'\) is empty \(null\)"),
])
def test_hostile_an_empty_image_or_label_is_named_before_any_cell(tmp_path, broken, message):
    """A parquet with a null image or label once passed the up-front check and failed inside the cell."""
    source = DataSource(key="cifar100", path=str(_rows_parquet(tmp_path / "c.parquet", 300, **broken)))
    with pytest.raises(ValueError, match=message):
        validate_source(source, tmp_path, (256, 64), step=128)


def test_hostile_fewer_training_rows_than_one_step_are_refused_before_any_cell(tmp_path):
    """40 rows, 20 % and 10 % carved out for test and validation: 28 left to train on, fewer than a step of 128."""
    source = DataSource(key="cifar100", path=str(_rows_parquet(tmp_path / "c.parquet", 40)))
    with pytest.raises(ValueError, match=r"^cifar100: the 'train' split has 28 rows \(20% of 'train' held out.*fewer "
                                         r"than one optimizer step of this profile takes \(128\); give at least 128"):
        validate_source(source, tmp_path, (256, 64), step=128)
    assert validate_source(source, tmp_path, (256, 64), step=16)["train_rows"] == 28


def test_hostile_a_bad_parquet_stops_the_session_with_one_line(pytester, tmp_path):
    """The option's check (exit 4, one line naming the option, the file and the row), not an error in every cell."""
    bad = _rows_parquet(tmp_path / "c.parquet", 300, null_label=2)
    outcome = pytester.runpytest_subprocess("-p", "gradeff.pytest_plugin", f"--gradeff-data=cifar100={bad}",
                                            f"--gradeff-cache={tmp_path / 'cache'}")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines([f"ERROR: --gradeff-data cifar100={bad}: cifar100={bad}, the 'train' split, row 2: "
                                  "the label ('fine_label') is empty (null)*"])
