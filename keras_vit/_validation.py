"""Argument checks shared by the layers and builders.

Each raises `ValueError` naming the argument, the value received and what is
allowed, before any TensorFlow op runs.
"""


def check_positive_int(name, value):
    """Raises ValueError unless `value` is an int >= 1 (bool excluded)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")


def check_rate(name, value):
    """Raises ValueError unless `value` is a real number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a float in [0, 1). Received: {name}={value!r}")


def check_choice(name, value, choices):
    """Raises ValueError unless `value` is one of `choices`."""
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}` must be one of {allowed}. Received: {name}={value!r}")


def check_bool(name, value):
    """Raises ValueError unless `value` is True or False."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")
