"""The one error of configuration: a one-line message for the operator, never a trace."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting is invalid; the message is one line meant for the operator."""
