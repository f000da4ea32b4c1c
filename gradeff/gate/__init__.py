"""The regression gate: two sets of records compared metric by metric (:mod:`.comparison`; the command,
:mod:`.compare`; its table, :mod:`.compare_table`), the rule each metric is judged by (:mod:`.rules`), exactly or
within a band (:mod:`.judgement`), and when numbers must repeat to the last bit and how far they may move when they
cannot (:mod:`.portability`).

May import: :mod:`gradeff.analysis`, :mod:`gradeff.records` and everything below them; never the report or the cell.
"""
