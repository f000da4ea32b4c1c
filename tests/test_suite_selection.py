"""What a plain `pytest tests` leaves out (tests/conftest.py): the slow and cluster tests, unless the run selects for
itself by marker, by --slow, or by naming a test file or a test; and how a test marked serial runs alone under
pytest-xdist."""

import os
import threading
import uuid
from types import SimpleNamespace

import pytest

from tests.conftest import LEFT_OUT_BY_DEFAULT, XDIST_ENVIRONMENT, _selects_for_itself, _turn


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


def _worker_item(run: str, *, serial: bool, worker: bool = True):
    config = SimpleNamespace(workerinput={"testrunuid": run, "workerid": "gw0"}) if worker else SimpleNamespace()
    return SimpleNamespace(config=config, get_closest_marker=lambda name: object() if serial and name == "serial"
                           else None)


def _entered_while(held, item, wait: float = 0.3) -> bool:
    """Whether a thread enters ``item``'s turn within ``wait`` seconds while ``held``'s turn is held."""
    entered = threading.Event()
    leave = threading.Event()

    def other():
        with _turn(item):
            entered.set()
            leave.wait(5)

    with _turn(held):
        thread = threading.Thread(target=other)
        thread.start()
        found = entered.wait(wait)
    assert entered.wait(5), "the second test never got its turn once the first ended"
    leave.set()
    thread.join(5)
    return found


def test_a_serial_test_runs_while_no_other_test_does_and_the_others_side_by_side():
    """Under pytest-xdist (a worker's config has workerinput): a serial test waits for the test running beside it, and
    a test waits for a serial one; two ordinary tests run side by side. Outside xdist nothing waits."""
    run = uuid.uuid4().hex
    plain, alone = _worker_item(run, serial=False), _worker_item(run, serial=True)
    assert _entered_while(plain, plain) is True
    assert _entered_while(plain, alone) is False
    assert _entered_while(alone, plain) is False
    assert _entered_while(alone, alone) is False
    outside = _worker_item(run, serial=True, worker=False)
    assert _entered_while(outside, outside) is True
    other_run = _worker_item(uuid.uuid4().hex, serial=True)
    assert _entered_while(alone, other_run) is True  # another session's lock is its own


def test_the_serial_marker_is_registered(request):
    assert any(line.startswith("serial:") for line in request.config.getini("markers"))


def test_a_session_a_test_starts_does_not_take_itself_for_an_xdist_worker():
    """Under pytest-xdist the worker's environment names it; a test sees none of it, so a pytest session it starts
    (pytester, a subprocess) is a session of its own."""
    assert not [name for name in XDIST_ENVIRONMENT if name in os.environ]
