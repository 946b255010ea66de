"""`LossFileCallback`: a loss file per evaluation and at the end of training, named by arm, seed and step; driven by
hand through the Trainer's events, then by a real `transformers.Trainer` training a tiny Llama, two arms × two
seeds, whose step directory `gatedv bootstrap` and `gatedv arms` read as it is."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gatedv_stats.core.errors import ParameterError
from gatedv_stats.io.lossfiles import read_loss_file
from helpers import invoke
from tiny_hf import data_tokenizer, tiny_llama
from trainer.data.prepared import PreparedData
from trainer.hf.callback import LossFileCallback
from trainer.hf.score import score_model, state_dict_sha256


def _arguments(tmp_path, seed: int, **settings):
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=str(tmp_path / "trainer"), seed=seed, report_to=[], use_cpu=True,
                             disable_tqdm=True, save_strategy="no", logging_strategy="no", **settings)


def test_each_evaluation_and_the_end_write_one_loss_file_per_step(prepared_data, tmp_path):
    from transformers import TrainerControl, TrainerState

    model = tiny_llama()
    tokenizer = data_tokenizer(prepared_data)
    callback = LossFileCallback(prepared_data, tmp_path / "losses", arm="wide", eval_set="heldout")
    args, control = _arguments(tmp_path, seed=7), TrainerControl()
    events = {"model": model, "processing_class": tokenizer, "optimizer": None, "lr_scheduler": None,
              "train_dataloader": None, "eval_dataloader": None}
    state = TrainerState(global_step=3)
    callback.on_evaluate(args, state, control, metrics={}, **events)
    callback.on_evaluate(args, state, control, metrics={}, **events)  # the same step: scored once
    with torch.no_grad():
        model.model.norm.weight.mul_(2)
    callback.on_train_end(args, TrainerState(global_step=5), control, **events)
    callback.on_evaluate(args, TrainerState(global_step=6, is_world_process_zero=False), control, **events)
    third = tmp_path / "losses" / "step3" / "wide" / "seed7" / "heldout.parquet"
    fifth = tmp_path / "losses" / "step5" / "wide" / "seed7" / "heldout.parquet"
    assert callback.written == [third, fifth]
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*.parquet")) == [
        third.relative_to(tmp_path), fifth.relative_to(tmp_path)]
    run = read_loss_file(fifth)
    assert (run.arm, run.seed, run.meta["step"], run.eval_set) == ("wide", 7, 5, "heldout")
    # The Trainer's tokenizer (its processing_class), and the model as it was at the step.
    assert run.meta["scored_as"] == "window text, encoded by the model's tokenizer"
    assert run.meta["model_state_sha256"] == state_dict_sha256(model) != read_loss_file(third).meta[
        "model_state_sha256"]
    direct = score_model(model, tokenizer, prepared_data, arm="wide", seed=7, eval_set="heldout", progress=False)
    np.testing.assert_array_equal(run.docs["loss_sum"], direct.docs["loss_sum"])


def test_a_seed_given_overrides_the_trainers_and_bad_names_are_refused(prepared_data, tmp_path):
    from transformers import TrainerControl, TrainerState

    callback = LossFileCallback(prepared_data, tmp_path, arm="a", seed=11)
    callback.on_train_end(_arguments(tmp_path, seed=7), TrainerState(global_step=2), TrainerControl(),
                          model=tiny_llama(), processing_class=None)
    assert callback.written == [tmp_path / "step2" / "a" / "seed11" / "dev.parquet"]
    assert read_loss_file(callback.written[0]).meta["scored_as"] == "stored token ids"  # the data directory's own
    for arm in ("", "..", "a/b"):
        with pytest.raises(ParameterError, match="arm: names a directory or a file of the loss files"):
            LossFileCallback(prepared_data, tmp_path, arm=arm)
    with pytest.raises(ParameterError, match="^batch: is no option of score_model"):
        LossFileCallback(prepared_data, tmp_path, arm="a", batch=4)


class Windows(torch.utils.data.Dataset):
    """Training windows of the data directory (their first 256 tokens), the labels the inputs themselves."""

    def __init__(self, data: PreparedData, count: int) -> None:
        self.windows = data.sampler(0).batch(0, count)[:, :256]

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.windows[index], "labels": self.windows[index]}


@pytest.mark.slow
def test_a_real_trainer_two_arms_to_a_verdict_a_report_and_a_noise_floor(prepared_data, tmp_path):
    from transformers import Trainer

    data = PreparedData.open(prepared_data)
    train, evaluation = Windows(data, 16), Windows(data, 2)
    out = tmp_path / "losses"
    learning_rates = {"slow": 1e-3, "fast": 1e-2}
    for arm, lr in learning_rates.items():
        for seed in (1, 2, 3):  # three seeds of each arm: A/A runs for a floor
            callback = LossFileCallback(prepared_data, out, arm=arm, eval_set="heldout")
            args = _arguments(tmp_path, seed=seed, max_steps=8, per_device_train_batch_size=2, learning_rate=lr,
                              eval_strategy="steps", eval_steps=4, dataloader_num_workers=0)
            Trainer(model=tiny_llama(seed=seed), args=args, train_dataset=train, eval_dataset=evaluation,
                    callbacks=[callback]).train()
            # Evaluated at steps 4 and 8; the end of training, at 8, is not scored twice.
            assert [path.relative_to(out).parts[:3] for path in callback.written] == [
                ("step4", arm, f"seed{seed}"), ("step8", arm, f"seed{seed}")]
    runs = sorted(path.relative_to(out).as_posix() for path in (out / "step8").rglob("*.parquet"))
    assert runs == [f"step8/{arm}/seed{seed}/heldout.parquet" for arm in ("fast", "slow") for seed in (1, 2, 3)]
    assert read_loss_file(out / runs[0]).meta["step"] == 8
    result = invoke("bootstrap", out / "step8", "--baseline-arm", "slow", "--variant-arm", "fast")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("fast vs slow: 3 paired seeds, 8 documents") and "\nverdict: " in result.stdout
    arms = invoke("arms", out / "step8", "--reference", "slow")
    assert arms.exit_code == 0 and "fast" in arms.stdout, arms.output
    report = invoke("report", out / "step8", "--out", tmp_path / "report.md", "--reference", "slow")
    assert report.exit_code == 0, report.output
    assert "fast" in (tmp_path / "report.md").read_text()
    floor = invoke("noise-floor", out / "step8" / "slow", "--out", tmp_path / "floor.json")
    assert floor.exit_code == 0, floor.output
    assert "from 3 A/A runs" in floor.stdout
