"""What stops spend: the budget guard, and the budget scope (``scope``) by which it finds what it governs.

The names of 0.3's ``ml_platform_constructs.governance`` module (``govern``, ``ACCOUNT_SCOPE``, ...) are still
exported here: that path became this folder."""

from .._package import lazy_exports

_EXPORTS = {
    "BudgetGuard": "budget_guard",
    "ACCOUNT_SCOPE": "scope",
    "BUDGET_SCOPE_TAG": "scope",
    "UNGOVERNED_WARNING": "scope",
    "govern": "scope",
    "governs_something": "scope",
    "validate_budget_scope": "scope",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
