"""A small MLP-Mixer (Tolstikhin et al. 2021) image classifier: patches, token-mixing and
channel-mixing MLPs, as a user would keep it in a module of their own."""

import torch
from torch import nn


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, channels: int, token_hidden: int, channel_hidden: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(channels)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(), nn.Linear(token_hidden, tokens))
        self.norm2 = nn.LayerNorm(channels)
        self.channel_mlp = nn.Sequential(nn.Linear(channels, channel_hidden), nn.GELU(),
                                         nn.Linear(channel_hidden, channels))

    def forward(self, x):  # x: [batch, tokens, channels]
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self, image: int = 16, patch: int = 4, channels: int = 32, depth: int = 2, classes: int = 10):
        super().__init__()
        tokens = (image // patch) ** 2
        self.patchify = nn.Conv2d(3, channels, kernel_size=patch, stride=patch)
        self.blocks = nn.Sequential(*[MixerBlock(tokens, channels, 2 * tokens, 2 * channels) for _ in range(depth)])
        self.norm = nn.LayerNorm(channels)
        self.classify = nn.Linear(channels, classes)

    def forward(self, images):
        x = self.patchify(images).flatten(2).transpose(1, 2)
        x = self.norm(self.blocks(x))
        return self.classify(x.mean(dim=1))
