"""COMMAND INFO, COMMAND DOCS and ``<container> HELP`` replies, drawn from the
command table (commands.table), in the shapes Redis 7 gives them.

The argument tree COMMAND DOCS gives clients (redis-cli draws its HELP and hints
from it) is parsed from the entry's syntax forms, so the documentation and the
hints cannot drift apart.  Grammar, as in Redis's docs: ``UPPER`` words are
tokens, lower-case words are arguments, ``[...]`` is optional, ``a|b`` (one
word) is one of, ``x [x ...]`` repeats x.  Alternatives longer than a word are
separate forms.  Several forms become one tree: the
arguments they all start with, then a ``oneof`` of what each form goes on with
(as Redis describes CLIENT KILL's two formats), so every form is documented.
"""

from __future__ import annotations

import re
from functools import lru_cache

from tstream.resp import Set, Status

from . import flags as F

_TOKEN = re.compile(r"\[|\]|\.\.\.|[^\s\[\]]+")
_INTEGER_NAMES = {"count", "offset", "ms", "retry-ms", "expire-ms", "index", "cursor", "n", "batch-seq",
                  "protover", "timeout", "id", "client-id"}


def _arg(word: str) -> dict:
    if not any(c.islower() for c in word):
        return {"name": word.lower(), "type": "pure-token", "token": word}
    kind = "key" if word == "key" else "integer" if word in _INTEGER_NAMES else "string"
    if word == "pattern":
        kind = "pattern"
    node = {"name": word, "type": kind}
    if kind == "key":
        node["key_spec_index"] = 0
    return node


def _add_flag(node: dict, flag: str) -> None:
    flags = node.setdefault("flags", Set())
    if flag not in flags:
        flags.append(Status(flag))


def _parse(tokens: list[str], pos: int, closing: str | None) -> tuple[list[dict], int]:
    """Parse a sequence until ``closing``; returns (arguments, next position).

    ``x [x ...]`` (and ``a b [a b ...]``) is one argument flagged multiple, as
    Redis describes ``DEL key [key ...]``."""
    args: list[dict] = []
    while pos < len(tokens):
        tok = tokens[pos]
        if tok == closing:
            pos += 1
            break
        if tok == "[":
            inner, pos = _parse(tokens, pos + 1, "]")
            repeats = tokens[pos - 2] == "..."
            if repeats:
                _drop_flag(inner[-1], "multiple")
            if repeats and len(args) >= len(inner) and args[len(args) - len(inner):] == inner:
                del args[len(args) - len(inner):]
                node = _group(inner)
                _add_flag(node, "multiple")
            else:
                node = _group(inner)
                if repeats:
                    _add_flag(node, "multiple")
                _add_flag(node, "optional")
            args.append(node)
            continue
        if tok == "...":
            if args:
                _add_flag(args[-1], "multiple")
        elif "|" in tok:
            args.append(_oneof([_arg(word) for word in tok.split("|")]))
        else:
            args.append(_arg(tok))
        pos += 1
    return args, pos


def _drop_flag(node: dict, flag: str) -> None:
    flags = node.get("flags")
    if flags and flag in flags:
        node["flags"] = Set(f for f in flags if f != flag)
        if not node["flags"]:
            del node["flags"]


def _oneof(choices: list[dict], name: str = "") -> dict:
    return {"name": name or "_".join(c["name"] for c in choices), "type": "oneof", "arguments": choices}


def _group(args: list[dict]) -> dict:
    """One argument for a sequence: itself, a token+value, or a block."""
    if len(args) == 1:
        return dict(args[0])
    if (len(args) == 2 and args[0]["type"] == "pure-token" and args[1]["type"] != "pure-token"
            and "multiple" not in args[1].get("flags", ())):  # a token given once, before a value
        merged = dict(args[1])
        merged["token"] = args[0]["token"]
        return merged
    if args and args[0]["type"] == "pure-token":
        return {"name": args[0]["name"], "type": "block", "token": args[0]["token"], "arguments": args[1:]}
    return {"name": "+".join(a["name"] for a in args) or "block", "type": "block", "arguments": args}


def _merge(forms: list[list[dict]]) -> list[dict]:
    """One argument list describing every form (see the module docstring)."""
    if len(forms) == 1:
        return forms[0]
    shared = 0
    while all(len(f) > shared and f[shared] == forms[0][shared] for f in forms):
        shared += 1
    rests = [f[shared:] for f in forms]
    choices = [_group(rest) for rest in rests if rest]
    if not choices:  # the forms are the same
        return forms[0]
    node = choices[0] if len(choices) == 1 else _oneof(choices, "form")
    if len(choices) < len(rests):  # a form ends where the others go on
        _add_flag(node, "optional")
    return forms[0][:shared] + [node]


@lru_cache(maxsize=None)
def _arguments(syntax: tuple[str, ...], name_words: int) -> tuple:
    forms = [_parse(_TOKEN.findall(form)[name_words:], 0, None)[0] for form in syntax]
    return tuple(_merge(forms))


def arguments(entry) -> list[dict]:
    """The COMMAND DOCS argument tree of every syntax form of ``entry``."""
    return list(_arguments(entry.syntax, entry.name.count(b"|") + 1))


def command_docs(entry) -> dict:
    docs = {
        "summary": entry.summary,
        "since": entry.since,
        "group": entry.group,
        "complexity": entry.complexity,
    }
    if entry.subcommands:
        docs["subcommands"] = {sub.name: command_docs(sub) for sub in entry.subcommands}
    else:
        args = arguments(entry)
        if args:
            docs["arguments"] = args
    return docs


def _key_specs(entry) -> list:
    first, last, step = entry.keys
    if not first:
        return Set()
    return Set([{
        "flags": Set(Status(f) for f in entry.key_access.split()),
        "begin_search": {"type": "index", "spec": {"index": first}},
        "find_keys": {"type": "range", "spec": {"lastkey": last - first if last >= 0 else last,
                                                 "keystep": step, "limit": 0}},
    }])


def command_info(entry) -> list:
    first, last, step = entry.keys
    return [
        entry.name,
        entry.arity,
        Set(Status(f) for f in F.names(entry.flags)),
        first,
        last,
        step,
        Set(Status("@" + c) for c in entry.categories),
        Set(),  # tips
        _key_specs(entry),
        # Redis replies an empty set, or an array of the subcommands
        [command_info(sub) for sub in entry.subcommands] if entry.subcommands else Set(),
    ]


def _help_form(form: str) -> str:
    """``CONFIG GET parameter [parameter ...]`` -> ``GET <parameter> [<parameter> ...]``."""
    words = form.split(" ", 1)[1]
    return re.sub(r"(?<![\w-])([a-z][\w:-]*)", r"<\1>", words)


def help_lines(container) -> list:
    """The reply to ``<container> HELP``: every subcommand's forms and summary."""
    lines = [f"{container.name.decode().upper()} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"]
    if container.handler is not None:
        lines += ["(no subcommand)", "    " + container.summary]
    for sub in container.subcommands:
        lines += [_help_form(form) for form in sub.syntax]
        lines.append("    " + sub.summary)
    return [Status(line) for line in lines]
