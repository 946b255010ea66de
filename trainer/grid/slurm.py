"""What a grid's jobs ask of Slurm and learn from it: time limits and the margin of the requeue signal, sbatch
options, whether a partition has GPUs, the CPU threads of a job's allocation, and the state of jobs (`sacct`, else
`squeue`)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

from submitit import SlurmExecutor

from gatedv_stats.core.errors import InputError

SIGNAL_MARGIN_S = 120  # submitit's USR2 ("checkpoint and requeue") this long before the time limit
SLURM_TIMER_S = 30  # Slurm acts on time limits, and sends that signal, about this often
PENDING = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "CONFIGURING", "RESIZING", "SUSPENDED"}
RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING"}
ENDED = "ENDED"  # not in squeue: no longer pending nor running
UNKNOWN = "UNKNOWN"  # neither sacct nor squeue answered for it


def slurm_minutes(text: str) -> int:
    """Minutes of a Slurm time limit: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S (seconds rounded up)."""
    days, dash, clock = text.strip().partition("-")
    if not dash:
        days, clock = "0", days
    try:
        day, fields = int(days), [int(field) for field in clock.split(":")]
    except ValueError:
        day, fields = -1, []
    if day < 0 or not 1 <= len(fields) <= 3 or min(fields) < 0:
        raise InputError(f"--time: {text!r} is not a Slurm time limit (minutes, H:M:S or D-H:M:S)")
    if dash:
        hours, minutes, seconds = (fields + [0, 0])[:3]
    elif len(fields) == 3:
        hours, minutes, seconds = fields
    else:
        hours, minutes, seconds = 0, fields[0], (fields + [0])[1]
    total = day * 1440 + hours * 60 + minutes + (seconds + 59) // 60
    if total < 1:
        raise InputError(f"--time: {text!r} is under a minute")
    return total


def signal_margin_s(minutes: int) -> int:
    """Seconds before the time limit at which a job is asked to checkpoint and requeue: two minutes, or a quarter of
    a limit under eight minutes, so that every start of a short job runs for three quarters of its limit less Slurm's
    timer (the signal comes up to SLURM_TIMER_S earlier than asked): at least 15 s of a 1-minute limit."""
    return min(SIGNAL_MARGIN_S, minutes * 60 // 4)


def sbatch_options(pairs: tuple[str, ...]) -> dict:
    """`KEY=VALUE` (or a bare flag `KEY`) sbatch options as submitit's additional parameters."""
    options = {}
    for pair in pairs:
        key, has_value, value = pair.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not key or (has_value and not value):
            raise InputError(f"--slurm-option: expected KEY=VALUE (an sbatch option), got {pair!r}")
        options[key] = value if has_value else True
    return options


def slurm_parameters(name: str, time: str, tasks: int, gpus: int, partition: str | None = None,
                     array_parallelism: int | None = None, slurm_options: tuple[str, ...] = ()) -> dict:
    """The SlurmExecutor parameters of a grid's job array: one node, `tasks` tasks (and `gpus` GPUs, none asked for
    when 0) per run."""
    minutes = slurm_minutes(time)
    parameters = {"job_name": f"gatedv-{name}", "time": minutes, "nodes": 1, "ntasks_per_node": tasks,
                  "signal_delay_s": signal_margin_s(minutes)}
    if gpus:
        parameters["gpus_per_node"] = gpus
    if partition:
        parameters["partition"] = partition
    if array_parallelism:
        parameters["array_parallelism"] = array_parallelism
    if slurm_options:
        parameters["additional_parameters"] = sbatch_options(slurm_options)
    return parameters


def check_submission_host() -> None:
    """Slurm's commands are here (submitit submits with sbatch and its jobs start with srun)."""
    if SlurmExecutor.affinity() < 0:
        raise InputError("--executor slurm: no `srun` here; submit from a Slurm login node")


def partition_has_gpus(partition: str | None) -> bool | None:
    """Whether a node of `partition` (default: the cluster's default partition) has GPUs as a generic resource;
    None when `sinfo` does not say (no such partition, or no answer)."""
    listing = slurm_command(["sinfo", "-h", "-o", "%P|%G", *([f"--partition={partition}"] if partition else [])])
    if listing is None:
        return None
    gres = [resources for name, _, resources in (line.partition("|") for line in listing.splitlines())
            if name.rstrip("*") == partition or (partition is None and name.endswith("*"))]
    return any("gpu" in resources for resources in gres) if gres else None


def job_threads(environ: Mapping[str, str]) -> int | None:
    """CPU threads for one task of a Slurm job: its CPUs per task (`--cpus-per-task`), else the job's CPUs on this
    node shared between the node's tasks; None outside a Slurm job."""
    if "SLURM_CPUS_PER_TASK" in environ:
        return max(1, int(environ["SLURM_CPUS_PER_TASK"]))
    if "SLURM_CPUS_ON_NODE" not in environ:
        return None
    tasks = int(environ.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0] or 1)
    return max(1, int(environ["SLURM_CPUS_ON_NODE"]) // max(1, tasks))


def job_states(job_ids: Sequence[str]) -> dict[str, str]:
    """Slurm's state of each job (an array task as ID_INDEX) from one `sacct` call; the jobs that sacct does not
    report (accounting down, or not yet recorded) from one `squeue` call, ENDED when squeue lists them no more,
    UNKNOWN when squeue does not answer either."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    bases = sorted({job_id.split("_")[0] for job_id in job_ids})
    accounting = slurm_command(["sacct", "-o", "JobID,State", "--parsable2", f"--jobs={','.join(bases)}"])
    found = SlurmInfoWatcher().read_info(accounting) if accounting is not None else {}
    states = {job_id: found[job_id]["State"].split()[0].upper() for job_id in job_ids
              if found.get(job_id, {}).get("State", "").strip()}
    missing = [job_id for job_id in job_ids if job_id not in states]
    if missing:
        queue = queued_states(missing)
        states.update({job_id: UNKNOWN if queue is None else queue.get(job_id, ENDED) for job_id in missing})
    return states


def queued_states(job_ids: Sequence[str]) -> dict[str, str] | None:
    """The state of those of `job_ids` that squeue lists (pending, running, completing), None when it fails."""
    listing = slurm_command(["squeue", "-h", "-r", "-o", "%i %T", f"--jobs={','.join(job_ids)}"],
                            empty_on="Invalid job id specified")  # every one of the jobs is long gone
    if listing is None:
        return None
    return dict(line.split()[:2] for line in listing.splitlines() if len(line.split()) >= 2)


def slurm_command(command: list[str], empty_on: str | None = None) -> str | None:
    """The standard output of a Slurm command, "" when it fails with `empty_on` in its error, None when it fails
    otherwise (absent, exits non-zero, or no answer within a minute)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode == 0:
        return done.stdout
    return "" if empty_on is not None and empty_on in done.stderr else None
