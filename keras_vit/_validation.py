"""Argument checks shared by the layers and builders.

Each raises `ValueError` naming the argument, the value received and what is
allowed, before any TensorFlow op runs.
"""

import numbers

import numpy as np


def is_int(value):
    """True for Python and NumPy integers, False for bools and everything else."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_positive_int(name, value):
    """Returns `value` as an int if it is an integer >= 1 (NumPy ints too), else raises ValueError."""
    if not is_int(value) or value < 1:
        raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")
    return int(value)


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
