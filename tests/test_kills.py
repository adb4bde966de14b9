"""Jobs killed with SIGKILL at seeded random times, then resumed, end with the uninterrupted run's output (bit for bit,
as each job promises), and nothing a kill leaves looks complete: the bounded slice of the schedule in
``benchmarks/kills/kills.py`` (20 points per job there, with its recorded results), one point per trainer here,
mid-job: past a seeded milestone (a step, an epoch, a shard) plus a seeded delay."""

import importlib.util
import random
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def kills():
    spec = importlib.util.spec_from_file_location("kills", ROOT / "benchmarks" / "kills" / "kills.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def inputs(kills, tmp_path_factory):
    return kills.prepare_inputs(tmp_path_factory.mktemp("kills"))


# embed's kill mid-job is tests/test_embed.py's (SIGTERM) and the schedule's (SIGKILL); here the two trainers
@pytest.mark.parametrize("job", ["pretrain", "finetune"])
def test_a_job_killed_at_a_random_point_resumes_to_the_uninterrupted_output(kills, inputs, job, tmp_path):
    reference_dir = tmp_path / "reference"
    kills.run_to_end(kills.command(job, inputs, reference_dir))
    reference = kills.output(job, reference_dir)
    rng = random.Random(f"{job}-suite")
    milestone = rng.randint(1, kills.MILESTONES[job] - 1)  # mid-job
    extra = rng.uniform(0, 0.5)  # within the next step, epoch or shard: the job is still running
    result = kills.point(job, inputs, reference, tmp_path / "killed", milestone, extra)
    assert result["killed"] and result["equal"], result
