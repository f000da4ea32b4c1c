"""What a plain `pytest tests` leaves out (tests/conftest.py): the slow and cluster tests, unless the run selects for
itself by marker, by --slow, or by naming a test file or a test."""

from types import SimpleNamespace

import pytest

from tests.conftest import LEFT_OUT_BY_DEFAULT, _selects_for_itself


def _config(*args: str, markexpr: str = "", slow: bool = False):
    return SimpleNamespace(args=list(args), option=SimpleNamespace(markexpr=markexpr),
                           getoption=lambda name: slow if name == "--slow" else None)


@pytest.mark.parametrize(("args", "markexpr", "slow", "itself"), [
    (("tests",), "", False, False),
    (("tests/cell", "tests/gate"), "", False, False),
    (("tests",), "slow and not cluster", False, True),
    (("tests",), "", True, True),
    (("tests/cell/test_run.py",), "", False, True),
    (("tests/cell/test_run.py::test_x",), "", False, True),
    (("tests/cell", "tests/gate/test_rules.py::test_y[a-b]"), "", False, True),
])
def test_only_a_run_that_selects_nothing_for_itself_leaves_the_slow_tests_out(args, markexpr, slow, itself):
    assert _selects_for_itself(_config(*args, markexpr=markexpr, slow=slow)) is itself


def test_the_markers_left_out_are_registered(request):
    markers = request.config.getini("markers")
    assert all(any(line.startswith(f"{name}:") for line in markers) for name in LEFT_OUT_BY_DEFAULT)


def test_a_pytester_test_is_marked_slow(pytester, request):
    assert request.node.get_closest_marker("slow") is not None


def test_a_plain_unit_test_is_not(request):
    assert request.node.get_closest_marker("slow") is None
