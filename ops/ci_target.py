"""Prints an environment's account and Region as GitHub Actions step outputs (the workflow's role ARNs).

  python -m ops.ci_target ENV >> "$GITHUB_OUTPUT"
"""

from __future__ import annotations

import sys

from stacks import config as platform_config


def main(argv: list[str]) -> int:
    env = platform_config.load().select(argv[0])[0]
    print(f"account={env.account}\nregion={env.region}")
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
