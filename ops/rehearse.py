"""./platform job rehearse: the job side's rehearsal (``python -m ml_platform_job rehearse``) from the platform's
checkout, with the emulator's S3 as the checkpoint store when asked.

  ./platform job rehearse [--s3] [--exact] [--datasets DIR] [--json] [...] -- COMMAND...

Every option but ``--s3`` is the library's (``python -m ml_platform_job rehearse --help``). With ``--s3`` the
checkpoints and the run record go to a bucket of moto's S3 on 127.0.0.1, as a queue's job writes them to the dataset
bucket (``s3://<bucket>/checkpoints/<queue>/<job name>/``), and the job gets the emulator's endpoint and test
credentials. The command runs as given: a job that needs PyTorch runs with an interpreter that has it (after
``./platform test-frameworks``: ``.venv/frameworks/bin/python``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from ml_platform_job import __main__ as job_cli

ACCOUNT, REGION, BUCKET = "123456789012", "us-east-1", "ml-platform-rehearsal"


def main(argv: list[str]) -> int:
    ours, command = (argv[:argv.index("--")], argv[argv.index("--"):]) if "--" in argv else (argv, [])
    if "-h" in ours or "--help" in ours:
        try:
            code = job_cli.main(["rehearse", "--help"])
        except SystemExit as done:  # argparse prints the help and exits
            code = done.code
        print("\n./platform job rehearse also takes --s3: checkpoints and the run record in the emulator's S3\n"
              "(moto on 127.0.0.1), as a queue's job writes them to the dataset bucket")
        return int(code or 0)
    if "--s3" not in ours:
        return job_cli.main(["rehearse", *ours, *command])
    if any(arg == "--checkpoints" or arg.startswith("--checkpoints=") for arg in ours):
        print("error: --s3 and --checkpoints: pick one (--s3 makes the checkpoint prefix in the emulator's S3)",
              file=sys.stderr)
        return 2
    import boto3

    from ops.local.emulator import client_environment, moto_server

    ours = [arg for arg in ours if arg != "--s3"]
    logs = tempfile.mkdtemp(prefix="ml-platform-rehearsal-moto-")
    with moto_server(ACCOUNT, os.path.join(logs, "moto.log")) as port:
        environment = client_environment(port, REGION)
        os.environ.update(environment)  # this process reads the checkpoints too
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        prefix = f"s3://{BUCKET}/checkpoints/rehearsal/{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}/"
        return job_cli.main(["rehearse", "--checkpoints", prefix, *ours, *command])
