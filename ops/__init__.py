"""The platform's operator commands (one module each, behind ./platform), the local emulator path in local/."""

import sys as _sys

if _sys.argv[:1] == ["-m"]:  # python -m ops.<command>: Ctrl-C ends it with one line from the start, imports included
    from ops import terminal as _terminal

    _terminal.install_handlers()
