"""The command table and handlers: parse arguments, call the engine, build replies."""

from .dispatch import execute
from .errors import CommandError
from .table import COMMANDS, Command

__all__ = ["execute", "CommandError", "COMMANDS", "Command"]
