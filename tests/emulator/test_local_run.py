"""The end of ./platform up: the example job run as a queue runs it, against the emulator's S3 (moto server on
127.0.0.1), a real SIGTERM mid-run, exit 143, a second attempt that resumes and finishes, one run in the local store."""

import re

from mlflow.tracking import MlflowClient

from ops.local import run as local_run


def test_up_ends_with_one_recorded_run_across_a_simulated_spot_reclaim(mlflow_store, tmp_path, capsys):
    store = tmp_path / "store"
    assert local_run.main(["--store", str(store), "--epochs", "12"]) == 0
    out = capsys.readouterr().out
    # The epoch attempt 1 says it stopped at is the one attempt 2 resumes from, however many epochs it trained
    # before the signal landed.
    stopped = re.search(r"attempt 1: SIGTERM after it reported epoch 3 \(a simulated Spot reclaim\); checkpointed at "
                        r"epoch (\d+) -> exit 143", out)
    assert stopped and int(stopped[1]) >= 3, out
    assert re.search(rf"attempt 2: resuming from the checkpoint of epoch {stopped[1]}( \(batch \d+ of epoch "
                     rf"{int(stopped[1]) + 1}\))? -> exit 0: run ", out), out
    client = MlflowClient(mlflow_store)
    [run] = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FINISHED" and run.data.tags["ml_platform.attempts"] == "2"
    assert run.data.metrics["spot_interruptions"] == 1 and run.data.metrics["holdout_accuracy"] > 0.75
    # up shows the run: its passport, cost and cost per accuracy point.
    assert f"Run {run.info.run_id} (example-" in out and "passport:" in out
    assert "USD per accuracy point" in out and "1 Spot interruption(s)" in out
    # The run's goodput ledger in one line: the simulated reclaim is a restore; no work is lost, since the stop saved
    # the very batch it came at (issue 35; before it, the stopped epoch's steps were lost).
    [ledger] = [line for line in out.splitlines() if line.lstrip().startswith("ledger: ")]
    assert re.search(r"ledger: \d+ s, [\d.]+ USD: .*restore \d+%", ledger) and "lost " not in ledger, ledger
    assert len(ledger) <= 120
