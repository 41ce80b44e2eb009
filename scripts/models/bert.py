"""bert.py - BERT in plain PyTorch (transformers is not packaged by Debian):
the architecture export.py exports to ONNX with random weights, and the one
the Python example function (function/python/) runs with the weights of a
model view. One definition for both, so the function's parameter names are
exactly the names in the safetensors file export.py writes.

device="meta" builds the module without allocating or initialising any
weight: a function that binds every parameter to mapped store pages then
never touches private memory for them.
"""

import math

import torch
from torch import nn

BERT = {
    # hidden, layers, heads, intermediate (Devlin et al., Table 1; BERT-tiny:
    # Turc et al., for tests that need a BERT in seconds)
    "bert-base": (768, 12, 12, 3072),
    "bert-large": (1024, 24, 16, 4096),
    "bert-tiny": (128, 2, 2, 512),
}
VOCAB, MAX_POSITIONS, TYPE_VOCAB = 30522, 512, 2


class Embeddings(nn.Module):
    def __init__(self, hidden, device=None):
        super().__init__()
        self.word = nn.Embedding(VOCAB, hidden, device=device)
        self.position = nn.Embedding(MAX_POSITIONS, hidden, device=device)
        self.token_type = nn.Embedding(TYPE_VOCAB, hidden, device=device)
        self.norm = nn.LayerNorm(hidden, eps=1e-12, device=device)
        self.dropout = nn.Dropout(0.1)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], dtype=torch.long).unsqueeze(0)
        # one segment: every token has token type 0
        x = self.word(ids) + self.position(positions) + self.token_type.weight[0]
        return self.dropout(self.norm(x))


class Layer(nn.Module):
    """Post-norm transformer encoder layer: multi-head self-attention + FFN."""

    def __init__(self, hidden, heads, intermediate, device=None):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden, device=device)
        self.key = nn.Linear(hidden, hidden, device=device)
        self.value = nn.Linear(hidden, hidden, device=device)
        self.attn_out = nn.Linear(hidden, hidden, device=device)
        self.attn_norm = nn.LayerNorm(hidden, eps=1e-12, device=device)
        self.ffn_in = nn.Linear(hidden, intermediate, device=device)
        self.ffn_out = nn.Linear(intermediate, hidden, device=device)
        self.ffn_norm = nn.LayerNorm(hidden, eps=1e-12, device=device)
        self.dropout = nn.Dropout(0.1)

    def split(self, t):
        return t.reshape(t.shape[0], t.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = self.dropout(torch.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v).transpose(1, 2)
        ctx = ctx.reshape(ctx.shape[0], ctx.shape[1], self.heads * self.head_dim)
        x = self.attn_norm(x + self.dropout(self.attn_out(ctx)))
        h = nn.functional.gelu(self.ffn_in(x))
        return self.ffn_norm(x + self.dropout(self.ffn_out(h)))


class Bert(nn.Module):
    """qa=False: pooler + 2-class sequence classifier, output logits
    [batch, 2]; qa=True: span head, outputs start/end logits [batch, seq]."""

    def __init__(self, hidden, layers, heads, intermediate, qa, device=None):
        super().__init__()
        self.qa = qa
        self.embeddings = Embeddings(hidden, device=device)
        self.layers = nn.ModuleList(Layer(hidden, heads, intermediate, device=device)
                                    for _ in range(layers))
        if qa:
            self.qa_head = nn.Linear(hidden, 2, device=device)
        else:
            self.pooler = nn.Linear(hidden, hidden, device=device)
            self.classifier = nn.Linear(hidden, 2, device=device)
        self.apply(self._init)

    @staticmethod
    def _init(m):  # BERT's initialisation: N(0, 0.02), LayerNorm 1/0
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, ids):
        x = self.embeddings(ids)
        for layer in self.layers:
            x = layer(x)
        if self.qa:
            logits = self.qa_head(x)
            return logits[..., 0], logits[..., 1]
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


def build(name, device=None):
    """BERT-base or -tiny (2-class classifier), BERT-large (question answering)."""
    return Bert(*BERT[name], qa=(name == "bert-large"), device=device)
