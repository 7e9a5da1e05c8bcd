"""What every exercise-check test asks of a wrong answer."""

from __future__ import annotations


def outcome(exercise, *answers):
    return exercise.outcome(*answers)


def assert_wrong(exercise, answers, words):
    """The check calls `answers` (a tuple or list of the arguments) wrong, names every one of `words`
    (a string or a list, case-insensitive), and shows the learner no traceback. Returns the message."""
    result, message = exercise.outcome(*answers)
    assert result == "wrong", (result, message)
    missing = [w for w in ([words] if isinstance(words, str) else words) if w.lower() not in message.lower()]
    assert not missing, f"message lacks {missing}: {message}"
    assert "Traceback" not in message, message
    return message
