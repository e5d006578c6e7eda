"""tcc's dropout masks in NumPy, and PyTorch's F.dropout made to use them.

runtime/tcc_random.h defines the masks: element i of a step's k-th dropout
(in ONNX node order) in the micro-step with random state [seed, counter] is
kept when 24 bits of mix(key + i * G) >= ceil(ratio * 2^24). This is a
second implementation of those few lines, so that a PyTorch float64 model
can drop exactly the elements tcc drops and its autograd can check tcc's
gradients through dropout.
"""
import contextlib
import math

import numpy as np
import torch
import torch.nn.functional as F

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
STREAM_OFFSET = np.uint64(0x632BE59BD9B4E019)


def _mix(z):
    z = np.array(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


def key(seed, counter, stream):
    with np.errstate(over="ignore"):
        inner = _mix(np.uint64(stream) + STREAM_OFFSET)
        return _mix(np.uint64(seed) ^ _mix(np.uint64(counter) * GOLDEN ^ inner))


def threshold(ratio):
    """ceil(ratio * 2^24), ratio as the float32 that ONNX stores."""
    return math.ceil(float(np.float32(ratio)) * 16777216.0)


def keep_mask(seed, counter, stream, ratio, shape):
    """The boolean keep mask of one dropout, in the tensor's shape."""
    n = int(np.prod(shape, dtype=np.int64))
    i = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        bits = _mix(key(seed, counter, stream) + i * GOLDEN) >> np.uint64(40)
    return (bits >= np.uint64(threshold(ratio))).reshape(shape)


@contextlib.contextmanager
def tcc_masks(seed=0, counter=0):
    """Within the block, F.dropout (which nn.Dropout and
    nn.MultiheadAttention call) in training mode multiplies by tcc's mask of
    the next stream, in call order (the order torch.onnx.export writes the
    Dropout nodes), and by 1/(1 - p). Yields the list of (stream, p, kept
    fraction, elements) of the calls made."""
    calls = []
    original = F.dropout

    def dropout(input, p=0.5, training=True, inplace=False):
        if not training or p == 0.0:
            return input
        mask = keep_mask(seed, counter, len(calls), p, tuple(input.shape))
        calls.append((len(calls), p, float(mask.mean()), mask.size))
        scale = 1.0 / (1.0 - float(np.float32(p)))
        return input * torch.from_numpy(mask).to(input.dtype) * scale

    F.dropout = dropout
    try:
        yield calls
    finally:
        F.dropout = original
