"""What the compile profile costs, how much of a compile it explains, and whether the scan_layers
what-if predicts the compile a user gets after switching, measured side by side in one run.

(a) Cost: the first two train steps (two compiles) of a 2-layer and a 12-layer TransformerEncoder
    (d=256, seq 128, batch 8, AdamW) under ``%%xla`` in fresh processes, the compile profile on
    (the default) and off (``XLA_LAB_COMPILE_PROFILE=0``), interleaved (on, off, off, on, ...): XLA's
    CompileTime and the cell's wall time (reading and joining the profile included), medians and the
    spread of the per-round ratios.                                         goal ratio <= 1.03
    With the profile on: the share of CompileTime in named phases and inside XLA's traced steps.
(b) The scan what-if: a decoder-only model from its own module (``tests/kernel/zoo/zoo_models/
    decoder_only.py``: RMSNorm, grouped-query attention, SwiGLU) with 2, 8 and 24 identical blocks.
    One fresh process compiles the unrolled model's first train step under ``%%xla`` (its advice names
    the block stack), then runs ``%xla whatif scan model.blocks input=...``, which predicts the step's
    compile with the stack scanned. Another fresh process compiles the same step with the model's
    blocks run through ``torch_xla.experimental.scan_layers``: the compile the user would get.
    Printed: the unrolled compile, the what-if's stack compiles, its prediction, the scanned model's
    measured compile, and the prediction's error.
(c) The seed's model: Hugging Face ``BertForSequenceClassification`` from a config (BERT-Large: 24 x 1024,
    16 heads, batch 4 x 128, AdamW), its first two train steps under ``%%xla`` in a fresh process, then
    ``%xla whatif scan model.bert.encoder.layer`` on the call the step recorded; another fresh process
    trains the same model with ``model.bert.encoder.layer = xla_lab.ScannedStack(...)``. The steady
    step's compile (the second) is compared. One run is many minutes.

    python benchmarks/bench_compile_profile.py [--repeats 3] [--small-layers 2] [--big-layers 12]
                                               [--decoder-layers 2,8,24] [--bert-layers 24]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.join(os.path.dirname(HERE), "tests", "kernel", "zoo")

SETUP_ENCODER = """
import torch, torch_xla
import torch_xla.core.xla_model as xm
torch.manual_seed(0)
dev = torch_xla.device()
layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers={layers})).to(dev)
head = torch.nn.Linear(256, 2).to(dev)
opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-4)
tokens = torch.randn(8, 128, 256).to(dev)
labels = torch.randint(0, 2, (8,)).to(dev)
"""

ENCODER_STEPS = """%%xla -q
for _ in range(2):
    opt.zero_grad()
    logits = head(model(tokens).mean(1))
    loss = torch.nn.functional.cross_entropy(logits, labels)
    loss.backward()
    opt.step()
    torch_xla.sync()
xm.wait_device_ops()
"""

SETUP_DECODER = """
import sys, torch, torch_xla
import torch_xla.core.xla_model as xm
if {zoo!r} not in sys.path:
    sys.path.insert(0, {zoo!r})
from zoo_models.decoder_only import DecoderConfig, DecoderOnly, lm_loss
from torch_xla.experimental.scan_layers import scan_layers
torch.manual_seed(0)
dev = torch_xla.device()

class ScannedDecoder(DecoderOnly):
    # the same model, its blocks run through scan_layers: what a user writes after the advice
    def forward(self, tokens):
        return self.head(self.norm(scan_layers(self.blocks, self.embed(tokens))))

cfg = DecoderConfig(vocab_size=256, hidden=64, layers={layers}, heads=4, kv_heads=2, ffn=128)
model = ({cls})(cfg).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens = torch.randint(0, 256, (4, 33)).to(dev)
"""

DECODER_STEP = """%%xla -q
opt.zero_grad()
loss = lm_loss(model, tokens)
loss.backward()
opt.step()
torch_xla.sync()
"""

SETUP_BERT = """
import torch, torch_xla, transformers, xla_lab
torch.manual_seed(0)
dev = torch_xla.device()
config = transformers.BertConfig(hidden_size=1024, num_hidden_layers={layers}, num_attention_heads=16,
                                 intermediate_size=4096)
model = transformers.BertForSequenceClassification(config).to(dev).train()
if {scanned}:
    model.bert.encoder.layer = xla_lab.ScannedStack(model.bert.encoder.layer)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
ids = torch.randint(0, config.vocab_size, (4, 128)).to(dev)
mask = torch.ones(4, 128, dtype=torch.long).to(dev)
labels = torch.zeros(4, dtype=torch.long).to(dev)
"""

BERT_STEPS = """%%xla -q
for _ in range(2):
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    torch_xla.sync()
"""


# --- workers (fresh child processes) ----------------------------------------------------------------
def _shell():
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "xla_lab")
    return ip


def worker_encoder(layers: int) -> dict:
    import xla_lab

    ip = _shell()
    assert ip.run_cell(SETUP_ENCODER.format(layers=layers)).success
    t0 = time.perf_counter()
    assert ip.run_cell(ENCODER_STEPS).success
    wall = time.perf_counter() - t0
    c = xla_lab.last()
    misses = [s for s in c.steps if s.cache == "miss"]
    assert len(misses) == 2, [s.cache for s in c.steps]
    profiles = [s.artifacts.compile_profile for s in misses]
    return {"compile_s": c.metrics["totals_s"]["compile"], "wall_s": wall,
            "profiled": sum(p is not None for p in profiles),
            "explained": [p["explained"] for p in profiles if p], "traced": [p["traced"] for p in profiles if p]}


def worker_decoder(layers: int, scanned: bool) -> dict:
    import xla_lab

    ip = _shell()
    cls = "ScannedDecoder" if scanned else "DecoderOnly"
    assert ip.run_cell(SETUP_DECODER.format(zoo=ZOO, layers=layers, cls=cls)).success
    result = ip.run_cell(DECODER_STEP)
    assert result.success, result.error_in_exec
    c = xla_lab.last()
    out = {"compile_s": c.metrics["totals_s"]["compile"], "advice": [a["kind"] for a in c.advice]}
    if not scanned:
        whatif = ip.run_line_magic("xla", "whatif scan model.blocks")
        out.update(unrolled_stack_s=whatif.unrolled_s, scanned_stack_s=whatif.scanned_s,
                   step_compile_s=whatif.step_compile_s, predicted_s=whatif.predicted_step_s,
                   recommended=whatif.recommended)
    return out


def worker_bert(layers: int, scanned: bool) -> dict:
    import xla_lab

    ip = _shell()
    assert ip.run_cell(SETUP_BERT.format(layers=layers, scanned=scanned)).success
    result = ip.run_cell(BERT_STEPS)
    assert result.success, result.error_in_exec
    c = xla_lab.last()
    compiles = [s.timings["compile_s"] for s in c.steps if s.cache == "miss"]
    out = {"compiles_s": compiles, "advice": [a["text"] for a in c.advice if a["kind"] == "scan_layers"]}
    if not scanned:
        whatif = ip.run_line_magic("xla", "whatif scan model.bert.encoder.layer")
        out.update(unrolled_stack_s=whatif.unrolled_s, scanned_stack_s=whatif.scanned_s,
                   step_compile_s=whatif.step_compile_s, predicted_s=whatif.predicted_step_s,
                   recommended=whatif.recommended, text=whatif.text())
    return out


def bert_whatif(layers: int) -> None:
    print(f"(c) scan_layers what-if on HF BERT-Large ({layers} x 1024, batch 4 x 128, AdamW), the steady step's "
          "compile: the what-if's prediction vs the ScannedStack model measured")
    unrolled = run_worker(["bert", str(layers), "unrolled"])
    scanned = run_worker(["bert", str(layers), "scanned"])
    measured = scanned["compiles_s"][-1]
    predicted = unrolled["predicted_s"]
    error = (predicted - measured) / measured if predicted is not None else float("nan")
    faster = measured < unrolled["compiles_s"][-1]
    print(f"    unrolled step compiles {', '.join(f'{x:.1f}' for x in unrolled['compiles_s'])} s; what-if: stack "
          f"{unrolled['unrolled_stack_s']:.1f} s unrolled, {unrolled['scanned_stack_s']:.1f} s scanned; predicted "
          f"step {predicted:.1f} s; scanned step compiles {', '.join(f'{x:.1f}' for x in scanned['compiles_s'])} s; "
          f"error {error:+.1%}; verdict {'recommended' if unrolled['recommended'] else 'not recommended'} "
          f"(actual: scanned {'faster' if faster else 'slower'})")
    print("    advice: " + (unrolled["advice"][-1] if unrolled["advice"] else "(none)"))
    print("    " + unrolled["text"].replace("\n", "\n    "))


# --- driver ---------------------------------------------------------------------------------------------
def _env(profile: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "PT_XLA_"))}
    env.setdefault("PJRT_DEVICE", "CPU")
    env["XLA_LAB_COMPILE_PROFILE"] = "1" if profile else "0"
    return env


def run_worker(args: list[str], profile: bool = True) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", *args], capture_output=True, text=True,
                          env=_env(profile), timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-4000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def spread(values: list[float]) -> str:
    return f"{min(values):.3f}..{max(values):.3f}"


def cost(layers: int, repeats: int) -> None:
    print(f"(a) {layers}-layer TransformerEncoder, first two train steps (two compiles), {repeats} rounds of fresh "
          "processes, compile profile on and off interleaved")
    on, off = [], []
    for i in range(repeats):
        order = (True, False) if i % 2 == 0 else (False, True)
        for profile in order:
            (on if profile else off).append(run_worker(["encoder", str(layers)], profile))
    for key, label in (("compile_s", "XLA CompileTime"), ("wall_s", "cell wall time ")):
        ratios = [a[key] / b[key] for a, b in zip(on, off)]
        print(f"    {label}  off {statistics.median(r[key] for r in off):.3f} s | on "
              f"{statistics.median(r[key] for r in on):.3f} s | ratio on/off median {statistics.median(ratios):.3f} "
              f"[{spread(ratios)}] (goal <= 1.03)")
    explained = [x for r in on for x in r["explained"]]
    traced = [x for r in on for x in r["traced"]]
    print(f"    compiles profiled: {sum(r['profiled'] for r in on)} of {2 * len(on)}; share of CompileTime in named "
          f"phases {min(explained):.1%}..{max(explained):.1%}, inside XLA's traced steps {min(traced):.1%}..{max(traced):.1%}")


def scan_whatif(layer_counts: list[int]) -> None:
    print("(b) scan_layers what-if on a decoder-only model (its own module), first train step: the advice's "
          "prediction vs the scanned model measured")
    print(f"    {'layers':>6} {'unrolled step':>14} {'stack unrolled':>15} {'stack scanned':>14} {'predicted':>10} "
          f"{'scanned step':>13} {'error':>7}  advice / verdict")
    for n in layer_counts:
        unrolled = run_worker(["decoder", str(n), "unrolled"])
        scanned = run_worker(["decoder", str(n), "scanned"])
        predicted = unrolled["predicted_s"]
        error = (predicted - scanned["compile_s"]) / scanned["compile_s"] if predicted is not None else float("nan")
        verdict = "recommended" if unrolled["recommended"] else "not recommended"
        print(f"    {n:>6} {unrolled['compile_s']:>13.2f}s {unrolled['unrolled_stack_s']:>14.2f}s "
              f"{unrolled['scanned_stack_s']:>13.2f}s {predicted if predicted is not None else float('nan'):>9.2f}s "
              f"{scanned['compile_s']:>12.2f}s {error:>+7.1%}  {'scan_layers' in unrolled['advice'] and 'advised' or 'no advice'}"
              f" / {verdict} (actual: scanned {'faster' if scanned['compile_s'] < unrolled['compile_s'] else 'slower'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of on/off process pairs in (a) (0: skip (a))")
    parser.add_argument("--small-layers", type=int, default=2, help="layers of the small encoder in (a) (0: skip)")
    parser.add_argument("--big-layers", type=int, default=12, help="layers of the big encoder in (a) (0: skip)")
    parser.add_argument("--decoder-layers", default="2,8,24", help="block counts in (b) ('' skips it)")
    parser.add_argument("--bert-layers", type=int, default=24, help="BERT-Large's layers in (c) (0: skip)")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, layers = args.worker[0], int(args.worker[1])
        if kind == "encoder":
            result = worker_encoder(layers)
        elif kind == "bert":
            result = worker_bert(layers, scanned=args.worker[2] == "scanned")
        else:
            result = worker_decoder(layers, scanned=args.worker[2] == "scanned")
        print("RESULT " + json.dumps(result))
        return
    started = time.time()
    if args.repeats and args.small_layers:
        cost(args.small_layers, args.repeats)
    if args.repeats and args.big_layers:
        cost(args.big_layers, args.repeats)
    if args.decoder_layers:
        scan_whatif([int(n) for n in args.decoder_layers.split(",")])
    if args.bert_layers:
        bert_whatif(args.bert_layers)
    print(f"(took {time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
