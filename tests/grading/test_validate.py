"""What `course validate` tells a learner about a failed test: the whole first line, or the line that failed."""

from __future__ import annotations

from grading.validate import error_line

# IPython's traceback of `assert total == 10` failing with no message, colours included
TRACEBACK = [
    "\x1b[31m---------------------------------------------------------------------------\x1b[39m",
    "\x1b[31mAssertionError\x1b[39m                            Traceback (most recent call last)",
    "\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[3]\x1b[39m\x1b[32m, line 2\x1b[39m\n"
    "\x1b[32m      1\x1b[39m total = add(3, 4)\n"
    "\x1b[32m----> 2\x1b[39m \x1b[38;5;28;01massert\x1b[39;00m total == \x1b[32m10\x1b[39m",
    "\x1b[31mAssertionError\x1b[39m: ",
]


def test_a_message_is_shown_whole_on_its_first_line():
    long = "x has the right shape and dtype but wrong values: " + "Mismatched elements: 1 / 6; " * 20
    assert error_line({"ename": "AssertionError", "evalue": long + "\nsecond line"}) == f"AssertionError: {long}"


def test_an_assertion_without_a_message_names_the_line_that_failed():
    output = {"ename": "AssertionError", "evalue": "", "traceback": TRACEBACK}
    assert error_line(output) == "AssertionError at `assert total == 10`"
    assert error_line({"ename": "AssertionError", "evalue": "", "traceback": []}) == (
        "AssertionError (raised without a message)"
    )
