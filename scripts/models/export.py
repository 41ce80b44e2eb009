"""export.py - build-time only: real architectures of the paper's Table 4
models (BERT-base, BERT-large QA, ResNet-152, VGG19) with RANDOM initial
weights, exported to ONNX, and fine-tuned variants whose top layers are
really trained for a few SGD steps on synthetic data while the bottom
layers stay bit-identical (transfer learning). Also BERT-tiny (not a paper
model: tests use it to run a real BERT in seconds).

Run by scripts/models/paper-models.sh, which installs PyTorch (Debian's
python3-torch) and caches the outputs; nothing here runs at serving time.
No pretrained weights exist here: every weight is random, and so are the
fine-tuning data, so no output means anything.

Usage: export.py --out DIR [--seed N] [--steps N] MODEL[:VARIANTS]...
Writes DIR/NAME.onnx and DIR/NAME.json (how it was made) per model, and
DIR/NAME.safetensors per base model: its state_dict under PyTorch's
parameter names, for functions that run the model in PyTorch (a model view
of it names every tensor as the module does).
Exit status: 0 ok, 1 failure, 2 usage, 3 torch unavailable.
"""

import argparse
import json
import os
import struct
import sys
import time

# bert-tiny last: a model's seed is its index here (tests export it in seconds)
MODELS = ("bert-base", "bert-large", "resnet152", "vgg19", "bert-tiny")
TTY = sys.stderr.isatty()


def log(**kv):
    """key=value on stderr, as every tetris program logs."""
    parts = []
    for k, v in kv.items():
        s = str(v)
        parts.append(f'{k}="{s}"' if (" " in s or s == "") else f"{k}={s}")
    if TTY:
        sys.stderr.write("\r\033[K")
    sys.stderr.write("prog=export.py " + " ".join(parts) + "\n")
    sys.stderr.flush()


def progress(text):
    if TTY:
        sys.stderr.write("\r\033[K[models] " + text)
        sys.stderr.flush()


try:
    import torch
    from torch import nn
except ImportError as e:  # the wrapper turns this into its own clear error
    print(f"export.py: PyTorch is not importable ({e}); install python3-torch", file=sys.stderr)
    sys.exit(3)

from bert import BERT, VOCAB  # noqa: E402 (needs torch, checked above)
import bert  # noqa: E402

# ---- per model: build, the layers fine-tuning trains, synthetic data --------


def build(name):
    if name in BERT:
        return bert.build(name)
    import torchvision  # only the CNNs need it

    if name == "resnet152":
        return torchvision.models.resnet152(weights=None)
    return torchvision.models.vgg19(weights=None)


def calibrate_batchnorm(model, gen):
    """Random initialisation leaves BatchNorm's running statistics at 0 and
    1, which lets activations grow without bound through ResNet-152's 50
    blocks; estimate them once on synthetic images, as pretraining does on
    real ones (no-op for models without BatchNorm)."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average: the statistics of this batch
    model.train()
    with torch.no_grad():
        model(torch.randn(8, 3, 224, 224, generator=gen))
    model.eval()


def top_prefixes(name):
    """Parameter-name prefixes that fine-tuning trains; everything else is
    frozen and stays bit-identical. BERT: the top third of the encoder and
    the head (reusing the bottom layers, as the paper's §2.2 describes);
    ResNet-152: the dense top (fc); VGG19: the dense classifier."""
    if name in BERT:
        layers = BERT[name][1]
        heads = ["qa_head."] if name == "bert-large" else ["pooler.", "classifier."]
        return [f"layers.{i}." for i in range(layers - layers // 3, layers)] + heads
    return ["fc."] if name == "resnet152" else ["classifier."]


def example_input(name, batch, gen):
    if name in BERT:
        return torch.randint(0, VOCAB, (batch, 32), generator=gen)
    return torch.randn(batch, 3, 224, 224, generator=gen)


def synthetic_loss(name, model, x, gen):
    """Loss on generated labels: classes for the classifiers, a span for QA."""
    out = model(x)
    ce = nn.functional.cross_entropy
    if name == "bert-large":
        start = torch.randint(0, x.shape[1], (x.shape[0],), generator=gen)
        end = torch.randint(0, x.shape[1], (x.shape[0],), generator=gen)
        return (ce(out[0], start) + ce(out[1], end)) / 2
    labels = torch.randint(0, out.shape[1], (x.shape[0],), generator=gen)
    return ce(out, labels)


def fine_tune(name, model, variant, steps):
    """A few SGD steps on the top layers only; returns the trained names and
    the losses. The frozen part runs in eval mode, so nothing in it changes
    (BatchNorm running statistics included)."""
    prefixes = top_prefixes(name)
    trained = []
    for pname, p in model.named_parameters():
        p.requires_grad = any(pname.startswith(x) for x in prefixes)
        if p.requires_grad:
            trained.append(pname)
    model.eval()
    for mname, m in model.named_modules():
        if mname and any((mname + ".").startswith(x) for x in prefixes):
            m.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(1000 + variant)
    batch = 4 if name in BERT else 2
    losses = []
    for step in range(steps):
        progress(f"{name}-ft{variant}: SGD step {step + 1}/{steps}")
        x = example_input(name, batch, gen)
        opt.zero_grad()
        loss = synthetic_loss(name, model, x, gen)
        loss.backward()
        opt.step()
        losses.append(round(float(loss), 6))
    model.eval()
    for p in model.parameters():
        p.requires_grad = False
    return trained, losses


def export(name, model, path):
    model.eval()
    if name in BERT:
        x = torch.randint(0, VOCAB, (1, 16))
        inputs, axes = ["input_ids"], {"input_ids": {0: "batch", 1: "sequence"}}
        if name == "bert-large":
            outputs = ["start_logits", "end_logits"]
            axes.update({o: {0: "batch", 1: "sequence"} for o in outputs})
        else:
            outputs = ["logits"]
            axes["logits"] = {0: "batch"}
    else:
        x = torch.randn(1, 3, 224, 224)
        inputs, outputs = ["image"], ["logits"]
        axes = {"image": {0: "batch"}, "logits": {0: "batch"}}
    tmp = path + ".tmp"
    with torch.no_grad():
        torch.onnx.export(model, (x,), tmp, opset_version=14, input_names=inputs,
                          output_names=outputs, dynamic_axes=axes, do_constant_folding=True)
    os.replace(tmp, path)


SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}


def write_safetensors(model, path, metadata):
    """The module's state_dict as safetensors (an 8-byte little-endian header
    length, the JSON header, the tensors' little-endian bytes back to back),
    written with the standard library: Debian has no `safetensors` package.
    The header is padded with spaces so that the data starts 64-byte
    aligned."""
    if sys.byteorder != "little":
        raise RuntimeError("safetensors is little-endian; this machine is not")
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    header, offset = {}, 0
    for name, t in state.items():
        n = t.numel() * t.element_size()
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-(8 + len(blob)) % 64)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for t in state.values():
            # numpy has no bfloat16: its bytes as int16 are the same bytes
            f.write((t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().data)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=0, help="random initial weights' seed (default 0)")
    ap.add_argument("--steps", type=int, default=3, help="SGD steps per fine-tuned variant (default 3)")
    ap.add_argument("models", nargs="+", metavar="MODEL[:VARIANTS]")
    a = ap.parse_args()
    specs = []
    for s in a.models:
        name, _, k = s.partition(":")
        if name not in MODELS or not (k == "" or k.isdigit()):
            ap.error(f"unknown model '{s}' (one of {', '.join(MODELS)}, optionally :VARIANTS)")
        specs.append((name, int(k or 0)))
    if a.steps < 1:
        ap.error("--steps must be at least 1")
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(os.cpu_count() or 1)
    for i, (name, variants) in enumerate(specs):
        torch.manual_seed(a.seed * 100 + MODELS.index(name))
        t0 = time.time()
        progress(f"{name}: building (random initial weights)")
        model = build(name)
        calibrate_batchnorm(model, torch.Generator().manual_seed(a.seed))
        base_state = {k: v.clone() for k, v in model.state_dict().items()}
        nparams = sum(p.numel() for p in model.parameters())
        progress(f"{name}: exporting {nparams / 1e6:.0f}M parameters to ONNX")
        export(name, model, os.path.join(a.out, name + ".onnx"))
        info = {"name": name, "weights": "random", "seed": a.seed * 100 + MODELS.index(name),
                "parameters": nparams, "torch": torch.__version__, "opset": 14}
        write_safetensors(model, os.path.join(a.out, name + ".safetensors"),
                          {"format": "pt", "model": name, "weights": "random", "seed": info["seed"]})
        with open(os.path.join(a.out, name + ".json"), "w") as f:
            json.dump(info, f)
        log(event="exported", model=name, parameters=nparams, seconds=round(time.time() - t0, 1))
        for v in range(1, variants + 1):
            t0 = time.time()
            model.load_state_dict(base_state)
            trained, losses = fine_tune(name, model, v, a.steps)
            frozen = [k for k, t in model.state_dict().items()
                      if k not in trained and torch.equal(t, base_state[k])]
            changed = [k for k in trained if not torch.equal(model.state_dict()[k], base_state[k])]
            vname = f"{name}-ft{v}"
            export(name, model, os.path.join(a.out, vname + ".onnx"))
            vinfo = dict(info, name=vname, base=name, fine_tuned=trained, sgd_steps=a.steps,
                         losses=losses, frozen_unchanged=len(frozen),
                         state_tensors=len(base_state), trained_changed=len(changed),
                         data="synthetic (random inputs and labels)")
            with open(os.path.join(a.out, vname + ".json"), "w") as f:
                json.dump(vinfo, f)
            if len(frozen) + len(trained) != len(base_state) or len(changed) != len(trained):
                log(event="error", model=vname, msg="a frozen tensor changed or a trained one did not")
                return 1
            log(event="fine-tuned", model=vname, trained_tensors=len(trained), frozen_tensors=len(frozen),
                losses=",".join(map(str, losses)), seconds=round(time.time() - t0, 1))
        progress(f"{i + 1}/{len(specs)} models done")
    if TTY:
        sys.stderr.write("\r\033[K")
    return 0


if __name__ == "__main__":
    sys.exit(main())
