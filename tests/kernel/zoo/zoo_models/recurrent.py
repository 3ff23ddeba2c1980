"""A small LSTM sequence classifier (embedding, two-layer LSTM, linear head)."""

from torch import nn


class LSTMClassifier(nn.Module):
    def __init__(self, vocab: int = 64, hidden: int = 32, classes: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, tokens):
        states, _ = self.lstm(self.embed(tokens))
        return self.head(states[:, -1])
