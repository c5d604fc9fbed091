"""COMMAND INFO and COMMAND DOCS replies, built from the command table.

Each handler's docstring starts with its syntax line; the argument tree that
``COMMAND DOCS`` gives clients (redis-cli draws its hints from it) is parsed from
that line, so the documentation and the hints cannot drift apart.

Syntax line grammar, as in Redis's docs: ``UPPER`` words are tokens, lower-case
words are arguments, ``[...]`` is optional, ``a|b`` is one of, ``...`` repeats
what precedes it, and ``X | Y`` at the top level separates alternative forms
(only the first form is described).
"""

from __future__ import annotations

import re
from functools import lru_cache

from tstream.resp import Set, Status

from . import flags as F

_TOKEN = re.compile(r"\[|\]|\||\.\.\.|[^\s\[\]|]+")
_INTEGER_NAMES = {"count", "offset", "ms", "retry-ms", "expire-ms", "index", "cursor", "n", "batch-seq",
                  "value", "protover", "timeout", "id"}


def syntax_line(handler) -> str:
    doc = (handler.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


def summary(handler) -> str:
    doc = (handler.__doc__ or "").strip().split("\n\n")
    return " ".join(doc[1].split()) if len(doc) > 1 else ""


def _arg(word: str) -> dict:
    if word.isupper() or not any(c.islower() for c in word):
        return {"name": word.lower(), "type": "pure-token", "token": word}
    kind = "key" if word == "key" else "integer" if word in _INTEGER_NAMES else "string"
    if word == "pattern":
        kind = "pattern"
    return {"name": word, "type": kind}


def _parse(tokens: list[str], pos: int, closing: str | None) -> tuple[list[dict], int]:
    """Parse a sequence until ``closing``; returns (arguments, next position)."""
    args: list[dict] = []
    alternatives: list[list[dict]] = []
    while pos < len(tokens):
        tok = tokens[pos]
        if tok == closing:
            pos += 1
            break
        if tok == "[":
            inner, pos = _parse(tokens, pos + 1, "]")
            node = _group(inner)
            node.setdefault("flags", Set())
            node["flags"].append(Status("optional"))
            args.append(node)
        elif tok == "...":
            if args:
                last = args[-1]
                last.setdefault("flags", Set())
                if "multiple" not in last["flags"]:
                    last["flags"].append(Status("multiple"))
            pos += 1
            continue
        elif tok == "|":
            alternatives.append(args)
            args = []
        else:
            args.append(_arg(tok))
        pos = pos + 1 if tok != "[" else pos
    if alternatives:
        alternatives.append(args)
        return [{"name": "choice", "type": "oneof", "arguments": [_group(a) for a in alternatives]}], pos
    return args, pos


def _group(args: list[dict]) -> dict:
    """One argument for a bracketed sequence: itself, a token+value, or a block."""
    if len(args) == 1:
        return dict(args[0])
    if len(args) == 2 and args[0]["type"] == "pure-token" and args[1]["type"] != "pure-token":
        merged = dict(args[1])
        merged["token"] = args[0]["token"]
        return merged
    if args and args[0]["type"] == "pure-token":
        return {"name": args[0]["name"], "type": "block", "token": args[0]["token"], "arguments": args[1:]}
    return {"name": "+".join(a["name"] for a in args) or "block", "type": "block", "arguments": args}


@lru_cache(maxsize=None)
def _arguments_for(line: str) -> tuple:
    first_form = re.split(r"\s\|\s[A-Z]{2,}", line)[0]
    tokens = _TOKEN.findall(first_form)
    args, _ = _parse(tokens[1:], 0, None)  # tokens[0] is the command name
    return tuple(args)


def command_docs(name: bytes, cmd) -> dict:
    line = syntax_line(cmd.handler)
    return {
        "summary": summary(cmd.handler) or line,
        "since": "0.1.0",
        "group": "stream" if name.startswith(b"t") and name not in (b"time", b"type") else "server",
        "complexity": _complexity(cmd.handler),
        "arguments": list(_arguments_for(line)),
    }


def _complexity(handler) -> str:
    match = re.search(r"(O\([^)]*\)[^.\n]*)", handler.__doc__ or "")
    return match.group(1).strip() if match else ""


def command_info(name: bytes, cmd) -> list:
    first, last, step = cmd.keys
    return [
        name,
        cmd.arity,
        Set(Status(f) for f in F.names(cmd.flags)),
        first,
        last,
        step,
        Set(Status(c) for c in F.categories(cmd.flags, name)),
        [],  # tips
        [],  # key specs
        [],  # subcommands
    ]
