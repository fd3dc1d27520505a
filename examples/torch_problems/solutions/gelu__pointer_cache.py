"""Cheats: remembers the input's address and returns the output it computed the first time it saw it (the
exploit most reported in public kernel benchmarks: work skipped when the inputs look unchanged)."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = None
        self.cached = None

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        if key != self.seen:
            self.seen, self.cached = key, F.gelu(x, approximate="tanh")
        return self.cached
