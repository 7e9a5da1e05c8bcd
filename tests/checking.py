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


def assert_two_step_hints(exercise, capsys, code):
    """Exactly two hints, a guiding question and then the method in words, neither holding any of
    the fragments of ``code``; ``hint()`` shows the question and says how to get the method."""
    question, method = exercise.hints
    assert question.rstrip().endswith("?"), question
    assert "?" not in method, method
    for hint in exercise.hints:
        assert not [fragment for fragment in code if fragment in hint], (exercise.name, hint)
    exercise.hint()
    first = capsys.readouterr().out
    assert question in first and method not in first and "hint(2)" in first
    exercise.hint(2)
    assert method in capsys.readouterr().out
