"""The model zoo: models people actually train, each with the training idioms it is usually run with.

Every entry is two cells, as a user would write them: ``setup`` (build a model with a fixed seed,
its optimizer and a few batches; random weights, nothing downloaded) and ``loop`` (train on them,
appending each step's loss to ``zoo_losses``). Tiny configurations keep CI inside its budget; the
code paths are the real ones (torchvision's ResNet and ViT, Hugging Face's BERT and GPT-2, and
models in a local ``.py`` module, as most real models are).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ZOO_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Entry:
    name: str
    setup: str
    loop: str
    idioms: tuple[str, ...]
    model_file: str  # a file the model's own lines are in ("<cell>" when the model is in a cell)


_COMMON = f"""
import sys, torch, torch_xla
from torch import nn
import torch.nn.functional as F
if {ZOO_DIR!r} not in sys.path:
    sys.path.insert(0, {ZOO_DIR!r})
import torch_xla.core.xla_model as xm
dev = torch_xla.device()
torch.manual_seed(0)
xm.set_rng_state(0)  # the device's RNG (dropout) starts from the same seed in every run
gen = torch.Generator().manual_seed(1)
zoo_losses = []
"""

# The classifiers' step: ``forward`` is the model (or its torch.compile'd form), ``sched`` an LR
# scheduler or None.
_CLASSIFIER_STEP = """
def train_step(inputs, labels):
    opt.zero_grad()
    loss = F.cross_entropy(forward(inputs), labels)
    loss.backward()
    opt.step()
    if sched is not None:
        sched.step()
    return loss
"""


def _image_batches(side: int) -> str:
    return (f"batches = [(torch.randn(4, 3, {side}, {side}, generator=gen).to(dev), "
            "torch.randint(0, 10, (4,), generator=gen).to(dev)) for _ in range(3)]\n")


_LAZY_LOOP = """
for batch in batches:
    loss = train_step(*batch)
    torch_xla.sync()
    zoo_losses.append(loss)
"""

RESNET = Entry("resnet18", _COMMON + _image_batches(32) + """
import torchvision
model = forward = torchvision.models.resnet18(num_classes=10).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
""" + _CLASSIFIER_STEP, _LAZY_LOOP, ("BatchNorm", "SGD momentum", "LR scheduler"), "torchvision/models/resnet.py")

BERT = Entry("bert", _COMMON + """
import transformers
transformers.logging.set_verbosity_error()
cfg = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=64, max_position_embeddings=32)
model = transformers.BertForSequenceClassification(cfg).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = [(torch.randint(0, 128, (4, 16), generator=gen).to(dev), torch.ones(4, 16, dtype=torch.long).to(dev),
            torch.randint(0, 2, (4,), generator=gen).to(dev)) for _ in range(3)]
logged = []

def train_step(ids, mask, labels):
    opt.zero_grad()
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return out.loss
""", """
for batch in batches:
    loss = train_step(*batch)
    logged.append(round(loss.item(), 4))  # a logging line: reads the loss mid-step
    torch_xla.sync()
    zoo_losses.append(loss)
""", ("AdamW", "gradient clipping", ".item() logging"), "transformers/models/bert/modeling_bert.py")

GPT2 = Entry("gpt2", _COMMON + """
import transformers
transformers.logging.set_verbosity_error()
cfg = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2)
model = transformers.GPT2LMHeadModel(cfg).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = [([torch.randint(0, 128, (2, 16), generator=gen).to(dev) for _ in range(2)],) for _ in range(3)]

def train_step(micro_batches):
    opt.zero_grad()
    for ids in micro_batches:  # gradient accumulation
        with torch.autocast("xla", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss / len(micro_batches)
        loss.backward()
    opt.step()
    return loss
""", _LAZY_LOOP, ("AdamW", "gradient accumulation", "autocast bf16"), "transformers/models/gpt2/modeling_gpt2.py")

DECODER = Entry("decoder_only", _COMMON + """
from zoo_models.decoder_only import DecoderOnly, lm_loss
model = DecoderOnly().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = [(torch.randint(0, 128, (4, 17), generator=gen).to(dev),) for _ in range(3)]

def step(tokens):
    opt.zero_grad()
    loss = lm_loss(model, tokens)
    loss.backward()
    opt.step()
    return loss

train_step = torch_xla.compile(step, name="decoder_step")
""", """
for batch in batches:
    zoo_losses.append(train_step(*batch))
""", ("AdamW", "torch_xla.compile"), "zoo_models/decoder_only.py")

LSTM = Entry("lstm", _COMMON + """
from torch.utils.data import DataLoader, TensorDataset
import torch_xla.distributed.parallel_loader as pl
from zoo_models.recurrent import LSTMClassifier
model = forward = LSTMClassifier().to(dev)
opt, sched = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), None
data = TensorDataset(torch.randint(0, 64, (12, 8), generator=gen), torch.randint(0, 4, (12,), generator=gen))
loader = pl.MpDeviceLoader(DataLoader(data, batch_size=4), dev)
""" + _CLASSIFIER_STEP, """
for tokens, labels in loader:
    zoo_losses.append(train_step(tokens, labels))
""", ("SGD momentum", "MpDeviceLoader"), "zoo_models/recurrent.py")

VIT = Entry("vit", _COMMON + _image_batches(16) + """
import torchvision
model = forward = torchvision.models.VisionTransformer(image_size=16, patch_size=4, num_layers=2, num_heads=2,
                                                       hidden_dim=32, mlp_dim=64, num_classes=10).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3)
""" + _CLASSIFIER_STEP, _LAZY_LOOP, ("AdamW", "LR scheduler"), "torchvision/models/vision_transformer.py")

MIXER = Entry("mixer_dynamo", _COMMON + _image_batches(16) + """
from zoo_models.mixer import Mixer
model = Mixer().to(dev)
forward = torch.compile(model, backend="openxla")
opt, sched = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), None
""" + _CLASSIFIER_STEP, _LAZY_LOOP, ("torch.compile(backend='openxla')", "SGD momentum"), "zoo_models/mixer.py")

EAGER = Entry("mlp_eager", _COMMON + """
import torch_xla.experimental
model = forward = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(dev)
opt, sched = torch.optim.SGD(model.parameters(), lr=0.1), None
batches = [(torch.randn(4, 8, generator=gen).to(dev), torch.randint(0, 4, (4,), generator=gen).to(dev))
           for _ in range(2)]
""" + _CLASSIFIER_STEP, """
torch_xla.experimental.eager_mode(True)
try:
    for batch in batches:
        zoo_losses.append(train_step(*batch))
finally:
    torch_xla.experimental.eager_mode(False)
""", ("eager mode",), "<cell>")

ZOO = [RESNET, BERT, GPT2, DECODER, LSTM, VIT, MIXER, EAGER]
