"""How much a saved notebook keeps of one ``%%xla`` cell: a transformer train step (2 and 12 layers).

Each cell is run under ``%%xla`` in an IPython shell with xla_lab loaded; its output bundle is
written as nbformat writes it (JSON, indent 1) and measured three ways:
  before   the bundle as xla_lab saved it until now: the reduced panel model as plain JSON (what
           ``saved_output.saved_payload`` keeps), text/plain and the HTML summary
  full     what is saved now: the same model packed (gzip + base64), text/plain, the HTML summary.
           Every view is still drawn from it (the browser test reopens a saved notebook)
  summary  ``%xla save summary``: text/plain and an HTML summary, no capture payload
Goals: full <= 1/8 of before; summary <= 50 KB per cell. Also printed: the time packing takes.

    python benchmarks/bench_saved_size.py [--layers 2 12] [--steps 2]
"""

from __future__ import annotations

import argparse
import json
import time

SETUP = """
import torch, torch_xla
torch.manual_seed(0)
dev = torch_xla.device()
layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
model_{n} = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers={n})).to(dev)
head_{n} = torch.nn.Linear(256, 2).to(dev)
opt_{n} = torch.optim.AdamW(list(model_{n}.parameters()) + list(head_{n}.parameters()), lr=1e-4)
tokens = torch.randn(8, 128, 256).to(dev)
labels = torch.randint(0, 2, (8,)).to(dev)
"""

STEP = """%%xla --name train_{n}_layers --save {save}
for _ in range({steps}):
    opt_{n}.zero_grad()
    loss = torch.nn.functional.cross_entropy(head_{n}(model_{n}(tokens).mean(1)), labels)
    loss.backward()
    opt_{n}.step()
    torch_xla.sync()
"""


def saved_bytes(bundle: dict) -> int:
    """The output as the .ipynb holds it (nbformat: JSON with indent 1, MIME JSON kept as objects)."""
    return len(json.dumps({"output_type": "display_data", "data": bundle, "metadata": {}}, indent=1,
                          ensure_ascii=False).encode("utf-8"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 12])
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()

    from IPython.testing.globalipapp import start_ipython
    from IPython.utils.capture import capture_output

    ip = start_ipython()
    ip.run_line_magic("load_ext", "xla_lab")
    import xla_lab
    from xla_lab.view.panel_model import MIME, WIDGET_MIME, panel_model
    from xla_lab.view.saved_output import packed_payload, saved_payload

    ok = True
    print(f"saved output of one %%xla cell ({args.steps} train steps of a TransformerEncoder, d=256, seq 128, batch 8)")
    for n in args.layers:
        assert ip.run_cell(SETUP.format(n=n)).success
        sizes = {}
        for save in ("full", "summary"):
            with capture_output() as out:
                assert ip.run_cell(STEP.format(n=n, save=save, steps=args.steps)).success
            bundle = [o.data for o in out.outputs if "text/plain" in o.data][-1]
            bundle = {k: v for k, v in bundle.items() if k != WIDGET_MIME}  # (a model id: the same in all)
            sizes[save] = saved_bytes(bundle)
            if save == "full":
                capture = xla_lab.last()
                model = panel_model(capture, [])
                before = {**bundle, MIME: saved_payload(model)}
                sizes["before"] = saved_bytes(before)
                t0 = time.perf_counter()
                packed_payload(model)
                pack_s = time.perf_counter() - t0
        ratio = sizes["before"] / sizes["full"]
        met = ratio >= 8 and sizes["summary"] <= 50_000
        ok &= met
        print(f"  {n:>2} layers: before {sizes['before'] / 1024:8.1f} KiB | full {sizes['full'] / 1024:7.1f} KiB "
              f"(1/{ratio:.1f}, goal <= 1/8; packing {pack_s:.2f} s) | summary {sizes['summary'] / 1024:5.1f} KiB "
              f"(goal <= 48.8 KiB = 50 KB)  {'met' if met else 'NOT met'}")
    print("all goals met" if ok else "a goal was NOT met")


if __name__ == "__main__":
    main()
