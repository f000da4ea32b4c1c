"""How the ``gradeff`` command ends: its exit codes, and the one line on stderr that says why it failed.

Every subcommand (``gradeff report``, ``launch``, ``ab``, ``history``, ``baseline``) returns one of these codes; the
gate's own (``gradeff compare``: 0, 1 a regression, 2 unusable input, 74) are :mod:`gradeff.gate.compare`'s.
"""

from __future__ import annotations

import sys

from gradeff.records.outputs import EXIT_INCOMPLETE_OUTPUT

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_OK", "EXIT_OUTPUT", "error"]

EXIT_OK = 0
EXIT_FAILED = 1  # launch: a shard failed
EXIT_BAD_INPUT = 2  # the same code argparse uses for a bad command line: "fix what you gave me"
EXIT_OUTPUT = EXIT_INCOMPLETE_OUTPUT  # 74 (EX_IOERR): an output could not be written


def error(message: str) -> None:
    print(f"gradeff: error: {message}", file=sys.stderr)
