"""Many runs on one machine: each worker on its own GPU(s) from CUDA_VISIBLE_DEVICES, CPU threads shared out,
`--jobs 2` on a CPU, and a run trained data parallel by `--gpus-per-run 2` (torchrun, gloo)."""

import multiprocessing
import os
import platform
import tempfile
from concurrent.futures import ProcessPoolExecutor

import pandas as pd
import pytest
from typer.testing import CliRunner

import cli
from gatedv_stats.core.errors import InputError
from helpers import sweep_json
from trainer.grid import launch
from trainer.run import device
from trainer.run.recipe import RunSpec, Runtime
from trainer.run.train import train

GRID = """
name = "pool"
data = "{data}"
config = "tiny"
variants = {variants}
seeds = [5]
lrs = [0.01]
updates = 2
eval_every = 2
batch_size = 2
out = "runs"
"""


def _visible(worker_environments):
    return [environment.get("CUDA_VISIBLE_DEVICES") for environment in worker_environments]


def test_visible_gpus_respects_an_existing_list_and_else_counts_devices():
    assert launch.visible_gpus({}, 4) == ["0", "1", "2", "3"]
    assert launch.visible_gpus({"CUDA_VISIBLE_DEVICES": "4,6"}, 2) == ["4", "6"]
    assert launch.visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-1a2b, MIG-3c4d"}, 2) == ["GPU-1a2b", "MIG-3c4d"]
    assert launch.visible_gpus({"CUDA_VISIBLE_DEVICES": "1,2,3"}, 2) == ["1", "2"]  # CUDA saw only two of them
    assert launch.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, 0) == []
    assert launch.visible_gpus({}, 0) == []


def test_each_worker_gets_its_own_gpus_and_shares_round_robin_when_there_are_more_workers():
    eight = [str(index) for index in range(8)]
    assert _visible(launch.gpu_assignment(eight[:4], 4)) == ["0", "1", "2", "3"]
    assert _visible(launch.gpu_assignment(["4", "6"], 2)) == ["4", "6"]
    assert _visible(launch.gpu_assignment(["0", "1"], 5)) == ["0", "1", "0", "1", "0"]
    assert _visible(launch.gpu_assignment(eight, 4, gpus_per_run=2)) == ["0,1", "2,3", "4,5", "6,7"]
    assert _visible(launch.gpu_assignment(["0", "1", "2"], 2, gpus_per_run=2)) == ["0,1", "2,0"]
    assert launch.gpu_assignment([], 3) == [{}, {}, {}]  # a CPU machine: environments left alone
    assert launch.gpu_assignment([], 1, gpus_per_run=2) == [{}]  # gloo processes on a CPU


def test_the_default_jobs_are_one_per_gpu_and_threads_are_split_evenly():
    assert launch.default_jobs(["0", "1", "2", "3"]) == 4
    assert launch.default_jobs(["0", "1", "2", "3"], gpus_per_run=2) == 2
    assert launch.default_jobs([]) == 1
    assert launch.threads_per_worker(16, 4) == 4
    assert launch.threads_per_worker(2, 3) == 1
    assert launch.uses_gpus("auto") and launch.uses_gpus("cuda") and not launch.uses_gpus("cuda:1")
    assert not launch.uses_gpus("cpu")


@pytest.mark.parametrize(("args", "message"), [
    ((["0"], 0), "--jobs: must be at least 1, got 0"),
    ((["0"], 1, 0), "--gpus-per-run: must be at least 1, got 0"),
    ((["0", "1"], 1, 4), "--gpus-per-run: 4 but only 2 GPU(s) are visible"),
])
def test_impossible_assignments_are_one_line_errors(args, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        launch.gpu_assignment(*args)


def _worker_view(barrier):
    barrier.wait(timeout=60)  # both workers hold a task at once, so each reports its own slot
    import torch

    return os.environ.get("CUDA_VISIBLE_DEVICES"), torch.get_num_threads()


@pytest.mark.slow
def test_every_spawned_worker_starts_with_its_own_environment():
    environments = launch.gpu_assignment(["GPU-a", "GPU-b", "GPU-c", "GPU-d"], 2, gpus_per_run=2)
    with multiprocessing.get_context("spawn").Manager() as manager:
        barrier = manager.Barrier(2)
        with launch.worker_pool(environments, threads=1) as pool:
            views = sorted(future.result() for future in [pool.submit(_worker_view, barrier) for _ in range(2)])
    assert views == [("GPU-a,GPU-b", 1), ("GPU-c,GPU-d", 1)]


def _page_faults_of_growing_blocks():
    """Whether this process keeps freed memory, and the minor page faults of allocating, filling and freeing
    tensors of 1, 2, ..., 20 MiB in turn: glibc's default maps each one apart (it is larger than the last one
    freed) and faults in all 53,760 pages; a process that keeps freed memory reuses its heap."""
    import resource

    import torch

    torch.ones(1024)  # the code the loop runs, faulted in first
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for mib in range(1, 21):
        torch.ones(mib << 18)
    return device.retain_freed_memory(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the allocator settings are glibc's")
@pytest.mark.slow
def test_workers_keep_freed_memory_instead_of_faulting_it_back():
    with launch.worker_pool([{}], threads=1) as pool:
        retained, worker_faults = pool.submit(_page_faults_of_growing_blocks).result()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as plain:
        _, plain_faults = plain.submit(_page_faults_of_growing_blocks).result()
    assert retained  # glibc took the settings
    assert plain_faults > 40_000
    assert worker_faults < 20_000  # its heap grows by 20 MiB (5,120 pages) once or twice and is reused


def test_torchrun_trains_one_run_in_k_processes():
    command = launch.torchrun_command("run.pkl", "outcome.json", 4, "scratch/torchrun")
    assert command[1:7] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4",
                            "--log-dir=scratch/torchrun", "-m"]
    assert command[7:] == ["trainer.grid.launch", "run.pkl", "outcome.json"]


@pytest.mark.slow
def test_two_jobs_on_a_cpu_train_the_grid(prepared_data, tmp_path):
    path = tmp_path / "pool.toml"
    path.write_text(GRID.format(data=prepared_data, variants='["baseline", "gatedv"]'))
    runs = sweep_json(path, "--device", "cpu", "--jobs", "2")["runs"]
    assert [(run["variant"], run["action"], run["status"]) for run in runs] == [
        ("baseline", "trained", "finished"), ("gatedv", "trained", "finished")]
    for run in runs:
        assert {"dev.parquet", "heldout.parquet", "checkpoint.pt"} <= {p.name for p in tmp_path.glob("runs/*/*/*/*")}
        assert run["dev_nll"] == pd.read_csv(os.path.join(run["run_dir"], "curve.csv"))["dev_nll"].iloc[-1]


@pytest.mark.slow
def test_gpus_per_run_trains_data_parallel_and_matches_one_process(prepared_data, tmp_path, monkeypatch):
    path = tmp_path / "ddp.toml"
    path.write_text(GRID.format(data=prepared_data, variants='["gatedv"]'))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # torchrun and its processes
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # this process
    (run,) = sweep_json(path, "--device", "cpu", "--gpus-per-run", "2")["runs"]
    assert list(scratch.iterdir()) == []  # nothing left behind in the temporary directory
    assert (run["action"], run["status"]) == ("trained", "finished")
    run_dir = tmp_path / "runs" / "gatedv" / "lr0.01" / "seed5"
    assert {"dev.parquet", "heldout.parquet"} <= {p.name for p in run_dir.iterdir()}

    single = tmp_path / "single"
    train(RunSpec.make(prepared_data, "tiny", "gatedv", 5, lr=0.01, updates=2, eval_every=2, batch_size=2), single,
          runtime=Runtime(device="cpu", progress=False))
    one, two = pd.read_csv(single / "curve.csv"), pd.read_csv(run_dir / "curve.csv")
    assert list(two["step"]) == [0, 2]
    pd.testing.assert_series_equal(one["dev_nll"], two["dev_nll"], rtol=1e-5, atol=0)


def test_a_gpus_per_run_below_one_is_one_line_with_or_without_jobs(prepared_data, tmp_path):
    with pytest.raises(InputError, match="^--gpus-per-run: must be at least 1, got 0$"):
        launch.default_jobs([], 0)
    path = tmp_path / "pool.toml"
    path.write_text(GRID.format(data=prepared_data, variants='["baseline"]'))
    for args in ([], ["--jobs", "1"], ["--jobs", "2"]):
        result = CliRunner().invoke(cli.app, ["sweep", str(path), "--device", "cpu", "--gpus-per-run", "0", *args])
        assert result.exit_code == 2 and result.stderr == "error: --gpus-per-run: must be at least 1, got 0\n", args
    assert not (tmp_path / "runs").exists()
