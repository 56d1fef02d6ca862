"""The lookups an append makes over a large cube's members, hashing the few values looked up
rather than every member's: they answer what ``pc.index_in`` over every member answers, and
the members files' URL check finds a URL listed twice in one file or in two."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import MemberTable
from h5sidecar.references.datacube._member_table import _repeated
from h5sidecar.workflows.cube._cube_parts import first_rows


@pytest.mark.parametrize("seed", range(20))
def test_first_rows_is_index_in_over_the_column(seed: int) -> None:
    rng = random.Random(seed)
    pool = [f"s3://b/g{i:03d}.nc" for i in range(rng.randint(1, 40))]
    values = [rng.choice([*pool, None]) for _ in range(rng.randint(0, 60))]
    cuts = sorted(rng.sample(range(len(values) + 1), min(3, len(values) + 1)))
    column = pa.chunked_array([pa.array(values[a:b], pa.string())
                               for a, b in zip([0, *cuts], [*cuts, len(values)], strict=True)],
                              pa.string())
    wanted = pa.array([rng.choice([*pool, "s3://b/other.nc", None])
                       for _ in range(rng.randint(0, 12))], pa.string())
    want = pc.index_in(wanted, value_set=column.combine_chunks(), skip_nulls=True)
    assert first_rows(column, wanted).tolist() == [-1 if v is None else v
                                                   for v in want.to_pylist()]


@pytest.mark.parametrize(("chunks", "twice"), [
    ([["a", "b"], ["c", "d"]], None),
    ([["a", "c"], ["b", "d"]], None),  # each in order, not across: sorted, unique
    ([["c", "a"], ["d"]], None),
    ([["a", "c"], ["c", "d"]], "c"),  # across two files
    ([["b", "a", "b"]], "b"),
    ([[], ["a"]], None),
])
def test_a_url_twice_is_found_in_one_file_or_across_two(chunks, twice) -> None:
    urls = pa.chunked_array([pa.array(c, pa.string()) for c in chunks], pa.string())
    assert _repeated(urls) == twice
    # the members files' check: the same answer on a whole table
    identity = MemberTable.of([]).table.schema
    rows = pa.table({f.name: urls.combine_chunks() if f.name == "url"
                     else pa.nulls(len(urls), f.type) for f in identity})
    if twice is None:
        MemberTable.check_columns(rows, "members.parq")
    else:
        with pytest.raises(InvalidReferenceError, match="twice"):
            MemberTable.check_columns(rows, "members.parq")
