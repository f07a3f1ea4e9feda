"""Operator tooling: template lint, the local emulator deploy and its report."""
