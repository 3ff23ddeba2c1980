"""A stack of identical layers, as a user keeps it in a module of their own, for the loop tests
(``tests/kernel/test_loops.py``): run through ``torch_xla.experimental.scan_layers`` (one HLO while
loop) or unrolled, and a ``while_loop`` body. The tests find the lines below by their text."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        h = self.fc(x)  # the layer's matmul
        return torch.relu(h)  # the layer's activation


def stack(width: int, depth: int = 4, seed: int = 0) -> nn.ModuleList:
    torch.manual_seed(seed)
    return nn.ModuleList([Block(width) for _ in range(depth)])


def count_down(i, v):
    return i > 0  # the while_loop's condition


def step_down(i, v):
    h = torch.cos(v) * v  # the while_loop's body
    return i - 1, h
