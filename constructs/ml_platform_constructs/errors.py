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


def refusal_leaves_no_node(cls: type) -> type:
    """Class decorator for the library's constructs: when ``__init__`` refuses its input (any exception), the
    construct's node is taken out of its scope again, so a caller that catches the error (a notebook, a test, an
    app that tries another configuration) can reuse the id and synthesizes no half-built construct. What the
    construct had already added to other scopes (rare: validation runs before anything is created) stays."""
    init = cls.__init__

    def __init__(self, scope: Any, id: str, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, scope, id, *args, **kwargs)
        except BaseException:
            node = getattr(scope, "node", None)
            if node is not None and any(child.node.id == id and child is self for child in node.children):
                node.try_remove_child(id)
            raise

    __init__.__doc__, __init__.__wrapped__ = init.__doc__, init  # type: ignore[attr-defined]
    __init__.__qualname__, __init__.__name__ = init.__qualname__, init.__name__
    cls.__init__ = __init__  # type: ignore[misc]
    cls.__refusal_leaves_no_node__ = True  # type: ignore[attr-defined]
    return cls
