"""cfn-lint over every template of a synthesized cloud assembly.

Usage: python -m ops.lint [ASSEMBLY_DIR]   (default cdk.out); exits 1 when any template has an error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cfnlint.api import decode_str, run_template_by_data
from cfnlint.config import ConfigMixIn
from cfnlint.runner import Runner

_RULES: dict[tuple[str, ...], tuple] = {}


def templates(assembly_dir: Path) -> list[Path]:
    return sorted(assembly_dir.rglob("*.template.json"))


def lint_template(path: Path, regions: list[str]) -> list[str]:
    """cfn-lint findings at error level (E*) for one template, as printable lines.

    The rule set is loaded once per Region list and reused: loading it is most of cfn-lint's time.
    """
    key = tuple(regions)
    if key not in _RULES:
        config = ConfigMixIn(regions=regions)
        _RULES[key] = (config, Runner(config).rules)
    config, rules = _RULES[key]
    template, errors = decode_str(path.read_text())
    matches = errors or list(run_template_by_data(template, config, rules))
    return [f"{path.name}: {m.rule.id} {m.message} ({'/'.join(map(str, m.path))})"
            for m in matches if m.rule.id.startswith("E")]


def main(argv: list[str]) -> int:
    assembly_dir = Path(argv[0] if argv else "cdk.out")
    paths = templates(assembly_dir)
    if not paths:
        print(f"lint: no templates under {assembly_dir}; synthesize first", file=sys.stderr)
        return 1
    errors = [line for path in paths for line in lint_template(path, _regions(path))]
    for line in errors:
        print(line)
    print(f"cfn-lint: {len(paths)} templates, {len(errors)} errors")
    return 1 if errors else 0


def _regions(path: Path) -> list[str]:
    """The Region the template is bound to, from its assembly manifest (us-east-1 if unbound)."""
    manifest = json.loads((path.parent / "manifest.json").read_text())
    for artifact in manifest["artifacts"].values():
        if artifact.get("properties", {}).get("templateFile") == path.name:
            region = artifact["environment"].rsplit("/", 1)[-1]
            return [region if region != "unknown-region" else "us-east-1"]
    return ["us-east-1"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
