"""memory_check's judgement of a new text against stored ones, on hand-made cases."""
from __future__ import annotations

from lab.serve.check import assess, details, judge, overlap


def hit(memory_id: str, content: str, rank: int = 1, contradicts: tuple[str, ...] = ()) -> dict:
    return {"memory_id": memory_id, "rank": rank, "score": 1.0 / rank, "content": content,
            "contradicts": list(contradicts)}


def test_overlap_is_shared_content_words_over_the_shorter_texts():
    # {alice, lives, paris} and {alice, lives, berlin, since, 2021}: 2 shared of the shorter's 3
    assert overlap("Alice lives in Paris", "Alice lives in Berlin since 2021") == 2 / 3
    assert overlap("the of and", "Alice") == 0.0  # no content words


def test_details_take_numbers_negations_and_names_but_not_a_sentence_opening():
    got = details("Bob did not move to Lisbon in 2023. Then he stayed.")
    assert got == {"numbers": {"2023"}, "negations": {"not"}, "names": {"lisbon"}}


def test_a_differing_name_number_or_negation_on_the_same_subject_is_a_possible_contradiction():
    assert judge("Alice lives in Berlin", "Alice lives in Paris") == ("contradiction", {"names": ["berlin", "paris"]})
    assert judge("The launch is on May 12", "The launch is on May 14") == ("contradiction", {"numbers": ["12", "14"]})
    assert judge("Bob does not like coffee", "Bob likes coffee") == ("contradiction", {"negations": ["not"]})
    assert judge("Alice lives in Paris", " Alice lives in Paris ") == ("duplicate", {})
    assert judge("Alice lives in Paris", "Alice enjoys Paris in the spring")[0] == "related"  # same details
    assert judge("Alice lives in Berlin", "Carol plays the violin") == ("related", {})  # another subject


def test_assess_names_the_duplicate_first_and_follows_contradicts_edges():
    out = assess("Alice lives in Berlin", [hit("m1", "Alice lives in Paris"), hit("m2", "Alice lives in Berlin", 2)])
    assert out["duplicate_of"] == "m2" and out["advice"].startswith("already stored as m2")
    linked = assess("The deploy window is Tuesday",
                    [hit("a", "Deploys are frozen this week", 1, contradicts=("b",)), hit("b", "Releases ship on Fridays", 2)])
    assert [c["memory_id"] for c in linked["possible_contradictions"]] == ["b"]
    assert "update b" in linked["advice"]
    clean = assess("Carol plays the violin", [hit("x", "Alice lives in Paris")])
    assert clean["possible_contradictions"] == [] and clean["advice"] == "nothing stored says otherwise: save it"
