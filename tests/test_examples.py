"""The training examples run as documented, under Horovod and (for the time-to-accuracy peer)
under torch DDP, and the Penn Treebank they train on is the standard split."""
import json
import math
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
sys.path.insert(0, os.path.join(REPO, "examples"))
TINY_PTB = ["--epochs", "1", "--train-fraction", "0.003", "--evals-per-epoch", "2"]


def _run(command: list[str]) -> str:
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def test_penn_treebank_is_mikolovs_split():
    from ptb_data import load_ptb, shard_columns

    vocabulary, streams = load_ptb()
    # the word counts (with one <eos> a line) of the official ptb.{train,valid,test}.txt
    assert len(vocabulary) == 10000 and vocabulary.index("<eos>") >= 0
    assert {split: len(s) for split, s in streams.items()} == {"train": 929589, "valid": 73760, "test": 82430}
    shards = [shard_columns(streams["valid"], rank, 2, 10) for rank in range(2)]
    assert shards[0].shape == shards[1].shape == (73760 // 20, 10)
    # rank 0's first column is the start of the text, rank 1's begins halfway
    assert shards[0][:5, 0].tolist() == streams["valid"][:5].tolist()
    assert shards[1][:5, 0].tolist() == streams["valid"][73760 // 20 * 10:][:5].tolist()


def test_ptb_language_model_under_horovodrun(tmp_path):
    metrics = tmp_path / "metrics.json"
    out = _run([os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo",
                sys.executable, "examples/pytorch_ptb_lm.py", "--compression", "adacomp",
                *TINY_PTB, "--metrics", str(metrics)])
    assert "test perplexity" in out and "smaller than dense fp32" in out
    result = json.loads(metrics.read_text())
    points = [ppl for _, ppl in result["valid_perplexity"]]
    assert len(points) == len(result["train_seconds"]) == 2
    # from about the vocabulary's size (an untrained model) down, after a few steps
    assert all(math.isfinite(p) for p in points) and points[-1] < 10000
    assert {"embedding.weight", "softmax.weight"} <= set(result["per_tensor"])


def test_ptb_language_model_learning_rate_schedules():
    from pytorch_ptb_lm import decay_factor

    # Zaremba et al.'s fixed schedule: halved after epoch 4 and every later one, whatever the curve
    assert [decay_factor(epoch, 100.0, 90.0, 4) for epoch in (1, 3, 4, 5, 8)] == [1, 1, 0.5, 0.5, 0.5]
    # on a plateau only: divided by 4 when the epoch did not improve on the best before it
    assert decay_factor(2, 90.0, 90.0, 0) == 0.25 and decay_factor(2, 89.9, 90.0, 0) == 1


def test_ptb_transformer_under_horovodrun(tmp_path):
    # a narrow one-layer model on five steps of 32-word contexts: the evaluations, over all of
    # valid and test, cost what the default model's would not fit in a test
    metrics = tmp_path / "metrics.json"
    out = _run([os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo",
                sys.executable, "examples/pytorch_ptb_transformer.py", "--compression", "onebit",
                "--epochs", "1", "--train-fraction", "0.01", "--evals-per-epoch", "2", "--bptt", "32",
                "--width", "64", "--layers", "1", "--heads", "2", "--metrics", str(metrics)])
    assert "test perplexity" in out and "smaller than dense fp32" in out
    result = json.loads(metrics.read_text())
    points = [ppl for _, ppl in result["valid_perplexity"]]
    assert len(points) == len(result["train_seconds"]) == 2
    # below an untrained model's (about the vocabulary's size) and falling, after a few steps
    assert all(math.isfinite(p) for p in points) and points[1] < points[0] < 10000
    assert math.isclose(result["lr"][-1][1], 1e-4)  # the cosine ends at a tenth of the peak
    assert {"embedding.weight", "decoder.layers.0.linear1.weight"} <= set(result["per_tensor"])


def test_time_to_accuracy_peer_trains_under_ddp(tmp_path):
    metrics = tmp_path / "metrics.json"
    _run([os.path.join(BIN, "torchrun"), "--standalone", "--nproc_per_node", "2", "bench/ddp_train.py", "ptb",
          "--hook", "powersgd:1", *TINY_PTB, "--metrics", str(metrics)])
    result = json.loads(metrics.read_text())
    assert len(result["valid_perplexity"]) == 2 and result["valid_perplexity"][-1][1] < 10000
