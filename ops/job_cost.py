"""What an environment's training job really cost, read in ENV's account and Region (read-only calls).

  ./platform job cost ENV JOB_ID [--json] [--instance-type T --lifecycle spot|on-demand]

Each attempt is priced at its instance type's rate in the price table ./platform cost uses, with the job's own
metrics read back for its cost per accuracy point and per million tokens (the library's
`python -m ml_platform_constructs job cost JOB_ID` is the same command for a team without the platform app).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from ml_platform_constructs.advice.job_cost import LIFECYCLES, check_override, format_cost, gather

from ops.cli import Parser, aws_errors_in_one_line, refusals_are_bad_arguments


@aws_errors_in_one_line
def main(argv: list[str], session_factory=None) -> int:
    parser = Parser("./platform job cost", description=__doc__)
    parser.add_argument("env")
    parser.add_argument("job_id")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--instance-type", help="for attempts whose container instance ECS no longer describes")
    parser.add_argument("--lifecycle", choices=LIFECYCLES)
    args = parser.parse_args(argv)
    with refusals_are_bad_arguments("./platform job cost"):
        override = check_override(args.instance_type, args.lifecycle)
    from ops.aws_access import environment, session_for

    env = environment(args.env)
    session = (session_factory or session_for)(env)  # credentials of env's own account, or a clear refusal
    clients = {name: session.client(name) for name in ("batch", "ecs", "cloudwatch")}
    cost = gather(args.job_id, clients, datetime.now(timezone.utc), override, region=env.region)
    print(json.dumps(cost.to_json(), indent=1) if args.json else format_cost(cost))
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
