"""How a BudgetGuard finds what it governs: a tag that each governed construct sets on itself.

The contract, for any construct whose spend a ``BudgetGuard`` must be able to stop (``SpotGpuFleet`` today):

- the construct calls ``govern(resource, budget_scope)`` on the resource the guard acts on (the Auto Scaling
  group of a fleet), which tags it ``ml-platform:budget-scope=<budget_scope>``;
- a guard with the same ``budget_scope`` selects resources by that tag, and its IAM policy allows changes
  only to resources carrying it.

Both sides default to ``ACCOUNT_SCOPE`` ("account"): a guard governs every governed construct of its account
and Region that did not choose another scope, with no tag from the app. Several guards in one account (one
per environment) pass the same ``budget_scope`` (e.g. the environment name) to the guard and to the
constructs it governs. A guard warns at synth (``ml-platform:budget-guard-governs-nothing``) when nothing in
its app that a stop can stop carries its scope; and where an app has a guard, a governed construct that no guard of
the app governs (another scope, account or Region) warns (``ml-platform:ungoverned-compute``), naming the guards'
scopes.

A ``MonitoredEndpoint`` carries its scope too (``budget_scope``), but is not governed: a stop lists it as left
running and never stops it. ``endpoints_carrying`` finds those of an app, for a guard whose scope holds nothing
else (a serving-only scope).
"""

from __future__ import annotations

import re

from aws_cdk import Annotations, Aspects, Stack, Tag, Tags, Token
from aws_cdk import aws_sagemaker as sagemaker
import jsii
from constructs import IConstruct, IValidation

from ..errors import ValidationError
from ..runtime.handlers.budget_guard import ACCOUNT_SCOPE, BUDGET_SCOPE_TAG

# Tag values: up to 256 characters (https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_Tag.html), kept
# to the set every service accepts, so any governed construct can carry the same value:
# https://docs.aws.amazon.com/batch/latest/userguide/tag-restrictions.html
_SCOPE = re.compile(r"^[A-Za-z0-9_.:/=+@-]{1,256}$")


def validate_budget_scope(construct: str, budget_scope: str) -> None:
    if not Token.is_unresolved(budget_scope) and not _SCOPE.match(budget_scope):
        raise ValidationError(construct, "budget_scope", budget_scope,
                              "1-256 letters, digits or _ . : / = + @ -",
                              f"use '{ACCOUNT_SCOPE}' (the default) or an environment name such as 'dev'")


# The scopes govern() tagged, and what it tagged, are kept on the app's root construct (jsii gives every construct
# one Python object), so a guard asks there whether anything carries its scope instead of reading every resource's
# tags through jsii.
_GOVERNED_ATTRIBUTE = "_ml_platform_governed_scopes"
_GOVERNED_RESOURCES = "_ml_platform_governed_resources"
_GUARDS = "_ml_platform_budget_guards"
UNGOVERNED_WARNING = "ml-platform:ungoverned-compute"


def govern(resource: IConstruct, budget_scope: str = ACCOUNT_SCOPE) -> None:
    """Marks ``resource`` (and what it launches) as governed by the BudgetGuard of ``budget_scope``."""
    Tags.of(resource).add(BUDGET_SCOPE_TAG, budget_scope, apply_to_launched_instances=True)
    root = resource.node.root
    if not hasattr(root, _GOVERNED_ATTRIBUTE):
        setattr(root, _GOVERNED_ATTRIBUTE, set())
        setattr(root, _GOVERNED_RESOURCES, [])
        root.node.add_validation(_EveryGovernedResourceHasAGuard(root))
    getattr(root, _GOVERNED_ATTRIBUTE).add(budget_scope)
    getattr(root, _GOVERNED_RESOURCES).append((resource, budget_scope))


def register_guard(guard: IConstruct) -> None:
    """Records a guard that stops spend (it has ``budget_scope``), for the ungoverned-compute check: the guard calls
    this itself, so this module needs no import of the guard's (which imports this one)."""
    root = guard.node.root
    if not hasattr(root, _GUARDS):
        setattr(root, _GUARDS, [])
    getattr(root, _GUARDS).append(guard)


def governs_something(scope: IConstruct, budget_scope: str) -> bool:
    """Whether anything in ``scope``'s app was marked with ``govern(..., budget_scope)``."""
    return budget_scope in getattr(scope.node.root, _GOVERNED_ATTRIBUTE, set())


def endpoints_carrying(scope: IConstruct, budget_scope: str) -> list[IConstruct]:
    """The SageMaker endpoints of ``scope``'s app tagged ``ml-platform:budget-scope=<budget_scope>`` (a
    ``MonitoredEndpoint`` tags its own). A tag added with ``Tags.of`` reaches a resource only when synthesis walks
    past it, so an endpoint not reached yet is read from the nearest tag aspect above it. It walks the whole tree:
    a guard asks only when ``govern()`` recorded nothing of its scope."""
    found = []
    for construct in scope.node.root.node.find_all():
        if not isinstance(construct, sagemaker.CfnEndpoint):
            continue
        value = construct.tags.tag_values().get(BUDGET_SCOPE_TAG)
        for above in reversed(construct.node.scopes) if value is None else ():
            tags = [a for a in Aspects.of(above).all if isinstance(a, Tag) and a.key == BUDGET_SCOPE_TAG]
            if tags:
                value = tags[-1].value  # the last one added there wins, as the nearest one does over those above
                break
        if value == budget_scope:
            found.append(construct)
    return found


def _same(a: str, b: str) -> bool:
    return a == b or Token.is_unresolved(a) or Token.is_unresolved(b)


def _region(stack: Stack) -> str:
    return "any Region" if Token.is_unresolved(stack.region) else stack.region


def display_path(construct: IConstruct) -> str:
    """A construct's path as a user wrote it: an L2's path for its main resource (``.../Resource``)."""
    path = construct.node.path
    return path[:-len("/Resource")] if path.endswith("/Resource") else path


@jsii.implements(IValidation)
class _EveryGovernedResourceHasAGuard:
    """Where an app has a BudgetGuard that stops spend, warns on each governed resource that none of the app's guards
    governs: the same scope, account and Region (a guard acts only in its own). Runs once per app, at validation
    time, when every construct exists."""

    def __init__(self, root: IConstruct) -> None:
        self._root = root

    def validate(self) -> list[str]:
        guards = getattr(self._root, _GUARDS, [])
        if not guards:
            return []
        where = {guard: Stack.of(guard) for guard in guards}
        for resource, scope in getattr(self._root, _GOVERNED_RESOURCES, []):
            stack = Stack.of(resource)
            if any(guard.budget_scope == scope and _same(stack.account, where[guard].account)
                   and _same(stack.region, where[guard].region) for guard in guards):
                continue
            guarded = ", ".join(f"{guard.budget_scope!r} ({guard.node.path}, {_region(where[guard])})" for guard in guards)
            Annotations.of(resource).add_warning_v2(UNGOVERNED_WARNING, (
                f"{display_path(resource)} has budget_scope {scope!r} ({_region(stack)}), which no BudgetGuard of this app "
                f"governs: the guards here govern {guarded}, so a budget stop would leave it running. Pass the guard's "
                "budget_scope to it, or acknowledge this warning if a guard in another app governs its scope."))
        return []
