"""What a plain loop's checkpoint holds and how it comes back (issue 35): every tracked object, every generator, the
data position; a corrupt newest checkpoint falls back to the one before; the data's order and random draws are
functions of (seed, epoch, sample); parameters that do not make the run (flags) never refuse a retry."""

from __future__ import annotations

import random

import numpy
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from ml_platform_job import TrainingJob
from ml_platform_job.data import JobSampler, SeededSamples


@pytest.fixture
def env(tmp_path):
    return {"ML_PLATFORM_CHECKPOINT_URI": str(tmp_path / "ckpt"), "ML_PLATFORM_STOP_FILE": str(tmp_path / "stop"),
            "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid")}


@pytest.fixture
def started(env):
    jobs = []

    def start(**kwargs):
        job = TrainingJob.start(env=env, **{"params": {"lr": 0.1}, "seed": 7, **kwargs})
        jobs.append(job)
        return job
    yield start
    for job in jobs:
        job.stop.uninstall()


def objects():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    return model, optimizer, scheduler, scaler


def test_a_checkpoint_brings_back_every_object_and_generator(started):
    job = started()
    model, optimizer, scheduler, scaler = objects()
    job.track(model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler)
    scaler.scale(model(torch.randn(4, 3)).sum()).backward()
    scaler.step(optimizer)
    scaler.update(512.0)
    scheduler.step()
    job.step, job._position = 5, 10
    job.save()
    draws = (random.random(), numpy.random.rand(), torch.rand(1).item())

    again = started()
    fresh = objects()
    again.track(model=fresh[0], optimizer=fresh[1], scheduler=fresh[2], scaler=fresh[3])
    assert again.resumed and (again.step, again._position) == (5, 10)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh[0].state_dict().values()))
    assert fresh[1].state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]
    assert fresh[2].state_dict()["last_epoch"] == 1 and fresh[3].get_scale() == 512.0
    assert (random.random(), numpy.random.rand(), torch.rand(1).item()) == draws
    assert again.run.attempt["restored_from"]["step"] == 5


def test_a_corrupt_newest_checkpoint_falls_back_to_the_one_before(started, capsys):
    job = started()
    model = torch.nn.Linear(2, 1)
    job.track(model=model)
    job.step = 1
    job.save()
    torch.nn.init.constant_(model.weight, 3.0)
    job.step = 2
    newest = job.save()
    job.store.location.write(newest.folder + "state.pt", b"not a checkpoint")
    fresh = torch.nn.Linear(2, 1)
    started().track(model=fresh)
    assert not torch.equal(fresh.weight, torch.full((1, 2), 3.0))
    assert "its bytes are not the ones its marker names; trying the checkpoint before it" in capsys.readouterr().err


def test_every_object_that_cannot_be_saved_is_named_at_once(started):
    job = started()
    with pytest.raises(TypeError, match=r"track: epoch \(int\), data \(list\): no state_dict\(\)/load_state_dict\(\)"):
        job.track(model=torch.nn.Linear(1, 1), epoch=3, data=[1])
    with pytest.raises(TypeError, match="track: name what to save"):
        job.track()


def test_the_loader_makes_its_own_sampler_and_refuses_to_run_untracked(started):
    job = started()
    data = TensorDataset(torch.arange(10.0))
    with pytest.raises(TypeError, match="loader: sampler, generator: the job's loader makes its own"):
        job.loader(data, sampler=None, generator=None)
    loader = job.loader(data, batch_size=2)
    with pytest.raises(RuntimeError, match="loader: called twice"):
        job.loader(data)
    with pytest.raises(RuntimeError, match=r"job.track\(model=..., optimizer=..., ...\) before the first batch"):
        next(iter(loader))


def test_a_retry_with_another_logging_interval_continues_the_run_and_another_lr_is_refused(started):
    first = started(params={"lr": 0.1, "log_interval": 10, "output_dir": "/tmp/a"})
    again = started(params={"lr": 0.1, "log_interval": 50, "output_dir": "/tmp/b"})
    assert again.run_id == first.run_id
    assert again.run.record["passport"]["flags"] == {"log_interval": 10, "output_dir": "/tmp/a"}
    with pytest.raises(SystemExit, match=r"was started with another configuration: params.lr 0.1 -> 0.2"):
        started(params={"lr": 0.2, "log_interval": 10})


def test_each_epochs_order_comes_from_the_seed_and_the_epoch_alone():
    data = list(range(50))
    sampler = JobSampler(data, seed=3, shuffle=True, num_replicas=1, rank=0)
    sampler.set_epoch(4)
    once = list(sampler)
    for epoch in (0, 1, 2, 3):  # however many epochs came before
        sampler.set_epoch(epoch)
        list(sampler)
    sampler.set_epoch(4)
    assert list(sampler) == once and sorted(once) == data
    assert JobSampler(data, seed=3, shuffle=True, num_replicas=1, rank=0).order() != once  # epoch 0's differs


def test_a_resumed_epoch_trains_the_rest_exactly_once_even_at_another_world_size():
    data = list(range(48))
    before = [JobSampler(data, seed=1, shuffle=True, num_replicas=4, rank=r) for r in range(4)]
    for sampler in before:
        sampler.set_epoch(2)
    order = before[0].order()
    trained = 20  # global samples, by 4 ranks
    after = [JobSampler(data, seed=1, shuffle=True, num_replicas=2, rank=r) for r in range(2)]
    for sampler in after:
        sampler.set_position(2, trained)
    assert after[0].remaining() + after[1].remaining() == len(data) - trained
    rest = [index for sampler in after for index in sampler]
    assert sorted(rest) == sorted(order[trained:]) and len(rest) == len(data) - trained
    assert [list(sampler) for sampler in after] == [rest[:14], rest[14:]]  # a second iterator starts there too


class Noisy(Dataset):
    """Each sample drawn with every generator a transform might use."""

    def __len__(self):
        return 12

    def __getitem__(self, index):
        return torch.tensor([index, random.random(), numpy.random.rand(), torch.rand(1).item()])


def test_a_samples_random_draws_are_the_same_in_any_worker_and_leave_the_steps_draws_alone():
    def epoch(workers):
        sampler = JobSampler(Noisy(), seed=9, shuffle=True, num_replicas=1, rank=0, tagged=True)
        sampler.set_epoch(1)
        loader = DataLoader(SeededSamples(Noisy(), 9), sampler=sampler, batch_size=4, num_workers=workers,
                            persistent_workers=workers > 0, generator=torch.Generator())  # as TrainingJob.loader
        return torch.cat(list(loader))

    torch.manual_seed(0)
    in_process = epoch(0)
    step_draw = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(1), step_draw)  # loading in the main process drew nothing of the step's generator
    assert torch.equal(in_process, epoch(2))
    assert len(set(in_process[:, 1].tolist())) == 12  # and each sample's draws are its own


def test_an_fp16_overflows_infinite_norm_is_not_judged_under_a_gradscaler_and_is_without_one(started):
    """A GradScaler skips an overflow step and halves its scale: the infinite norm a script passes on such a step is
    no broken model (issue 39's non_finite rule would otherwise count it). Without a scaler it is judged."""
    from ml_platform_job.health import HealthRules

    job = started(health=HealthRules(check_every=1))
    model, optimizer, scheduler, scaler = objects()
    job.track(model=model, optimizer=optimizer, scaler=scaler)
    job.observe(grad_norm=torch.tensor(float("inf")))
    assert not job.health.has_grad_norm
    job.observe(grad_norm=torch.tensor(3.0))
    assert job.health.has_grad_norm

    plain = started(health=HealthRules(check_every=1))
    plain.track(model=model, optimizer=optimizer)
    plain.observe(grad_norm=float("inf"))
    assert plain.health.has_grad_norm


def test_a_health_stop_at_a_step_just_saved_marks_that_checkpoint_and_a_resume_passes_it_over(started):
    from ml_platform_job.health import Verdict

    job = started()
    model, optimizer, scheduler, scaler = objects()
    job.track(model=model, optimizer=optimizer)
    job.step = 5
    job.save()
    job.step = 9
    job.save()  # the periodic save of step 9; the rule fires at step 9 right after it
    verdict = Verdict("overfit", "stop", 9, {"val_loss": 2.0}, "validation loss over its best")
    job.health_stopped(verdict, saved=True)
    assert [(c.step, c.health_stop) for c in job.store.complete()] == [(5, None), (9, "overfit")]
    again = started()
    again.track(model=objects()[0], optimizer=objects()[1])
    assert again.resumed and again.step == 5


def test_a_fused_optimizers_gradients_under_a_gradscaler_are_judged_unscaled_and_its_overflows_not_at_all(started):
    """torch.amp.GradScaler.step hands a fused optimizer its scale and found_inf as attributes: the health check's
    norm is the gradients' true norm (not 1,024 times it), and an overflow step is not judged."""
    from ml_platform_job.health import HealthRules

    job = started(health=HealthRules(check_every=1))
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    job.track(model=model, optimizer=optimizer, scaler=scaler)
    x = torch.randn(4, 3)
    scaler.scale(model(x).sum()).backward()
    true_norm = torch.nn.utils.get_total_norm([p.grad / 1024.0 for p in model.parameters()]).item()
    scaler.step(optimizer)
    scaler.update()
    assert job.health._grad == pytest.approx(true_norm, rel=1e-5)
    job.health._grad = None
    optimizer.zero_grad()
    (scaler.scale(model(x).sum()) * float("inf")).backward()  # an overflow: skipped inside the fused step
    scaler.step(optimizer)
    assert job.health._grad is None
