"""SortedIds (a view's ids: a shared base list plus the ids inserted since) against a plain sorted list."""
from bisect import bisect_left

from hypothesis import given, settings, strategies as st

import lab.search.sorted_ids as sorted_ids
from lab.search.sorted_ids import Positions, SortedIds

ID = st.text(alphabet="abcdefgh", min_size=1, max_size=4)


@settings(max_examples=100, deadline=None)
@given(base=st.sets(ID, max_size=30), batches=st.lists(st.sets(ID, min_size=1, max_size=4), max_size=8),
       merge_from=st.integers(1, 6))
def test_sorted_ids_equal_a_sorted_list_through_inserts(base, batches, merge_from):
    old_merge = sorted_ids.MERGE_FROM
    sorted_ids.MERGE_FROM = merge_from  # small, so that merges happen between inserts
    try:
        expected = sorted(base)
        ids = SortedIds(list(expected))
        for batch in batches:
            new = sorted(set(batch) - set(expected))
            before = ids.tolist()
            for m in new:
                assert ids.insertion_point(m) == bisect_left(expected, m)
            moved = ids.inserted(new)
            if len(ids.added) + len(new) <= merge_from:
                assert moved.base is ids.base, "a few inserts share the base list, not a copy of it"
            assert ids.tolist() == before, "inserting must leave the earlier ids as they were"
            expected = sorted(expected + new)
            ids = moved
            assert len(ids) == len(expected)
            assert ids == expected and list(ids) == expected
            assert [ids[p] for p in range(len(expected))] == expected
            assert ids.take(list(range(len(expected)))[::-1]) == expected[::-1]
            assert len(ids.added) <= merge_from
            pos = Positions(ids)
            for p, m in enumerate(expected):
                assert pos[m] == p and pos.get(m) == p and m in pos
            for m in ("zz", "0", "abcdx"):
                assert pos.get(m) is None and m not in pos
            if expected:
                assert ids[-1] == expected[-1]
                assert ids[1:3] == expected[1:3]
    finally:
        sorted_ids.MERGE_FROM = old_merge
