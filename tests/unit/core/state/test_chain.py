"""The walk along superseded_by."""

from __future__ import annotations

from airflow_kinesis_snowflake.core.state.chain import ChainEnd, walk_chain


def test_a_walk_along_superseded_by_says_why_it_ended() -> None:
    pointers = {"a": "b", "b": "c", "c": None, "x": "y", "y": "x", "m": "gone"}
    walk = lambda start: walk_chain(start, lambda n: n if n in pointers else None, pointers.get)  # noqa: E731
    assert (walk("a").names, walk("a").end) == (("a", "b", "c"), ChainEnd.END)
    assert (walk("m").names, walk("m").end) == (("m", "gone"), ChainEnd.MISSING)
    assert (walk("x").names, walk("x").end, walk("x").next_name) == (("x", "y"), ChainEnd.LOOP, "x")
    assert (walk("nothing").names, walk("nothing").found, walk("nothing").end) == (("nothing",), (), ChainEnd.MISSING)
    long = {f"t{i}": f"t{i + 1}" for i in range(20)}
    capped = walk_chain("t0", lambda n: n, long.get, max_hops=3)
    assert (capped.names, capped.end, capped.next_name) == (("t0", "t1", "t2", "t3"), ChainEnd.HOP_LIMIT, "t4")
