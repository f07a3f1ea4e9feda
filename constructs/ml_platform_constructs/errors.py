"""The one error type the library raises for bad input."""

from __future__ import annotations

from typing import Any


class ValidationError(ValueError):
    """Bad input to a construct, caught at synth time instead of at deploy time.

    The message names the prop, the bad value, what is allowed and how to fix it.
    """

    def __init__(self, construct: str, prop: str, value: Any, allowed: str, fix: str) -> None:
        self.construct = construct
        self.prop = prop
        self.value = value
        super().__init__(f"{construct}: {prop}={value!r} is invalid: {allowed}. Fix: {fix}")
