"""What `keras-vit-train` and `keras-vit-pretrain` share as command lines: the parser and its errors.

`ArgumentParser` shows every flag's default in `--help` (a flag's own help
text says it where the default needs words, e.g. "default: every epoch";
otherwise "(default: X)" is added) and answers a mistyped choice with
`difflib`'s closest value ("did you mean 'mixed_bfloat16'?"). `cli` runs a
command and turns a `ValueError` into one line and exit status 2, with the
Python parameter names of the library's messages (`num_heads`,
`directory=...`) replaced by the flags that set them (`--num-heads`,
`--image-folder ...`): `flag_names`.
"""

import argparse
import copy
import difflib
import re
import sys

# Library parameters whose flag is not "--" + the name with dashes (keras_vit.data, the builders).
PARAMETER_FLAGS = {
    "directory": "--image-folder",
    "validation_split": "--validation-fraction",
    "data_dir": "--tfds-data-dir",
    "input_shape": "--image-size",
    "checkpoint": "--weights",
}


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter that adds "(default: X)" to every flag whose help does not say its default."""

    def _format_action(self, action):
        if action.option_strings and not action.help and action.default is not argparse.SUPPRESS:
            action = copy.copy(action)  # argparse shows no help line for a flag without help text
            action.help = "(default: %(default)s)"
        return super()._format_action(action)

    def _get_help_string(self, action):
        text = action.help or ""
        if action.option_strings and action.default is not argparse.SUPPRESS and "default" not in text.lower():
            text += (" " if text else "") + "(default: %(default)s)"
        return text


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` with `HelpFormatter`, and "did you mean" for a mistyped choice.

    A value outside a flag's `choices` exits with status 2 and, e.g.,
    "argument --precision: invalid choice: 'mixed_bfloat' (choose from
    'float32', 'mixed_bfloat16', 'mixed_float16'); did you mean
    'mixed_bfloat16'?" (the closest choice by `difflib.get_close_matches`,
    when one is close enough).
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(repr(c) for c in action.choices)
            message = f"invalid choice: {value!r} (choose from {choices})" + did_you_mean(value, action.choices)
            raise argparse.ArgumentError(action, message)


def did_you_mean(value, choices):
    """"; did you mean 'X'?" for the choice closest to `value` (`difflib.get_close_matches`, cutoff 0.6), else ""."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def flag_names(message, parser):
    """`message` with the Python parameters that `parser`'s flags set written as those flags.

    "`hidden_size` must be divisible by `num_heads`. Received: hidden_size=128,
    num_heads=3" becomes "--hidden-size must be divisible by --num-heads.
    Received: --hidden-size 128, --num-heads 3". A parameter is a flag's
    `dest` or a key of `PARAMETER_FLAGS` (`directory` -> `--image-folder`);
    it is replaced where it is quoted in backticks, followed by "=" (a
    value), or, for names with an underscore, standing alone as a word
    (not inside a path or a quoted string).
    """
    flags = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings and a.dest != "help"}
    flags.update(PARAMETER_FLAGS)
    names = "|".join(sorted(map(re.escape, flags), key=len, reverse=True))
    message = re.sub(rf"`({names})`", lambda m: flags[m.group(1)], message)
    message = re.sub(rf"(?<![\w/.'\"-])({names})=(?!=)", lambda m: flags[m.group(1)] + " ", message)
    underscored = "|".join(re.escape(n) for n in sorted(flags, key=len, reverse=True) if "_" in n)
    return re.sub(rf"(?<![\w/.'\"`-])({underscored})(?![\w/'\"`=-])", lambda m: flags[m.group(1)], message)


def require_tensorflow(prog):
    """Exits with status 2 and one line naming the extra to install when TensorFlow is missing (the training
    command lines read their data through tf.data); call it before anything imports TensorFlow."""
    from keras_vit._backend import tensorflow

    try:
        tensorflow(f"{prog} (its input pipelines are tf.data)")
    except ImportError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        sys.exit(2)


def cli(parser, argv, run_fn, summary):
    """Parses `argv`, runs `run_fn(args)` and prints `summary(args, metrics)`; returns 0.

    A ValueError (a bad flag, named in its message; `flag_names` writes the
    library's parameter names as flags) or a data file that TensorFlow
    cannot decode exits with status 2 and one line, no traceback. The
    global Keras dtype policy (set by --precision) is given back.
    """
    from keras_vit import _console

    args = parser.parse_args(argv)
    _console.start(parser.prog, args.verbose)  # TensorFlow's start-up noise filtered, one line naming the devices
    import keras

    previous_policy = keras.config.dtype_policy()  # --precision sets the global policy; callers get theirs back
    try:
        metrics = run_fn(args)
    except ValueError as e:
        parser.exit(2, f"{parser.prog}: error: {flag_names(str(e), parser)}\n")
    except Exception as e:  # a file of the data set that TensorFlow cannot decode
        if type(e).__name__ != "InvalidArgumentError":
            raise
        parser.exit(2, f"{parser.prog}: error: the data could not be read: {op_error_line(e)[:300]}\n")
    finally:
        keras.config.set_dtype_policy(previous_policy)
    print(summary(args, metrics))
    return 0


def op_error_line(error):
    """The line of a TensorFlow error that says what failed: in a "Graph execution error", the one before the op's
    `[[{{node ...}}]]` (e.g. "a bad record : Tensor had NaN values"), else the first."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    for before, line in zip(lines, lines[1:]):
        if line.startswith("[[") and not before.startswith(("[[", "File ")):
            return before
    return lines[0] if lines else type(error).__name__
