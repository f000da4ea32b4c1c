"""What a cell leaves behind and how it is kept: the schema of a :class:`~gradeff.records.results.CellRecord`
(:mod:`.results`), the names of its fields (:mod:`.fields`) and its strict-JSON form (:mod:`.strict_json`), the
append-only JSON-lines store (:mod:`.store`), the test curve and the time to target read from it (:mod:`.curve`),
reading results files back (:mod:`.loading`), every output written whole or not at all (:mod:`.outputs`), and text
and numbers made safe and readable (:mod:`.safe_text`, :mod:`.formatting`).

May import: :mod:`gradeff.studies` (a record checks its id against its grid) and everything below it.
"""
