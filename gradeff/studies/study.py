"""The studies as registered data: a :class:`StudySpec` per study, and the registry every grid names its study from.

A study is what a report section, a claim, the Answer and the terminal summary read as one body of evidence. Each
:class:`~gradeff.studies.grid.GridSpec` names the study its records belong to, and a grid must name one registered
here: a grid that names none, or one this registry does not hold, is refused where it is declared, so a new grid
can never be read silently as another study's (:mod:`gradeff.analysis.scope` reads the mapping).
"""

from __future__ import annotations

from dataclasses import dataclass

from gradeff.specs.registry import Registry

__all__ = ["STUDIES", "StudySpec"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StudySpec:
    """One study.

    Attributes:
        key: identifier (``main``); its grids name it.
        title: its name on the report's page and in the terminal.
        answers: whether it answers "what should I use": the Answer has a line per group of its cells, and
            further seeds run only for its cells (:mod:`gradeff.pytest.seeding`).
        record_grids: grids with no :class:`~gradeff.studies.grid.GridSpec` whose records it reads as well (the
            cells a user writes with the public fixtures, ``custom``).
        claims_title: the title of its claims' table where they read other studies' grids too (the PEFT paper's
            claims read the foundation-model baselines); ``""``: its ``title``.
    """

    key: str
    title: str
    answers: bool = False
    record_grids: tuple[str, ...] = ()
    claims_title: str = ""


STUDIES: Registry[StudySpec] = Registry("study", (
    StudySpec(key="main", title="Main study: optimizers × memory strategies", answers=True,
              record_grids=("custom",)),
    StudySpec(key="peft", title="PEFT study: fine-tuning methods and checkpointing", answers=True,
              claims_title="PEFT study: fine-tuning methods, memory strategies and foundation-model baselines"),
    StudySpec(key="baselines", title="PEFT study: foundation-model baselines"),
    StudySpec(key="memory", title="Memory strategies side by side"),
    StudySpec(key="real", title="Real data", answers=True),
), plural="studies")
