"""MoLFormer: a SMILES encoder with linear attention over random features and rotary
positions (Ross et al. 2022), with the residual MLP of IBM's fine-tuning code.

Written here, not loaded from the hub's remote code (which `transformers` 5 cannot import);
parameter names are the hub checkpoint's (`ibm/MoLFormer-XL-both-10pct`), so a hub-layout
folder (config.json + weights) loads as it is, and IBM's Lightning checkpoints load through
`convert_ibm_state_dict`.

A layer is post-norm (as fast-transformers' encoder layer): attention → dense → add →
LayerNorm, then GELU feed-forward → add → LayerNorm; a final LayerNorm follows the layers.
Attention is linear: queries and keys, after the rotary rotation, are mapped to positive
random features φ(x) = relu(x·d^(-1/4) W) (W: d × `features` Gaussian, redrawn at every
training step and kept fixed in evaluation, fast-transformers' GeneralizedRandomFeatures),
and a query attends with weights φ(q)·φ(k) normalised over the molecule's tokens. The
molecule's vector is the mean of its token states (padding excluded) through two
dense → dropout → GELU blocks, each with a skip connection; the shared regression head's
Linear is IBM's `final` layer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from oodmol.data.batches import TokenBatch
from oodmol.pretrained import check_vocabulary, resolve_pretrained

CONFIG_KEYS = {  # our argument → the hub config.json's key
    "vocab_size": "vocab_size",
    "pad_id": "pad_token_id",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "hidden": "hidden_size",
    "intermediate": "intermediate_size",
    "features": "num_random_features",
    "layer_norm_eps": "layer_norm_eps",
    "attention_eps": "linear_attention_eps",
}
WEIGHTS = "model.safetensors"


def rotate(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding of `x` (..., length, d): the pair (x_k, x_{k+d/2}) at
    position p is rotated by the angle p·θ_k, θ_k = base^(-2k/d)."""
    half = x.shape[-1] // 2
    theta = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None] * theta
    cos, sin = (torch.cat([f, f], dim=-1).to(x.dtype) for f in (angles.cos(), angles.sin()))
    first, second = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class RandomFeatureMap(nn.Module):
    """φ(x) = relu(x·d^(-1/4) W), W a d × `features` standard Gaussian matrix (the buffer
    `weight`), redrawn at every training forward pass when `redraw`."""

    def __init__(self, head_dim: int, features: int, redraw: bool = True) -> None:
        super().__init__()
        self.scale = head_dim**-0.25  # √(softmax temperature 1/√d), as fast-transformers
        self.redraw = redraw
        self.register_buffer("weight", torch.randn(head_dim, features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu((x * self.scale) @ self.weight)

    def draw(self) -> None:
        with torch.no_grad():
            self.weight.normal_()


class LinearSelfAttention(nn.Module):
    """Multi-head linear attention over random features of rotated queries and keys;
    padded keys (mask 0) are left out."""

    def __init__(self, hidden: int, heads: int, features: int, eps: float) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden={hidden} is not a multiple of heads={heads}")
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.feature_map = RandomFeatureMap(hidden // heads, features)
        self.eps = eps

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        if self.training and self.feature_map.redraw:
            self.feature_map.draw()
        positions = torch.arange(length, device=x.device)
        q, k, v = (
            layer(x).view(batch, length, self.heads, -1).transpose(1, 2)
            for layer in (self.query, self.key, self.value)
        )
        q = self.feature_map(rotate(q, positions))
        k = self.feature_map(rotate(k, positions)) * mask[:, None, :, None].to(x.dtype)
        return linear_attention(q, k, v, self.eps).transpose(1, 2).reshape(batch, length, hidden)


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, eps: float) -> torch.Tensor:
    """Σ_j (φq_i·φk_j) v_j / max(Σ_j φq_i·φk_j, eps), in O(length) (features: φq, φk)."""
    numerator = q @ (k.transpose(-1, -2) @ v)
    denominator = (q @ k.sum(dim=-2).unsqueeze(-1)).clamp(min=eps)
    return numerator / denominator


class DenseAddNorm(nn.Module):
    """dense → dropout → add the residual → LayerNorm (BERT's output sub-layer)."""

    def __init__(self, inputs: int, hidden: int, dropout: float, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(inputs, hidden)
        self.dropout = nn.Dropout(dropout)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


# The containers below give the parameters the hub checkpoint's names.


class Attention(nn.Module):
    def __init__(
        self, hidden: int, heads: int, features: int, dropout: float, eps: dict[str, float]
    ) -> None:
        super().__init__()
        self.self = LinearSelfAttention(hidden, heads, features, eps["attention"])
        self.output = DenseAddNorm(hidden, hidden, dropout, eps["norm"])

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x, mask), x)


class Intermediate(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, intermediate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.dense(x))


class Layer(nn.Module):
    def __init__(
        self,
        hidden: int,
        heads: int,
        intermediate: int,
        features: int,
        dropout: float,
        eps: dict[str, float],
    ) -> None:
        super().__init__()
        self.attention = Attention(hidden, heads, features, dropout, eps)
        self.intermediate = Intermediate(hidden, intermediate)
        self.output = DenseAddNorm(intermediate, hidden, dropout, eps["norm"])

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, layers: int, **sizes: int | float | dict) -> None:
        super().__init__()
        self.layer = nn.ModuleList(Layer(**sizes) for _ in range(layers))


class Embeddings(nn.Module):
    def __init__(self, vocab_size: int, hidden: int, pad_id: int, dropout: float) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)


class ResidualHead(nn.Module):
    """IBM's fine-tuning `Net` without its last Linear: two dense → dropout → GELU blocks,
    each adding its input (the hub's MolformerClassificationHead: dense, dense2)."""

    def __init__(self, hidden: int, dropout: float) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.dense2 = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        first = nn.functional.gelu(self.dropout(self.dense(pooled))) + pooled
        return nn.functional.gelu(self.dropout(self.dense2(first))) + first


class MoLFormer(nn.Module):
    """MoLFormer encoder, masked mean pooling and IBM's residual fine-tuning blocks.

    `pretrained`: a folder or hub id (`oodmol.pretrained`) laid out as `save_pretrained`
    writes it (config.json with the hub's keys, model.safetensors with the hub's names);
    None builds a randomly initialised model of the given sizes with the run's
    vocabulary (`vocab_size`, `pad_id`: facts of the fitted tokenizer)."""

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        pretrained: str | None = None,
        layers: int = 12,
        heads: int = 12,
        hidden: int = 768,
        intermediate: int = 768,
        features: int = 32,
        embedding_dropout: float = 0.2,
        dropout: float = 0.1,
        head_dropout: float = 0.1,
        layer_norm_eps: float = 1e-12,
        attention_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        state = None
        if pretrained is not None:
            folder = resolve_pretrained(pretrained)
            config = json.loads((folder / "config.json").read_text())
            sizes = {ours: config[theirs] for ours, theirs in CONFIG_KEYS.items()}
            check_vocabulary(vocab_size, sizes["vocab_size"], pretrained)
            vocab_size, pad_id = sizes["vocab_size"], sizes["pad_id"]
            layers, heads, hidden = sizes["layers"], sizes["heads"], sizes["hidden"]
            intermediate, features = sizes["intermediate"], sizes["features"]
            layer_norm_eps, attention_eps = sizes["layer_norm_eps"], sizes["attention_eps"]
            state = hub_state_dict(load_file(str(folder / WEIGHTS)))
        self.config = dict(
            vocab_size=vocab_size, pad_id=pad_id, layers=layers, heads=heads, hidden=hidden,
            intermediate=intermediate, features=features, layer_norm_eps=layer_norm_eps,
            attention_eps=attention_eps,
        )  # fmt: skip
        self.embeddings = Embeddings(vocab_size, hidden, pad_id, embedding_dropout)
        eps = {"norm": layer_norm_eps, "attention": attention_eps}
        self.encoder = Encoder(
            layers, hidden=hidden, heads=heads, intermediate=intermediate,
            features=features, dropout=dropout, eps=eps,
        )  # fmt: skip
        self.LayerNorm = nn.LayerNorm(hidden, eps=layer_norm_eps)
        self.classifier = ResidualHead(hidden, head_dropout)
        self.out_dim = hidden
        if state is not None:
            self.load_encoder_state(state)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The tokens' final states (batch, length, hidden)."""
        x = self.embeddings.dropout(self.embeddings.word_embeddings(input_ids))
        for layer in self.encoder.layer:
            x = layer(x, attention_mask)
        return self.LayerNorm(x)

    def forward(self, batch: TokenBatch) -> torch.Tensor:
        states = self.encode(batch.input_ids, batch.attention_mask)
        weights = batch.attention_mask.unsqueeze(-1).to(states.dtype)
        pooled = (states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)
        return self.classifier(pooled)

    def encoder_state_dict(self) -> dict[str, torch.Tensor]:
        """The encoder's parameters and random features under the hub's names."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("classifier.")}

    def load_encoder_state(self, state: dict[str, torch.Tensor]) -> None:
        missing, unexpected = self.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith("classifier.")]
        if missing or unexpected:
            raise ValueError(f"MoLFormer weights: missing {missing}, unexpected {unexpected}")

    def save_pretrained(
        self, folder: str | Path, extra: dict[str, torch.Tensor] | None = None
    ) -> Path:
        """config.json (the hub's keys) and model.safetensors (the encoder, hub names,
        and the `extra` tensors, such as a language-model head's)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        config = {theirs: self.config[ours] for ours, theirs in CONFIG_KEYS.items()}
        config.update(model_type="molformer", hidden_act="gelu", feature_map_kernel="relu")
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        tensors = {
            k: v.contiguous() for k, v in {**self.encoder_state_dict(), **(extra or {})}.items()
        }
        save_file(tensors, str(folder / WEIGHTS))
        return folder


class MaskedLMHead(nn.Module):
    """The language-model head of IBM's pretraining (`lm_layer`): dense → GELU →
    LayerNorm → a bias-free projection onto the vocabulary."""

    def __init__(self, hidden: int, vocab_size: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.decoder = nn.Linear(hidden, vocab_size, bias=False)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.LayerNorm(nn.functional.gelu(self.dense(states))))


class MoLFormerMaskedLM(nn.Module):
    """The MoLFormer encoder (the backbone's arguments) with IBM's language-model head,
    trained by masked-language modelling as MoLFormer was: what `oodmol pretrain
    model=molformer` trains. It saves the hub layout `model.pretrained` loads, the head
    as `lm_head.*` (which fine-tuning leaves out); with `pretrained` it goes on from that
    model, and from its head where the folder has one of this layout."""

    def __init__(
        self, vocab_size: int, pad_id: int, pretrained: str | None = None, **sizes
    ) -> None:
        super().__init__()
        self.molformer = MoLFormer(vocab_size, pad_id, pretrained, **sizes)
        config = self.molformer.config
        self.lm_head = MaskedLMHead(
            config["hidden"], config["vocab_size"], config["layer_norm_eps"]
        )
        if pretrained is not None:
            state = load_file(str(resolve_pretrained(pretrained) / WEIGHTS))
            head = {
                k.removeprefix("lm_head."): v for k, v in state.items() if k.startswith("lm_head.")
            }
            if head.keys() == self.lm_head.state_dict().keys():
                self.lm_head.load_state_dict(head)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        states = self.molformer.encode(input_ids, attention_mask)
        chosen = labels != -100  # the head only where the loss looks
        logits = self.lm_head(states[chosen])
        return nn.functional.cross_entropy(logits, labels[chosen])

    def save_pretrained(self, folder: Path) -> None:
        head = {f"lm_head.{k}": v for k, v in self.lm_head.state_dict().items()}
        self.molformer.save_pretrained(folder, extra=head)


def hub_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A hub checkpoint's tensors under our names: the `molformer.` prefix of the
    task models dropped, the language-model head left out."""
    return {
        key.removeprefix("molformer."): value
        for key, value in state.items()
        if not key.startswith("lm_head.")
    }


IBM_LAYER_NAMES = {  # fast-transformers' encoder layer (IBM's `blocks.layers.<i>.`) → ours
    "attention.query_projection.": "attention.self.query.",
    "attention.key_projection.": "attention.self.key.",
    "attention.value_projection.": "attention.self.value.",
    "attention.inner_attention.feature_map.omega": "attention.self.feature_map.weight",
    "attention.out_projection.": "attention.output.dense.",
    "norm1.": "attention.output.LayerNorm.",
    "linear1.": "intermediate.dense.",
    "linear2.": "output.dense.",
    "norm2.": "output.LayerNorm.",
}
IBM_NAMES = {  # the rest of IBM's Lightning module → ours
    "tok_emb.": "embeddings.word_embeddings.",
    "blocks.norm.": "LayerNorm.",
    "net.fc1.": "classifier.dense.",
    "net.fc2.": "classifier.dense2.",
    "net.final.": "final.",
}
IBM_DROPPED = (r"blocks\.layers\.\d+\.attention\.rotaryemb\.inv_freq$", r"lang_model\.")


def convert_ibm_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """IBM's MoLFormer Lightning state dict (`torch.load(ckpt)["state_dict"]`, pretraining
    or fine-tuning) under our names. The rotary frequencies (recomputed) and the
    language-model head are dropped; the fine-tuning head's `net.final` becomes `final.*`
    (the regression head's Linear). An unknown name is an error."""
    converted = {}
    for key, value in state.items():
        if any(re.match(pattern, key) for pattern in IBM_DROPPED):
            continue
        converted[_ibm_to_ours(key)] = value
    return converted


def _ibm_to_ours(key: str) -> str:
    layer = re.match(r"blocks\.layers\.(\d+)\.", key)
    prefix, names = (f"encoder.layer.{layer[1]}.", IBM_LAYER_NAMES) if layer else ("", IBM_NAMES)
    rest = key[layer.end() :] if layer else key
    for theirs, ours in names.items():
        if rest.startswith(theirs):
            return prefix + ours + rest[len(theirs) :]
    raise ValueError(f"IBM MoLFormer checkpoint: unknown parameter {key!r}")
