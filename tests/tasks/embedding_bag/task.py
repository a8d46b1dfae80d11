"""Tiny CI task: a weighted embedding bag. Init args, an nn.Parameter table, and two inputs of different
kinds: int64 indices (torch.randint) that must stay integers, and float per-item weights."""

import torch
import torch.nn as nn

NUM_EMBEDDINGS = 50
DIM = 12
BATCH = 6
BAG = 4


class Model(nn.Module):
    def __init__(self, num_embeddings, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_embeddings, dim))

    def forward(self, idx, item_weights):
        return (self.weight[idx] * item_weights.unsqueeze(-1)).sum(dim=1)


def get_inputs():
    idx = torch.randint(0, NUM_EMBEDDINGS, (BATCH, BAG), dtype=torch.int64)
    item_weights = torch.rand(BATCH, BAG)
    return [idx, item_weights]


def get_init_inputs():
    return [NUM_EMBEDDINGS, DIM]
