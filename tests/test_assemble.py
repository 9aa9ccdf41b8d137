"""Context assembly: routing rules, spill-over, skip-and-continue, duplicates, counters, properties."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.assemble import AssembleConfig, EstimateCounter, ExactCounter, Item, assemble, line
from lab.config import ZONES, from_dict, to_dict
from lab.embed.fake import WordTokenizer
from lab.errors import ValidationError

NOW = datetime(2026, 3, 14, 18, 0, tzinfo=timezone.utc)
OLD = NOW - timedelta(days=30)
EST = EstimateCounter()


def words(n: int, tag: str) -> str:
    """n distinct words (no near-duplicates between different tags)."""
    return " ".join(f"{tag}{i}" for i in range(n))


def cost(mid: str, text: str) -> int:
    return EST.count(line(mid, text))


def cfg(**kw) -> AssembleConfig:
    return AssembleConfig(**{"reference_time": NOW.isoformat(), **kw})


# ------------------------------------------------------------------ routing
def test_routing_rules():
    items = [
        Item("top", words(5, "t"), 1.0, OLD),  # normalised 1.0 -> critical
        Item("pin", words(5, "p"), 0.1, OLD, pinned=True),  # pinned -> critical
        Item("anchor", words(5, "a"), 0.1, OLD, type="anchor"),
        Item("work", words(5, "w"), 0.9, OLD, type="working"),  # working -> recency, whatever its score
        Item("fresh", words(5, "f"), 0.5, NOW - timedelta(hours=2)),  # recent and >= 0.3 -> recency
        Item("fresh-weak", words(5, "x"), 0.2, NOW - timedelta(hours=2)),  # recent but < 0.3 -> middle
        Item("stale", words(5, "s"), 0.5, NOW - timedelta(hours=30)),  # older than 24 h -> middle
    ]
    ctx = assemble(items, cfg(budget=10_000))
    zone = {i.memory_id: (i.zone, i.reason) for i in ctx.items}
    assert zone == {
        "top": ("critical", "critical-score"), "pin": ("critical", "pinned"), "anchor": ("critical", "pinned"),
        "work": ("recency", "working"), "fresh": ("recency", "recent"),
        "fresh-weak": ("middle", "rest"), "stale": ("middle", "rest"),
    }


def test_thresholds_and_window_are_configurable():
    items = [Item("a", words(5, "a"), 1.0, OLD), Item("b", words(5, "b"), 0.6, NOW - timedelta(hours=30))]
    ctx = assemble(items, cfg(budget=10_000, critical_threshold=0.5, recent_hours=48))
    assert {i.memory_id: i.zone for i in ctx.items} == {"a": "critical", "b": "critical"}
    ctx = assemble(items, cfg(budget=10_000, critical_threshold=1.0, recent_hours=48))
    assert {i.memory_id: i.zone for i in ctx.items} == {"a": "critical", "b": "recency"}


def test_reading_order_critical_then_middle_by_score_then_recency_oldest_to_newest():
    items = [
        Item("m-low", words(4, "ml"), 0.2, OLD), Item("m-high", words(4, "mh"), 0.5, OLD - timedelta(days=1)),
        Item("crit", words(4, "c"), 1.0, OLD),
        Item("r-new", words(4, "rn"), 0.4, NOW - timedelta(hours=1)),
        Item("r-old", words(4, "ro"), 0.6, NOW - timedelta(hours=5)),
        Item("w", words(4, "w"), 0.1, NOW - timedelta(hours=3), type="working"),
    ]
    ctx = assemble(items, cfg(budget=10_000))
    assert ctx.ids == ["crit", "m-high", "m-low", "r-old", "w", "r-new"]
    assert [i.position for i in ctx.items] == [1, 2, 3, 4, 5, 6]


# ------------------------------------------------------------------ filling
def test_unused_budget_flows_to_the_next_zone():
    # the only critical item is too big for critical: critical's 15% flows to middle
    middle = [Item(f"m{i}", words(60 if i == 0 else 20, f"m{i}x"), 1.0 if i == 0 else 0.5 - i / 100, OLD)
              for i in range(10)]
    ctx = assemble(middle, cfg(budget=400))
    assert ctx.zones["critical"].used == 0
    assert ctx.zones["middle"].available == ctx.zones["middle"].capacity + ctx.zones["critical"].capacity
    assert ctx.zones["middle"].used > ctx.zones["middle"].capacity
    assert ctx.used <= 400


def test_an_item_that_does_not_fit_is_skipped_and_smaller_ones_still_tried():
    big = Item("big", words(160, "b"), 0.6, OLD)  # ~240 tokens: under the budget, over the space left
    small = Item("small", words(10, "s"), 0.4, OLD)
    ctx = assemble([Item("top", words(10, "t"), 1.0, OLD), big, small], cfg(budget=300))
    assert "big" not in ctx.ids and "small" in ctx.ids
    assert [s.memory_id for s in ctx.skipped if s.reason == "no-space"] == ["big"]


def test_a_critical_item_too_big_for_critical_is_offered_to_middle():
    ctx = assemble([Item("a", words(40, "a"), 1.0, OLD)], cfg(budget=200))  # critical holds 30
    assert ctx.items[0].zone == "middle" and ctx.items[0].reason == "overflow"


def test_an_item_longer_than_the_whole_budget_is_truncated_to_the_space_left():
    huge = Item("huge", words(2000, "h"), 1.0, OLD)
    ctx = assemble([huge], cfg(budget=300))
    (item,) = ctx.items
    assert item.truncated and item.text.endswith("…") and item.tokens <= 300
    assert ctx.used <= 300 and item.tokens >= 300 * 0.15  # it got critical's space at least


def test_with_oversize_skip_a_huge_item_is_skipped_and_the_rest_still_placed():
    ctx = assemble([Item("huge", words(2000, "h"), 1.0, OLD), Item("s", words(5, "s"), 0.5, OLD)],
                   cfg(budget=300, oversize="skip"))
    assert ctx.ids == ["s"]
    assert [(s.memory_id, s.reason) for s in ctx.skipped] == [("huge", "oversize")]


def test_a_truncated_item_keeps_at_least_the_minimum_or_is_skipped():
    ctx = assemble([Item("huge", words(2000, "h"), 1.0, OLD)], cfg(budget=40, min_truncated_tokens=50))
    assert ctx.items == [] and ctx.skipped[0].reason == "oversize"


def test_a_long_id_does_not_leave_a_stub_the_minimum_counts_the_text_kept():
    # 20 tokens of room: a long id takes most of them, so what is left of the text would be a stub
    long_id = "team-a/notes:" + "x" * 60
    ctx = assemble([Item(long_id, "Billing incident: " + words(2000, "h"), 1.0, OLD)],
                   cfg(budget=24, critical_ratio=1.0, middle_ratio=0.0, recency_ratio=0.0, min_truncated_tokens=8))
    assert ctx.items == [] and ctx.skipped[0].reason == "oversize"
    roomy = assemble([Item(long_id, "Billing incident: " + words(2000, "h"), 1.0, OLD)],
                     cfg(budget=120, critical_ratio=1.0, middle_ratio=0.0, recency_ratio=0.0, min_truncated_tokens=8))
    (item,) = roomy.items
    assert item.truncated and len(item.text.split()) > 8


def test_a_budget_too_small_for_any_item_and_empty_results_give_an_empty_context():
    assert assemble([], cfg()).items == []
    assert assemble([], cfg()).render() == ""
    ctx = assemble([Item("a", "text", 1.0, OLD)], cfg(budget=1))  # the least budget there is (BUDGET_RANGE)
    assert ctx.items == [] and ctx.used == 0


# ------------------------------------------------------------------ merging
def test_chunks_of_one_memory_become_one_item_without_repeated_text():
    items = [Item("m", "part one of the story", 0.4, OLD, chunk=0), Item("m", "part two of the story", 0.9, OLD, chunk=1),
             Item("m", "part two", 0.3, OLD, chunk=2)]
    ctx = assemble(items, cfg(budget=1000))
    (item,) = ctx.items
    assert item.score == 0.9 and item.text == "part one of the story … part two of the story"


def test_near_duplicates_keep_only_the_higher_scored_item():
    base = words(30, "d")
    items = [Item("a", base, 0.9, OLD), Item("b", base + " extra", 0.8, OLD), Item("c", words(10, "c"), 0.5, OLD)]
    ctx = assemble(items, cfg(budget=2000))
    assert ctx.ids == ["a", "c"]
    assert ctx.items[0].merged == ("b",)
    assert ("b", "duplicate-of:a") in [(s.memory_id, s.reason) for s in ctx.skipped]


# ------------------------------------------------------------------ neighbours
def test_neighbour_expansion_adds_adjacent_turns_when_budget_remains():
    t = OLD
    hit = Item("s1:3", "the turn that matched", 1.0, t, episode="s1")
    nbs = {"s1:3": [Item("s1:2", "the turn before", 0.0, t - timedelta(seconds=30), episode="s1"),
                    Item("s1:4", "the turn after", 0.0, t + timedelta(seconds=30), episode="s1")]}
    off = assemble([hit], cfg(budget=1000), neighbours=nbs)
    assert off.ids == ["s1:3"]
    on = assemble([hit], cfg(budget=1000, neighbours=1), neighbours=nbs)
    assert on.ids == ["s1:2", "s1:3", "s1:4"]  # same zone and score as the parent, in time order
    assert {i.neighbour_of for i in on.items} == {None, "s1:3"}
    assert on.neighbour_tokens == on.used - on.items[1].tokens
    tight = assemble([hit], cfg(budget=on.items[1].tokens + 2, neighbours=1, critical_ratio=1.0, middle_ratio=0.0,
                                recency_ratio=0.0), neighbours=nbs)
    assert tight.ids == ["s1:3"]  # no room: nothing added, budget kept


# ------------------------------------------------------------------ counters
@pytest.mark.parametrize("text,expected", [
    ("", 0), ("abcd", 2), ("abcdefghijkl", 3), ("hello world", 3),  # 2 words * 1.5 = 3 > 11 chars / 4
    ("x" * 400, 100), ("日本語のテキスト", 2), ("emoji 🎉🎉 party", 5),
])
def test_estimator(text, expected):
    assert EST.count(text) == expected


def test_exact_counter_counts_word_pieces_and_truncates_at_a_token_boundary():
    exact = ExactCounter(WordTokenizer())
    assert exact.count("Hello, wörld! ünïcode 文字") == 4
    long = " ".join(f"w{i}" for i in range(5000))
    assert exact.count(long) == 5000
    cut = exact.truncate(long, 100)
    assert exact.count(cut) == 100 and long.startswith(cut)


def test_the_real_tokenizer_counts_unicode_and_very_long_text(real_embedder):
    exact = ExactCounter(real_embedder.tokenizer)
    assert exact.count("hello world") == 2
    assert exact.count("naïve café — 東京") >= 4
    long = "retrieval " * 3000
    assert exact.count(long) == 3000  # no 256/512 truncation in counting
    assert exact.count(exact.truncate(long, 77)) == 77


def test_the_budget_check_uses_the_chosen_counter():
    items = [Item(f"m{i}", " ".join(f"supercalifragilistic{i}x{j}" for j in range(10)), 1.0 - i / 100, OLD)
             for i in range(20)]
    est = assemble(items, cfg(budget=300, dedupe_threshold=1.0))
    exact = assemble(items, cfg(budget=300, dedupe_threshold=1.0), counter=ExactCounter(WordTokenizer()))
    assert est.counter == "estimate" and exact.counter == "exact"
    assert len(exact.items) > len(est.items)  # 11 word-tokens each, but ~65 estimated
    assert exact.used <= 300 and est.used <= 300


# ------------------------------------------------------------------ config
def test_ratios_must_sum_to_one():
    with pytest.raises(ValidationError, match="sum to 1"):
        AssembleConfig(critical_ratio=0.5, middle_ratio=0.5, recency_ratio=0.5)
    with pytest.raises(ValidationError, match="counter must be"):
        AssembleConfig(counter="chars")
    assert from_dict(AssembleConfig, to_dict(AssembleConfig(budget=999))) == AssembleConfig(budget=999)


def test_render_text_and_markdown_with_citations():
    ctx = assemble([Item("a", "alpha", 1.0, OLD), Item("w", "todo", 0.1, NOW, type="working")], cfg(budget=100))
    assert ctx.render("text") == "=== Critical ===\n[a] alpha\n=== Recent ===\n[w] todo"
    md = ctx.render("markdown")
    assert md.startswith("## Critical\n- **[a]**") and "## Recent" in md
    with pytest.raises(ValidationError, match="known"):
        ctx.render("html")


# ------------------------------------------------------------------ properties
item_st = st.builds(
    Item,
    memory_id=st.sampled_from([f"m{i}" for i in range(25)]),
    text=st.lists(st.sampled_from(["alpha", "beta", "gamma", "délta", "東京", "x" * 40, "ok", "🎉"]),
                  min_size=0, max_size=60).map(" ".join),
    score=st.floats(0, 1, allow_nan=False),
    created_at=st.integers(0, 72).map(lambda h: NOW - timedelta(hours=h)),
    type=st.sampled_from(["fact", "working", "anchor", "episodic"]),
    pinned=st.booleans(),
)


@st.composite
def configs(draw):
    a = draw(st.integers(0, 100))
    b = draw(st.integers(0, 100 - a))
    return cfg(budget=draw(st.integers(1, 600)), critical_ratio=a / 100, middle_ratio=b / 100,
               recency_ratio=(100 - a - b) / 100, critical_threshold=draw(st.floats(0, 1)),
               recency_threshold=draw(st.floats(0, 1)), oversize=draw(st.sampled_from(["truncate", "skip"])),
               dedupe_threshold=draw(st.sampled_from([0.5, 0.9, 1.0])))


@settings(max_examples=300, deadline=None)
@given(st.lists(item_st, max_size=40), configs())
def test_properties_of_any_assembly(items, config):
    ctx = assemble(items, config)
    # never over budget, per zone and in total
    assert ctx.used <= config.budget
    for u in ctx.zones.values():
        assert u.used <= u.available
    # at most once
    assert len(ctx.ids) == len(set(ctx.ids))
    # zone order holds
    order = [ZONES.index(i.zone) for i in ctx.items]
    assert order == sorted(order)
    # middle: a higher score never lands later than a lower one
    middle = [i.score for i in ctx.items if i.zone == "middle"]
    assert middle == sorted(middle, reverse=True)
    # recency: oldest to newest
    recent = [i.created_at for i in ctx.items if i.zone == "recency"]
    assert recent == sorted(recent)
    # unused budget is used when an item fits: every item skipped for space was larger than
    # what was left at the end of the zone it was last tried in
    free_after = {z: u.free for z, u in ctx.zones.items()}
    for s in ctx.skipped:
        if s.reason in ("no-space", "oversize"):
            assert s.tokens > free_after[s.zone]
    # every offered memory is either placed or accounted for as skipped
    assert set(ctx.ids) | {s.memory_id for s in ctx.skipped} == {i.memory_id for i in items}


@settings(max_examples=100, deadline=None)
@given(st.lists(item_st, max_size=30), configs(), st.randoms(use_true_random=False))
def test_assembly_does_not_depend_on_input_order(items, config, rnd):
    shuffled = list(items)
    rnd.shuffle(shuffled)
    assert assemble(items, config).to_dict() == assemble(shuffled, config).to_dict()


# ------------------------------------------------------------------ near-duplicate shortcut
dup_text_st = st.lists(st.sampled_from(["alpha", "beta", "gamma", "Délta,", "東京", "ok!", "x_y"]),
                       min_size=0, max_size=12).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.builds(Item, memory_id=st.sampled_from([f"m{i}" for i in range(25)]), text=dup_text_st,
                          score=st.floats(0, 1, allow_nan=False),
                          created_at=st.integers(0, 72).map(lambda h: NOW - timedelta(hours=h)),
                          type=st.sampled_from(["fact", "working", "episodic"])), max_size=30),
       configs())
def test_batch_dedupe_shortcut_equals_checking_each_item_as_placed(items, config):
    """Near-duplicate-heavy inputs: the fill-then-batch-check shortcut must give exactly the
    context that checking every item as it is placed gives."""
    import lab.assemble.fill as fill

    fast = assemble(items, config).to_dict()
    fill._ALWAYS_INLINE = True
    try:
        inline = assemble(items, config).to_dict()
    finally:
        fill._ALWAYS_INLINE = False
    assert fast == inline


texts_st = st.lists(st.sampled_from(list("ab c\x00\t\nÉé_,.İß😀x") + ["hello", "WORLD", "  "]), max_size=15).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(texts_st, min_size=1, max_size=8), st.sampled_from([0.5, 0.9, 1.0]))
def test_batch_signatures_equal_the_plain_per_text_shingles(texts, threshold):
    import math

    from lab.assemble import dedupe

    dedupe.clear_memo()
    for text, sig in zip(texts, dedupe.signatures(texts, threshold)):
        reference = sorted(dedupe.shingle_set(text))
        assert sig.shingles.tolist() == reference
        keep = max(1, len(reference) - math.ceil(threshold * len(reference) - 1e-9) + 1)
        assert sig.prefix == tuple(reference[:keep])


def test_shingles_ignore_case_and_punctuation_and_are_stable_across_processes():
    from lab.assemble.dedupe import shingle_set

    assert shingle_set("Hello, World! How are you?") == shingle_set("hello world how are you")
    assert shingle_set("café au lait") != shingle_set("cafe au lait")
    # fixed multipliers, not Python's salted str hash: this value is the same in every process
    assert min(shingle_set("the quick brown fox")) == 97930174293923


def test_the_signature_memo_is_safe_to_share_between_threads():
    import concurrent.futures as cf

    from lab.assemble.dedupe import SignatureMemo, shingle_set, signatures

    memo = SignatureMemo(limit=64)  # small: threads empty it under each other all the time
    texts = [f"memory number {i} about the {i % 13} topic and more words {i * 7}" for i in range(400)]

    def work(offset: int) -> bool:
        batch = texts[offset:] + texts[:offset]
        got = signatures(batch, 0.8, memo)
        return all(set(sig.shingles.tolist()) == shingle_set(t) for t, sig in zip(batch, got))

    with cf.ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, range(0, 400, 10)))
