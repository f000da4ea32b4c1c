"""The run order: fine-tuned backbones' cells dealt round-robin, everything else where it was; their backbones
pretrained ahead of the first cell."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradeff.pytest.schedule import fine_tuned_backbone, interleave_backbones, to_front

# An item: (its backbone or None, a serial number that keeps items distinct).
items_lists = st.lists(st.sampled_from(["a", "b", "c", None]), max_size=40).map(
    lambda keys: [(key, i) for i, key in enumerate(keys)])


def _backbone(item):
    return item[0]


@given(items_lists)
def test_interleaving_is_a_permutation_that_moves_only_backbone_items(items):
    out = interleave_backbones(items, _backbone)
    assert sorted(out, key=lambda item: item[1]) == items
    assert all(o == i for o, i in zip(out, items) if i[0] is None)
    assert [slot for slot, item in enumerate(out) if item[0] is None] == \
        [slot for slot, item in enumerate(items) if item[0] is None]


@given(items_lists)
def test_each_backbone_keeps_its_order_and_takes_its_turn(items):
    out = [item for item in interleave_backbones(items, _backbone) if item[0] is not None]
    for key in "abc":
        assert [i for i in out if i[0] == key] == [i for i in items if i[0] == key]
    # Round-robin: in every prefix, no backbone is more than one cell ahead of one that still has cells left.
    remaining = {key: sum(i[0] == key for i in items) for key in "abc"}
    taken = dict.fromkeys("abc", 0)
    for item in out:
        taken[item[0]] += 1
        behind = [k for k in "abc" if taken[k] < remaining[k]]
        assert all(taken[item[0]] <= taken[k] + 1 for k in behind)


def test_a_grid_is_dealt_backbone_by_backbone():
    """The PEFT grid's first cells are one per backbone, the main grid's untouched."""
    from types import SimpleNamespace

    from gradeff.studies.grid import cells

    def item(cell):
        return SimpleNamespace(callspec=SimpleNamespace(params={"cell": cell}))

    main = [item(c) for c in cells("main")][:5]
    peft = [item(c) for c in cells("peft")]
    out = interleave_backbones(main + peft, fine_tuned_backbone)
    assert out[:5] == main and {fine_tuned_backbone(i) for i in main} == {None}
    first = [fine_tuned_backbone(i) for i in out[5:9]]
    assert len(set(first)) == 4 and set(first) == {c.model for c in cells("peft")}
    assert fine_tuned_backbone(SimpleNamespace()) is None


@given(items_lists)
def test_to_front_moves_the_chosen_ahead_keeping_each_parts_order(items):
    out = to_front(items, lambda item: item[0] == "a")
    chosen = [item for item in items if item[0] == "a"]
    assert out == chosen + [item for item in items if item[0] != "a"]


def test_cells_that_search_their_own_rate_run_first(pytester):
    """The real grid, collected after the main grid, runs first: its cells tune themselves (no row of the table);
    under the shared protocol nothing moves, nor in a listing of the cells (--collect-only)."""
    from pathlib import Path

    root = Path(__file__).parents[2] / "benchmarks"
    pytester.makepyfile(test_a_main=(root / "test_grid.py").read_text(),
                        test_b_real=(root / "test_real_grid.py").read_text())
    # The run's order, seen once collection has finished; nothing is trained.
    pytester.makeconftest("""
        def pytest_collection_finish(session):
            with open("order.txt", "w") as out:
                out.write("\\n".join(item.nodeid.split("::")[0] for item in session.items))
            session.items[:] = []
    """)
    selection = ("-q", "-p", "no:randomly", "-k", "(vit and adamw and standard) or digits")

    def order(*args):
        pytester.runpytest_inprocess(*selection, *args)
        return (pytester.path / "order.txt").read_text().split()

    assert order() == ["test_b_real.py", "test_b_real.py", "test_a_main.py"]
    assert order("--gradeff-protocol", "shared") == ["test_a_main.py", "test_b_real.py", "test_b_real.py"]
    assert order("--collect-only") == ["test_a_main.py", "test_b_real.py", "test_b_real.py"]


_TRIVIAL_GRID = """
import pytest

@pytest.mark.gradeff_grid("peft")
def test_cell(cell, gradeff_seed):
    pass
"""


def _pretrain_calls(pytester, monkeypatch, *args):
    calls = []
    monkeypatch.setattr("gradeff.pytest.pretraining.pretrain_ahead", lambda backbones, profile, **kw: calls.append(
        (list(backbones), profile, kw)) or [])
    pytester.makepyfile(test_grid=_TRIVIAL_GRID)
    pytester.runpytest_inprocess("-p", "no:randomly", *args)
    return calls


def test_the_selected_backbones_are_pretrained_before_the_first_cell(pytester, monkeypatch):
    calls = _pretrain_calls(pytester, monkeypatch, "-k", "lora and standard and cifar100 and not adalora",
                            "--gradeff-seeds", "0,7", "--gradeff-threads", "1")
    assert len(calls) == 1
    backbones, profile, settings = calls[0]
    # Every seed's backbone, in the run's (interleaved) order; the session's settings.
    assert set(backbones) == {(model, seed) for model in ("vit_s", "tinyvit", "vim_s", "mambavision_t")
                              for seed in (0, 7)}
    assert [model for model, _ in dict.fromkeys(backbones)][:4] == ["vit_s", "tinyvit", "vim_s", "mambavision_t"]
    assert profile == "tiny" and settings["local"] == {} and settings["device"] == "cpu"


@pytest.mark.parametrize("args", [("--collect-only",), ("-k", "no_such_cell")])
def test_nothing_is_pretrained_ahead_of_a_session_that_trains_no_cell(pytester, monkeypatch, args):
    assert _pretrain_calls(pytester, monkeypatch, *args) == []
