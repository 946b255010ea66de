"""Tiny local `transformers` models with tokenizers of their own, and lm-evaluation-harness runs over them, built
offline for the tests of `gatedv evaluate --hf`, `score_model` and `gatedv import lm-eval`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

END = "<|endoftext|>"


def byte_tokenizer():
    """A byte-level tokenizer without merges: one token per UTF-8 byte, plus <|endoftext|> as BOS and EOS."""
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {char: index for index, char in enumerate(alphabet)} | {END: len(alphabet)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([END])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=END, eos_token=END)


def save_byte_gpt2(path: Path, *, n_positions: int = 512, seed: int = 0) -> Path:
    """A random 2-layer GPT-2 over bytes, saved with its tokenizer."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = byte_tokenizer()
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=n_positions, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    GPT2LMHeadModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def write_task(directory: Path, name: str, jsonl: Path, output_type: str) -> None:
    """A harness task YAML over a local JSONL file (`id`, `text`): rolling loglikelihood of the text, or a
    multiple-choice or generation task over the same documents (for the refusals)."""
    lines = [f"task: {name}", "dataset_path: json", "dataset_kwargs:", "  data_files:", f"    test: {jsonl}",
             "test_split: test", f"output_type: {output_type}"]
    if output_type == "loglikelihood_rolling":
        lines += ['doc_to_text: ""', "doc_to_target: text", "metric_list:",
                  *(f"  - metric: {metric}" for metric in ("word_perplexity", "byte_perplexity", "bits_per_byte"))]
    elif output_type == "multiple_choice":
        lines += ['doc_to_text: "{{text[:20]}}"', 'doc_to_choice: ["yes", "no"]', "doc_to_target: 0",
                  "metric_list:", "  - metric: acc"]
    else:
        lines += ['doc_to_text: "{{text[:20]}}"', 'doc_to_target: "{{text[20:30]}}"', "generation_kwargs:",
                  '  until: ["\\n"]', "  max_gen_toks: 2", "  do_sample: false", "metric_list:",
                  "  - metric: exact_match"]
    (directory / f"{name}.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_harness(model: Path, documents: list[dict], out: Path) -> dict[str, Path]:
    """Run lm-evaluation-harness itself (its `lm_eval` command, offline) on `documents` with three local tasks;
    the per-sample log of each: {"rolling": ..., "multiple_choice": ..., "generation": ...}."""
    out.mkdir(parents=True)
    jsonl = out / "documents.jsonl"
    jsonl.write_text("".join(json.dumps(document, ensure_ascii=False) + "\n" for document in documents),
                     encoding="utf-8")
    tasks = {"rolling": "loglikelihood_rolling", "multiple_choice": "multiple_choice", "generation": "generate_until"}
    for kind, output_type in tasks.items():
        write_task(out, f"gatedv_{kind}", jsonl, output_type)
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "HF_DATASETS_CACHE": str(out / "datasets-cache"), "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={model},dtype=float32",
               "--tasks", ",".join(f"gatedv_{kind}" for kind in tasks), "--include_path", str(out), "--device", "cpu",
               "--batch_size", "4", "--log_samples", "--output_path", str(out / "results")]
    finished = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return {kind: next((out / "results").rglob(f"samples_gatedv_{kind}_*.jsonl")) for kind in tasks}


def train_and_export(data: Path, out: Path, *, seed: int = 2) -> tuple[Path, Path]:
    """A tiny baseline trained for two updates on `data`, and its `gatedv export-hf` directory (Llama + our BPE)."""
    from typer.testing import CliRunner

    import cli
    from trainer.run.recipe import RunSpec, Runtime
    from trainer.run.train import train

    spec = RunSpec.make(data, "tiny", "baseline", seed, lr=0.01, updates=2, eval_every=2, batch_size=2)
    train(spec, out / "run", runtime=Runtime(device="cpu", progress=False))
    exported = CliRunner().invoke(cli.app, ["export-hf", str(out / "run" / "checkpoint.pt"), str(out / "hf")])
    assert exported.exit_code == 0, exported.output
    return out / "run" / "checkpoint.pt", out / "hf"


def save_random_llama(path: Path, tokenizer_dir: Path, *, seed: int) -> Path:
    """A random tiny Llama with the tokenizer files of `tokenizer_dir` (our BPE: 8,192 entries, no BOS)."""
    import shutil

    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=8192, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=True, bos_token_id=None, eos_token_id=None)
    LlamaForCausalLM(config).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tokenizer_dir / name, path / name)
    return path


def tiny_llama(vocab_size: int = 8192, seed: int = 0):
    """A random one-layer Llama in memory: our BPE's 8,192 ids unless `vocab_size`, 256 positions, no BOS."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                        max_position_embeddings=256, tie_word_embeddings=True, bos_token_id=None,
                                        eos_token_id=None))


def data_tokenizer(prepared_data: Path):
    """The data directory's BPE as a `transformers` tokenizer (its saved tokenizer.json is another file)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(prepared_data / "tokenizer.json"))


def save_byte_bert(path: Path, *, decoder: bool = False, seed: int = 0) -> Path:
    """A random 2-layer BERT over bytes, saved with its tokenizer: a masked LM (attends both ways), or with
    `decoder` a causal LM (`is_decoder`)."""
    from transformers import BertConfig, BertForMaskedLM, BertLMHeadModel

    tokenizer = byte_tokenizer()
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, is_decoder=decoder)
    (BertLMHeadModel if decoder else BertForMaskedLM)(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
