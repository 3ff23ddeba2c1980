"""``%xla whatif scan`` on the layer stacks of Hugging Face models built from configs (BERT, GPT-2, Llama:
tuple outputs, attention masks, cache and position inputs, rotary embeddings by keyword), on the inputs
the model gave its first layer in the last ``%%xla`` step; its prediction checked against the real
scanned step (the model with its stack replaced by ``xla_lab.ScannedStack``, the same weights)."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

# (name, config, model class, the stack's path from the model, step) — small enough for a 2-core CI
MODELS = {
    "bert": ("transformers.BertConfig(hidden_size={h}, num_hidden_layers=3, num_attention_heads=4, "
             "intermediate_size={h2}, vocab_size=512, max_position_embeddings=64)",
             "transformers.BertForSequenceClassification", "bert.encoder.layer",
             "out = m(input_ids=ids, attention_mask=mask, labels=labels)"),
    "gpt2": ("transformers.GPT2Config(n_embd={h}, n_layer=3, n_head=4, vocab_size=512, n_positions=64)",
             "transformers.GPT2LMHeadModel", "transformer.h",
             "out = m(input_ids=ids, attention_mask=mask, labels=ids)"),
    "llama": ("transformers.LlamaConfig(hidden_size={h}, num_hidden_layers=3, num_attention_heads=4, "
              "num_key_value_heads=2, intermediate_size={h2}, vocab_size=512, max_position_embeddings=64)",
              "transformers.LlamaForCausalLM", "model.layers",
              "out = m(input_ids=ids, labels=ids)"),
}

SETUP = """
import torch, torch_xla, transformers
dev = torch_xla.device()
torch.manual_seed(0)
{v} = {cls}({config}).to(dev).train()
{v}_opt = torch.optim.AdamW({v}.parameters(), lr=1e-4)
{v}_ids = torch.randint(0, 512, (2, 32)).to(dev)
{v}_mask = torch.ones(2, 32, dtype=torch.long).to(dev)
{v}_labels = torch.zeros(2, dtype=torch.long).to(dev)
def {v}_step():
    m, ids, mask, labels = {v}, {v}_ids, {v}_mask, {v}_labels
    {step}
    out.loss.backward()
    {v}_opt.step()
    {v}_opt.zero_grad()
    return out.loss
"""

LOOP = """for i in range(2):
    loss = {v}_step()
    torch_xla.sync()
"""


def _compile_s(capture) -> list[float]:
    return [s.timings["compile_s"] for s in capture.steps if s.cache == "miss"]


@pytest.mark.parametrize("name", list(MODELS))
def test_whatif_scan_on_hugging_face_layers_predicts_the_scanned_step(ip, xla_cell, fresh_dim, name):
    import torch
    import torch_xla

    config, cls, stack, step = MODELS[name]
    h = 8 * (8 + fresh_dim)  # (new graphs for XLA's compile cache; an even size per head, as rotary needs)
    v = f"hf_{name}"
    assert ip.run_cell(SETUP.format(v=v, cls=cls, config=config.format(h=h, h2=2 * h), step=step)).success
    unrolled = xla_cell(LOOP.format(v=v))
    expr = f"{v}.{stack}"
    call, _ = _session().layer_call(eval(expr, ip.user_ns))
    assert call is not None and call.hidden_input.shape == (2, 32, h) and not call.differs

    before = [p.detach().cpu().clone() for p in ip.user_ns[v].parameters()]
    seed = torch_xla._XLAC._xla_get_rng_seed(str(torch_xla.device()))
    result = ip.run_line_magic("xla", f"whatif scan {expr}")
    assert result.unrolled_s > 0 and result.scanned_s > 0 and result.layers == 3, result.text()
    assert result.step_compile_s == pytest.approx(_compile_s(unrolled)[-1], rel=1e-3) and result.predicted_step_s
    assert "as the model passed them" in result.text() and ("recommended" in result.text())
    assert all(torch.equal(a, b.detach().cpu()) for a, b in zip(before, ip.user_ns[v].parameters()))
    assert torch_xla._XLAC._xla_get_rng_seed(str(torch_xla.device())) == seed

    # the real scanned step: the same model with its stack through scan_layers, compiled as the user would
    parent, attr = expr.rsplit(".", 1)
    assert ip.run_cell(f"import xla_lab\n{parent}.{attr} = xla_lab.ScannedStack({expr})").success
    scanned = xla_cell(LOOP.format(v=v))
    measured = _compile_s(scanned)  # (one: the optimizer has its state, both steps are one graph)
    assert len(measured) == 1 and not [n for n in scanned.notes if "error" in n.lower()], scanned.notes
    error = (result.predicted_step_s - measured[-1]) / measured[-1]
    print(f"{name}: unrolled step {result.step_compile_s:.2f} s, stack {result.unrolled_s:.2f} s unrolled, "
          f"{result.scanned_s:.2f} s scanned, predicted {result.predicted_step_s:.2f} s, scanned step "
          f"{measured[-1]:.2f} s measured, error {error:+.0%}")
    # The goal (within 25%) is read from these printed figures and the benchmark (README, "The scan
    # what-if"), not asserted: one compile each on a shared 2-core machine varies 10-30%. A predictor
    # that misses a part of the step (the update, a folded gradient) was off by 40-60%: that fails here.
    assert abs(error) <= 0.4, result.text()


def _session():
    from xla_lab import session

    return session.current()


BAD_STACKS = """
import torch, torch_xla
dev = torch_xla.device()
d = {d}
class Windowed(torch.nn.Module):  # a setting of its own per layer (a sliding window on some layers)
    def __init__(self, window):
        super().__init__()
        self.fc, self.window = torch.nn.Linear(d, d), window
    def forward(self, x):
        return self.fc(x)[:, :self.window].sum() + x
class Reads(torch.nn.Module):  # data-dependent control flow: reads a value while it runs
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)
    def forward(self, x):
        y = self.fc(x)
        return y * 2 if y.sum().item() > 0 else y
class Head(torch.nn.Module):  # heads side by side: a layer's output is not the next one's input
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(d, 1)
    def forward(self, x):
        return self.fc(x).squeeze(-1)
class Bad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.windowed = torch.nn.ModuleList([Windowed(2), Windowed(4), Windowed(2)])
        self.reads = torch.nn.ModuleList([Reads() for _ in range(2)])
        self.heads = torch.nn.ModuleList([Head() for _ in range(3)])
    def forward(self, x):
        for layer in self.windowed:
            x = layer(x)
        for layer in self.reads:
            x = layer(x)
        return sum(h(x) for h in self.heads).sum()
bad = Bad().to(dev)
never_run = torch.nn.ModuleList([torch.nn.Linear(d, d) for _ in range(2)]).to(dev)
"""


def test_a_stack_that_cannot_be_scanned_gets_one_line(ip, xla_cell, fresh_dim):
    """Layers that differ, a layer that reads a value while it runs, layers whose outputs the next does
    not take, a stack no cell ran: one UsageError line each, never a traceback from the model's code."""
    from IPython.core.error import UsageError

    assert ip.run_cell(BAD_STACKS.format(d=fresh_dim)).success
    xla_cell(f"bad(torch.randn(2, {fresh_dim}).to(dev)).backward()\ntorch_xla.sync()\n")
    for expr, words in [("bad.windowed", r"differ in fc\.?window|differ in window"),
                        ("bad.reads", "reads a tensor's value while it runs"),
                        ("bad.heads", "does not take its output|not the hidden state"),
                        ("never_run", "not known yet.*input=SHAPE")]:
        with pytest.raises(UsageError, match=words) as caught:
            ip.run_line_magic("xla", f"whatif scan {expr}")
        assert "\n" not in str(caught.value) and "Traceback" not in str(caught.value), str(caught.value)
    # a stack no cell ran, with the hidden state's shape: its layers take it alone
    result = ip.run_line_magic("xla", f"whatif scan never_run input=2x{fresh_dim}")
    assert result.unrolled_s > 0 and result.scanned_s > 0 and "hidden state alone" in result.text()
