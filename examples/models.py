"""Models for the examples and benchmarks, defined here because torchvision cannot be installed
beside torch 2.13 on our machines."""
import torch
from torch import nn
import torch.nn.functional as F


class LeNet5(nn.Module):
    """A LeNet-5-style CNN for 28x28 MNIST (61k parameters in four compressible layers)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False),
                                          nn.BatchNorm2d(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 for 32x32 (CIFAR-shaped) input: 11.2M parameters."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        layers, inputs = [], 64
        for outputs, stride in [(64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1)]:
            layers.append(BasicBlock(inputs, outputs, stride))
            inputs = outputs
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class WideMLP(nn.Module):
    """A fully-connected-heavy model for 32x32x3 input: 12.6M parameters."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 2048), nn.ReLU(),
                                 nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 1024), nn.ReLU(),
                                 nn.Linear(1024, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class LSTMLanguageModel(nn.Module):
    """A word-level LSTM language model (Zaremba et al. 2014's shape, smaller): embedding,
    ``layers`` LSTM layers, dropout, and a softmax over the vocabulary. The embedding and the
    softmax weights are each vocabulary x width: at PTB's 10k words and width 128 they hold
    2.6M of the 2.8M parameters, the large tensors that make compression matter."""

    def __init__(self, vocabulary: int, width: int = 128, layers: int = 2, dropout: float = 0.2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, width)
        self.lstm = nn.LSTM(width, width, layers, dropout=dropout)
        self.dropout = nn.Dropout(dropout)
        self.softmax = nn.Linear(width, vocabulary)
        for weight in (self.embedding.weight, self.softmax.weight):
            nn.init.uniform_(weight, -0.1, 0.1)
        nn.init.zeros_(self.softmax.bias)

    def forward(self, words: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``words``: (time, batch) word ids; returns (time, batch, vocabulary) logits and the
        LSTM state to carry into the next segment (truncated back-propagation through time)."""
        hidden, state = self.lstm(self.dropout(self.embedding(words)), state)
        return self.softmax(self.dropout(hidden)), state


class TinyTransformer(nn.Module):
    """A small pre-norm transformer encoder classifying token sequences: embedding (10k words,
    width 256), ``layers`` layers of 4-head attention and a 1024-wide feed-forward, mean pooling,
    a linear head: 5.7M parameters (2.6M of them the embedding) in 52 tensors, 29 of them small
    (biases, LayerNorms)."""

    VOCABULARY, WIDTH, LENGTH = 10_000, 256, 64

    def __init__(self, num_classes: int = 10, layers: int = 4) -> None:
        super().__init__()
        self.embedding = nn.Embedding(self.VOCABULARY, self.WIDTH)
        self.position = nn.Parameter(torch.zeros(self.LENGTH, self.WIDTH))
        layer = nn.TransformerEncoderLayer(self.WIDTH, 4, 4 * self.WIDTH, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(self.WIDTH, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.encoder(self.embedding(tokens) + self.position[:tokens.shape[1]])
        return self.head(x.mean(dim=1))


class SyntheticLSTM(nn.Module):
    """The PTB example's LSTM language model (``LSTMLanguageModel``: PTB's 10k words, width 128,
    2 layers, 2.8M parameters) for the synthetic benchmark: token ids (batch, BPTT) in, the
    logits of every word computed, their mean over time out (batch, vocabulary), so that a
    classification loss drives the same tensors and nearly the same compute as the LM's."""

    VOCABULARY, BPTT = 10_000, 35

    def __init__(self) -> None:
        super().__init__()
        self.lm = LSTMLanguageModel(self.VOCABULARY)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits, _ = self.lm(tokens.t())
        return logits.mean(dim=0)


MODELS = {"lenet5": LeNet5, "resnet18": ResNet18, "widemlp": WideMLP, "transformer": TinyTransformer,
          "lstm": SyntheticLSTM}
INPUT_SHAPES = {"lenet5": (1, 28, 28), "resnet18": (3, 32, 32), "widemlp": (3, 32, 32),
                "transformer": (TinyTransformer.LENGTH,), "lstm": (SyntheticLSTM.BPTT,)}
VOCABULARIES = {"transformer": TinyTransformer.VOCABULARY, "lstm": SyntheticLSTM.VOCABULARY}


def synthetic_input(model: str, batch_size: int) -> torch.Tensor:
    """A random batch for ``model``: images, or token ids for the token models."""
    if model in VOCABULARIES:
        return torch.randint(0, VOCABULARIES[model], (batch_size, *INPUT_SHAPES[model]))
    return torch.randn(batch_size, *INPUT_SHAPES[model])


class TransformerLanguageModel(nn.Module):
    """A decoder-only (GPT-style) word-level language model: word and learned position
    embeddings, ``layers`` pre-norm layers of causal ``heads``-head self-attention and a
    4 x width GELU feed-forward (nn.TransformerEncoder under a causal mask), a final LayerNorm,
    and a softmax over the vocabulary. With ``tied`` (the default) the softmax reuses the
    embedding matrix (Press & Wolf 2017, GPT-2), plus a bias: at PTB's 10k words and width 256
    that saves 2.6M parameters, and the tied matrix's gradient is both the embedding's sparse
    rows and the softmax's dense rows in one 10k x 256 tensor. At width 256, 4 layers and a
    64-word context it holds 5.7M parameters (tied; 8.3M untied)."""

    def __init__(self, vocabulary: int, width: int = 256, layers: int = 4, heads: int = 4,
                 context: int = 64, dropout: float = 0.2, tied: bool = True) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, width)
        self.position = nn.Embedding(context, width)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout, activation="gelu",
                                           norm_first=True)
        self.decoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(width),
                                             enable_nested_tensor=False)
        self.softmax = None if tied else nn.Linear(width, vocabulary, bias=False)
        self.bias = nn.Parameter(torch.zeros(vocabulary))
        for weight in (self.embedding.weight, self.position.weight):
            nn.init.normal_(weight, std=0.02)

    def forward(self, words: torch.Tensor, state: None = None) -> tuple[torch.Tensor, None]:
        """``words``: (time, batch) word ids, at most ``context`` of them a column; returns
        (time, batch, vocabulary) logits, each word's from the words up to it. ``state`` (always
        None) gives the LSTM's interface, so that one training loop and one evaluation serve
        both: each segment is its own context, nothing carries over."""
        length = len(words)
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=words.device)
        x = self.dropout(self.embedding(words) + self.position.weight[:length, None])
        hidden = self.decoder(x, mask=mask, is_causal=True)
        weight = self.embedding.weight if self.softmax is None else self.softmax.weight
        return F.linear(hidden, weight, self.bias), None
