"""Text of the `keras-vit-*` command lines: flags, not Python parameters, in errors; "did you mean"; every default.

The library's errors name Python parameters, as keras.applications' do
("`opset` must be an int in [13, 18]. Received: opset=11"). A command line
reads them back in its own words with `flag_names` ("--opset must be an int
in [13, 18]. Received: --opset 11"), finds what a typo meant with
`did_you_mean` (difflib plus a table of aliases such as TensorFlow's mode
names), makes argparse's own errors do the same (`ArgumentParser`) and
states every flag's default in `--help` (`complete_help`).
"""

import argparse
import difflib
import re

# a Python value as the library's messages print it: a quoted string, a tuple or list, a word or number
_VALUE = r"""(?:'[^']*'|"[^"]*"|\([^()]*\)|\[[^\[\]]*\]|[\w.+-]+)"""


def _key(text):
    return text.strip().lower().replace("-", "_")


def did_you_mean(value, choices, aliases=None):
    """The choices a mistyped `value` probably meant, best first (at most two), or [] when none is close.

    Args:
        value: str, what the user typed, e.g. "fp16" or "tflit".
        choices: the valid values, e.g. ("float32", "float16", ...).
        aliases: optional {alias: choice or tuple of choices}, e.g.
            {"fp16": "float16"}: names other tools use for the same thing.
            Case, "-" and "_" are ignored in `value` and the aliases.

    Returns:
        list of str, e.g. ["float16"]; a case or "-"/"_" variant of a choice
        and an alias come before difflib's close matches (ratio >= 0.6; a
        second match only when its ratio is within 0.02 of the first's).
    """
    key, choices = _key(value), list(choices)
    for alias, meant in (aliases or {}).items():
        if _key(alias) == key:
            return [meant] if isinstance(meant, str) else list(meant)
    same = [c for c in choices if _key(c) == key]
    if same:
        return same[:1]
    by_key = {_key(c): c for c in choices}
    close = difflib.get_close_matches(key, list(by_key), n=2, cutoff=0.6)
    ratios = [difflib.SequenceMatcher(None, key, k).ratio() for k in close]
    close = [k for k, r in zip(close, ratios) if r >= ratios[0] - 0.02]  # a second one only when about as close
    return [by_key[k] for k in close]


def suggestion(value, choices, aliases=None):
    """"; did you mean 'X'?" for what a mistyped `value` probably meant (`did_you_mean`), or "" when nothing is close."""
    meant = did_you_mean(value, choices, aliases)
    return f"; {_suggestion(meant)}" if meant else ""


def _suggestion(meant, quote=True):
    names = [repr(m) if quote else m for m in meant]
    return f"did you mean {' or '.join(names)}?" if names else ""


def check_list(value, choices, flag, what="value", aliases=None, refused=None):
    """Splits a comma list given to `flag` and checks every item, with a "did you mean" for a typo.

    Args:
        value: str, e.g. "float32,fp16".
        choices: the valid items.
        flag: the flag's name for messages, e.g. "--quantization".
        what: what an item is, e.g. "mode", for messages.
        aliases: {alias: choice or tuple of choices} for `did_you_mean`.
        refused: {item: reason} for items refused on purpose.

    Returns:
        The items, in order, without repeats.

    Raises:
        ValueError: an empty list; an item outside `choices` (named with the
            flag, what it probably meant and every choice) or in `refused`.
    """
    items = list(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if not items:
        raise ValueError(f"{flag} is empty; choose from {', '.join(choices)}")
    for item in items:
        if item in choices:
            continue
        if refused and item in refused:
            raise ValueError(f"{flag} {item} is refused: {refused[item]}. Choose from {', '.join(choices)}")
        hint = _suggestion(did_you_mean(item, choices, aliases))
        hint = f"; {hint} Choose" if hint else "; choose"
        raise ValueError(f"{flag}: unknown {what} {item!r}{hint} from {', '.join(choices)}")
    return items


def _shell(value):
    """A Python repr as a user types it after a flag: 'digits' -> digits, (16, 16) -> 16,16."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        return inner if inner and re.fullmatch(r"[\w./,:~+-]+", inner) else value
    if value[:1] in "([":
        return ",".join(v.strip() for v in value[1:-1].split(",") if v.strip())
    return value


def flag_names(message, flags):
    """A library error message in a command line's words: Python parameters replaced by their flags.

    Rewritten forms, for each parameter in `flags`: "`name`", "name=VALUE",
    "name (--flag)", "name (--flag ARGS)", "name=VALUE (--flag)",
    "name / --flag", "pass name" and, for names with an underscore,
    "name 'VALUE'". "name=True" becomes the flag alone ("pass --overwrite").
    Words of the prose that merely equal a parameter name are left alone.

    Args:
        message: str (or an exception: its text).
        flags: {parameter: flag}, e.g. {"calibration_data": "--calibration-data"};
            a key "name=VALUE" maps that one setting, e.g.
            {"include_top=False": "--no-top"}.

    Returns:
        str, e.g. "--opset must be an int in [13, 18]. Received: --opset 11"
        for "`opset` must be an int in [13, 18]. Received: opset=11".
    """
    message = str(message)
    settings = {k: v for k, v in flags.items() if "=" in k}
    flags = {k: v for k, v in flags.items() if "=" not in k}
    for setting, flag in settings.items():
        message = re.sub(rf"(?<![\w-]){re.escape(setting)}(?![\w])", flag, message)
    if not flags:
        return message
    names = "|".join(sorted(map(re.escape, flags), key=len, reverse=True))
    name = rf"(?<![\w.-])({names})(?![\w])"

    def with_value(flag, value):  # a positional argument ("OUTPUT") is named, its value shown as given
        return flag if value == "True" else f"{flag} {_shell(value)}" if flag.startswith("-") else value

    def own(m, text):  # "name (--flag ...)": only where the flag is the parameter's own
        return text if flags[m[1]] == m[2] else m[0]

    message = re.sub(rf"{name}=({_VALUE}) \((--[\w-]+)\)", lambda m: with_value(m[3], m[2]), message)
    message = re.sub(rf"{name} \((--[\w-]+)([^()]*)\)", lambda m: own(m, m[2] + m[3]), message)
    message = re.sub(rf"{name} / (--[\w-]+)", lambda m: own(m, m[2]), message)
    message = re.sub(rf"`({names})`", lambda m: flags[m[1]], message)
    message = re.sub(rf"{name}=({_VALUE})", lambda m: with_value(flags[m[1]], m[2]), message)
    message = re.sub(rf"\bpass {name}", lambda m: f"pass {flags[m[1]]}", message)
    identifiers = "|".join(re.escape(n) for n in flags if "_" in n)  # "output_dir 'x'"; not "unknown format 'x'"
    if identifiers:
        message = re.sub(rf"(?<![\w.-])({identifiers}) ('[^']*'|\"[^\"]*\")",
                         lambda m: f"{flags[m[1]]} {_shell(m[2])}", message)
        # an identifier standing alone as a word ("change validation_split"), not inside a path or a quoted string
        message = re.sub(rf"(?<![\w/.'\"`-])({identifiers})(?![\w/'\"`=-])", lambda m: flags[m[1]], message)
    return re.sub(r"`(--[\w-]+(?: [^`]*)?)`", r"\1", message)  # "`antialias=True`" -> "--antialias"


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose errors add a "did you mean" for a mistyped flag or choice.

    "unrecognized arguments: --calibration-dat x" gains "; did you mean
    --calibration-data?"; "argument --scores: invalid choice: 'logit'"
    gains "; did you mean 'logits'?". Exits 2 with that one line (argparse
    prints its whole usage block first), naming `--help`.
    """

    def error(self, message):
        """Prints `message` (with a suggestion where one is close) to stderr in one line; exits 2."""
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if unknown:
            flags = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
            for arg in unknown[1].split():
                meant = did_you_mean(arg.split("=", 1)[0], flags) if arg.startswith("--") else []
                if meant:
                    message += f"; {arg.split('=', 1)[0]}: {_suggestion(meant, quote=False)}"
        choice = re.match(r"argument (\S+): invalid choice: '?([^']*?)'? \(choose from (.*)\)$", message)
        if choice:
            meant = did_you_mean(choice[2], [c.strip(" '\"") for c in choice[3].split(",")])
            if meant:
                message += f"; {_suggestion(meant)}"
        self.exit(2, f"{self.prog}: error: {message} (usage: {self.prog} --help)\n")  # one line, no usage block


def complete_help(parser):
    """Makes every optional flag's `--help` line state its default, where its help text does not yet.

    Appends "(required)" to a required flag, "(default: off)" to a
    `store_true` flag, "(default: on)" to a `store_false` one and
    "(default: VALUE)" to the others ("none" for None). Call it last in a
    parser's builder, after every `add_argument`.

    Args:
        parser: an `argparse.ArgumentParser`.

    Returns:
        `parser`.
    """
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        text = action.help or ""
        if "default" in text.lower() or "required" in text.lower():
            continue
        if action.required:
            note = "required"
        elif isinstance(action, argparse._StoreTrueAction):
            note = "default: off"
        elif isinstance(action, argparse._StoreFalseAction):
            note = "default: on"
        else:
            note = f"default: {'none' if action.default is None else action.default}"
        action.help = f"{text} ({note})" if text else f"({note})"
    return parser
