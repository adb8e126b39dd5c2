"""The three-way merge of two edits of one text: what merges, what conflicts, and line endings."""

import random
import time

import pytest

from app.merges import MAX_MATCH_WORK, Conflict, three_way_merge

BASE = "".join(f"line {n}\n" for n in range(1, 11))  # line 1 .. line 10


def edit(text: str, n: int, new: str) -> str:
    return text.replace(f"line {n}\n", new)


def test_edits_to_lines_far_apart_both_stay():
    ours = edit(BASE, 2, "line 2, ours\n")
    theirs = edit(BASE, 8, "line 8, theirs\n")
    result = three_way_merge(BASE, ours, theirs)
    assert result.clean and result.conflicts == ()
    assert result.text == edit(edit(BASE, 2, "line 2, ours\n"), 8, "line 8, theirs\n")


def test_edits_with_one_unchanged_line_between_them_merge():
    result = three_way_merge(BASE, edit(BASE, 4, "four\n"), edit(BASE, 6, "six\n"))
    assert result.text == edit(edit(BASE, 4, "four\n"), 6, "six\n")


def test_edits_to_adjacent_lines_conflict():
    result = three_way_merge(BASE, edit(BASE, 4, "four\n"), edit(BASE, 5, "five\n"))
    assert result.text is None and not result.clean
    assert result.conflicts == (
        Conflict(base_lines=(4, 5), ours_lines=(4, 5), theirs_lines=(4, 5)),
    )


def test_the_same_edit_on_both_sides_is_taken_once():
    both = edit(BASE, 5, "line 5, fixed\n")
    assert three_way_merge(BASE, both, both).text == both
    # The same edit beside a second, separate one of ours.
    ours = edit(both, 9, "nine\n")
    assert three_way_merge(BASE, ours, both).text == ours


def test_different_edits_of_the_same_line_conflict():
    result = three_way_merge(BASE, edit(BASE, 5, "five (ours)\n"), edit(BASE, 5, "five (theirs)\n"))
    assert result.text is None
    assert result.conflicts == (Conflict((5, 5), (5, 5), (5, 5)),)


def test_an_overlap_that_is_wider_on_one_side_conflicts():
    ours = edit(edit(BASE, 4, "four\n"), 5, "five\n")
    theirs = edit(BASE, 5, "FIVE\n")
    assert three_way_merge(BASE, ours, theirs).conflicts == (Conflict((4, 5), (4, 5), (4, 5)),)


def test_insertions_at_the_end_and_an_edit_at_the_top():
    ours = edit(BASE, 1, "first\n")
    theirs = BASE + "line 11\nline 12\n"
    assert three_way_merge(BASE, ours, theirs).text == edit(theirs, 1, "first\n")
    # Both sides appending different lines at the same place is a conflict ...
    result = three_way_merge(BASE, BASE + "ours\n", BASE + "theirs\n")
    assert result.conflicts == (Conflict((11, 10), (11, 11), (11, 11)),)
    # ... and appending the same lines is not.
    assert three_way_merge(BASE, BASE + "same\n", BASE + "same\n").text == BASE + "same\n"


def test_deleting_lines_on_one_side_and_editing_elsewhere_on_the_other():
    ours = edit(edit(edit(BASE, 3, ""), 4, ""), 5, "")
    theirs = edit(BASE, 9, "nine\n")
    assert three_way_merge(BASE, ours, theirs).text == edit(ours, 9, "nine\n")
    # Deleting a line the other side edited is a conflict, not a silent loss.
    assert not three_way_merge(BASE, edit(BASE, 9, ""), theirs).clean
    # Both deleting the same line is one deletion.
    assert three_way_merge(BASE, edit(BASE, 9, ""), edit(BASE, 9, "")).text == edit(BASE, 9, "")


def test_crlf_from_a_browser_merges_with_lf_text():
    ours = edit(BASE, 2, "two\n").replace("\n", "\r\n")  # a textarea sends CRLF
    theirs = edit(BASE, 8, "eight\n")
    merged = three_way_merge(BASE, ours, theirs).text
    assert merged is not None and merged.replace("\r\n", "\n") == edit(
        edit(BASE, 2, "two\n"), 8, "eight\n"
    )
    assert "\n" not in merged.replace("\r\n", "")  # one ending style throughout
    # The same line with only its ending changed is not an edit of that line.
    assert three_way_merge(BASE, BASE.replace("\n", "\r\n"), theirs).clean


def test_a_missing_final_newline_is_kept_or_changed_by_the_side_that_changed_it():
    base = BASE.removesuffix("\n")
    ours = edit(base, 1, "one\n")
    theirs = edit(base, 5, "five\n")
    assert three_way_merge(base, ours, theirs).text == edit(edit(base, 1, "one\n"), 5, "five\n")
    # Ours adds the final newline, theirs edits the top: both happen.
    merged = three_way_merge(base, base + "\n", edit(base, 1, "one\n")).text
    assert merged == edit(BASE, 1, "one\n")
    # Appending after a last line without a newline, while the other side edits the top.
    merged = three_way_merge(base, base + "\nline 11", edit(base, 1, "one\n")).text
    assert merged == edit(BASE, 1, "one\n") + "line 11"


def test_empty_texts():
    assert three_way_merge("", "", "").text == ""
    assert three_way_merge("", "a\n", "").text == "a\n"
    assert three_way_merge("", "a\n", "b\n").conflicts == (Conflict((1, 0), (1, 1), (1, 1)),)
    assert three_way_merge("a\n", "", "a\n").text == ""


def test_a_lone_cr_stays_inside_its_line():
    base = "a\rb\nc\n"
    assert three_way_merge(base, base, "a\rb\nC\n").text == "a\rb\nC\n"


@pytest.mark.parametrize("seed", range(30))
def test_random_disjoint_edits_always_merge_to_both(seed: int):
    rng = random.Random(seed)
    lines = [f"l{n}" for n in range(rng.randint(6, 40))]
    # Split the lines into two halves with an unchanged line between: each side edits one half.
    cut = rng.randint(2, len(lines) - 3)
    ours, theirs = list(lines), list(lines)
    for n in rng.sample(range(cut), rng.randint(1, cut)):
        ours[n] = lines[n] + " ours"
    for n in rng.sample(range(cut + 1, len(lines)), rng.randint(1, len(lines) - cut - 1)):
        theirs[n] = lines[n] + " theirs"
    expected = [*ours[:cut], lines[cut], *theirs[cut + 1 :]]
    result = three_way_merge("\n".join(lines), "\n".join(ours), "\n".join(theirs))
    assert result.text == "\n".join(expected)
    # Merging is symmetric in which side is ours when there is no conflict.
    assert three_way_merge("\n".join(lines), "\n".join(theirs), "\n".join(ours)).text == (
        result.text
    )


def test_a_text_too_repetitive_to_match_quickly_is_not_merged():
    """Hundreds of identical lines edited in the middle: declined, counted by the work the
    matcher would do, in far less time than matching them takes."""
    lines = ["x"] * 2000
    base = "\n".join(lines)
    ours = "\n".join(["y", *lines[1:1000], "y", *lines[1001:]])
    theirs = "\n".join([*lines[:1500], "z", *lines[1501:]])
    started = time.process_time()
    result = three_way_merge(base, ours, theirs)
    declined = time.process_time() - started
    assert result.text is None and result.too_repetitive and result.conflicts == ()
    # Under the bound the same shape merges, and its cost is what the bound allows.
    small = int(MAX_MATCH_WORK**0.5) // 2
    lines = ["x"] * small
    started = time.process_time()
    merged = three_way_merge(
        "\n".join(lines),
        "\n".join(["y", *lines[1:]]),
        "\n".join([*lines[:-1], "z"]),
    )
    assert merged.text == "\n".join(["y", *lines[1:-1], "z"])
    assert declined < max(time.process_time() - started, 0.05) * 10


def test_edits_at_the_top_and_bottom_of_a_long_repetitive_text_merge():
    """The common start and end are set aside before matching: only the middle counts."""
    lines = ["", "```", "x = 1", "```"] * 5000
    base = "\n".join(lines)
    ours = "\n".join(["# top", *lines[1:]])
    theirs = "\n".join([*lines[:-1], "# bottom"])
    assert three_way_merge(base, ours, theirs).text == "\n".join(
        ["# top", *lines[1:-1], "# bottom"]
    )
