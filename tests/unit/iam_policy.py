"""What a synthesized IAM or key policy allows, asked as AWS would ask it: this principal, this action, this resource
with these tags, this request context. Tests assert behaviour (who may stop what) instead of a policy's shape.

The evaluator knows the subset of IAM the platform writes: Allow and Deny, Action and NotAction, Resource and
NotResource, Principal, wildcards (* and ?), the String, Arn, Null and Bool condition operators with IfExists, and
the CloudFormation functions that build ARNs (Ref, Fn::Join, Fn::GetAtt). Anything else raises
UnsupportedPolicy, so a test never passes on a policy it did not understand.

Rules followed (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html): an
explicit Deny wins, otherwise an Allow that matches allows, otherwise the request is denied; every operator of a
Condition must hold and, within one operator, every key; a key with several values matches when any value does; a
condition key absent from the request fails every operator except Null and the ...IfExists forms. Tag keys:
aws:ResourceTag/K and service:ResourceTag/K (autoscaling:ResourceTag/K) both read the resource's tag K.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

ACCOUNT, REGION = "123456789012", "us-east-1"


class UnsupportedPolicy(Exception):
    """The policy uses IAM the evaluator does not model."""


@dataclass(frozen=True)
class Request:
    action: str
    resource: str = "*"
    tags: dict = field(default_factory=dict)  # the resource's tags
    context: dict = field(default_factory=dict)  # other condition keys (kms:ViaService, aws:SourceAccount, ...)
    principal: Optional[dict] = None  # for resource policies: {"Service": "logs.us-east-1.amazonaws.com"} or {"AWS": arn}


def resolve(value: Any, *, account: str = ACCOUNT, region: str = REGION) -> str:
    """A template value as a string: pseudo parameters resolved, other references as ${LogicalId} or ${Id.Attr}."""
    if isinstance(value, bool):  # a condition value written as JSON true or false
        return str(value).lower()
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (function, argument), = value.items()
        if function == "Ref":
            return {"AWS::Partition": "aws", "AWS::AccountId": account, "AWS::Region": region,
                    "AWS::URLSuffix": "amazonaws.com"}.get(argument, "${" + argument + "}")
        if function == "Fn::Join":
            separator, parts = argument
            return separator.join(resolve(part, account=account, region=region) for part in parts)
        if function == "Fn::GetAtt":
            return "${" + ".".join(argument) + "}"
    raise UnsupportedPolicy(f"cannot resolve {value!r}")


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _glob(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    if re.search(r"\$\{[^}]*:[^}]*\}", pattern):
        raise UnsupportedPolicy(f"policy variables in {pattern!r}")
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL) is not None


def _key_value(key: str, request: Request) -> Optional[str]:
    match = re.fullmatch(r"[a-z0-9-]+:ResourceTag/(.+)", key, re.IGNORECASE)
    if match:
        return request.tags.get(match.group(1))
    return next((v for k, v in request.context.items() if k.lower() == key.lower()), None)


OPERATORS = {"StringEquals", "StringEqualsIgnoreCase", "StringLike", "StringNotEquals", "StringNotLike", "ArnEquals",
             "ArnLike", "ArnNotEquals", "ArnNotLike", "Null", "Bool"}


def _operator_holds(operator: str, conditions: dict, request: Request, resolve_value) -> bool:
    if operator.startswith(("ForAnyValue:", "ForAllValues:")):
        raise UnsupportedPolicy(f"set operator {operator}")
    if_exists = operator.endswith("IfExists")
    base = operator.removesuffix("IfExists")
    if base not in OPERATORS:
        raise UnsupportedPolicy(f"condition operator {operator}")
    for key, wanted in conditions.items():
        actual = _key_value(key, request)
        wanted = [resolve_value(w) for w in _listed(wanted)]
        if base == "Null":
            if [w.lower() for w in wanted] not in (["true"], ["false"]):
                raise UnsupportedPolicy(f"Null condition {wanted}")
            if (actual is None) != (wanted[0].lower() == "true"):
                return False
            continue
        if actual is None:
            if if_exists:
                continue
            return False
        if base in ("StringEquals", "ArnEquals"):
            holds = actual in wanted
        elif base == "StringEqualsIgnoreCase":
            holds = actual.lower() in [w.lower() for w in wanted]
        elif base in ("StringLike", "ArnLike"):
            holds = any(_glob(w, actual) for w in wanted)
        elif base in ("StringNotEquals", "ArnNotEquals"):
            holds = actual not in wanted
        elif base in ("StringNotLike", "ArnNotLike"):
            holds = not any(_glob(w, actual) for w in wanted)
        else:  # Bool
            holds = actual.lower() in [w.lower() for w in wanted]
        if not holds:
            return False
    return True


def _principal_matches(principal: Any, request: Request) -> bool:
    if principal is None:
        return True  # an identity policy: the principal is the role it is attached to
    if request.principal is None:
        raise UnsupportedPolicy("a resource policy needs a request with a principal")
    if principal == "*" or principal == {"AWS": "*"}:
        return True
    for kind, values in principal.items():
        if kind not in ("AWS", "Service"):
            raise UnsupportedPolicy(f"principal kind {kind}")
        if request.principal.get(kind) in [resolve(v) for v in _listed(values)]:
            return True
    return False


def statement_matches(statement: dict, request: Request) -> bool:
    unknown = set(statement) - {"Sid", "Effect", "Action", "NotAction", "Resource", "NotResource", "Condition",
                                "Principal"}
    if unknown or "NotPrincipal" in statement:
        raise UnsupportedPolicy(f"statement elements {unknown}")
    if not _principal_matches(statement.get("Principal"), request):
        return False
    if "Action" in statement:
        if not any(_glob(a, request.action, ignore_case=True) for a in _listed(statement["Action"])):
            return False
    elif any(_glob(a, request.action, ignore_case=True) for a in _listed(statement["NotAction"])):
        return False
    if "Resource" in statement:
        if not any(_glob(resolve(r), request.resource) for r in _listed(statement["Resource"])):
            return False
    elif "NotResource" in statement:
        if any(_glob(resolve(r), request.resource) for r in _listed(statement["NotResource"])):
            return False
    return all(_operator_holds(operator, conditions, request, resolve)
               for operator, conditions in statement.get("Condition", {}).items())


def allowed(statements: Iterable[dict], request: Request) -> bool:
    """IAM's decision for one policy set: an explicit Deny wins, then any Allow, else an implicit deny."""
    matching = [s for s in statements if statement_matches(s, request)]
    if any(s["Effect"] == "Deny" for s in matching):
        return False
    return any(s["Effect"] == "Allow" for s in matching)


def actions(statement: dict) -> list[str]:
    if "NotAction" in statement:
        raise UnsupportedPolicy("NotAction in an Allow grants everything else")
    return _listed(statement["Action"])


def resources(statement: dict) -> list[str]:
    if "NotResource" in statement:
        raise UnsupportedPolicy("NotResource")
    return [resolve(r) for r in _listed(statement["Resource"])]


def role_statements(template: dict, role: str) -> list[dict]:
    """Every statement of the inline policies (AWS::IAM::Policy) attached to the role with this logical id."""
    found = []
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role} in resource["Properties"].get("Roles", []):
            found += resource["Properties"]["PolicyDocument"]["Statement"]
    return found


def function_role(template: dict, function: str) -> str:
    """The logical id of a Lambda function's execution role."""
    role = template["Resources"][function]["Properties"]["Role"]
    if not (isinstance(role, dict) and "Fn::GetAtt" in role):
        raise UnsupportedPolicy(f"role of {function}: {role!r}")
    return role["Fn::GetAtt"][0]


def concrete(pattern: str, name: str = "x1") -> str:
    """An ARN the pattern matches, each wildcard replaced by a name."""
    return pattern.replace("*", name).replace("?", "x")
