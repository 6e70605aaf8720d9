"""Random numbers: one seeded generator, as torch.manual_seed expects.

The default generator is NumPy's PCG64 seeded by ``manual_seed``.  Kernels
that need randomness (dropout) take a 63-bit seed from ``next_seed`` (the
manual seed and a draw count, hashed) and then use their own counter-based
generator, so results do not depend on threads."""
from __future__ import annotations


import numpy as np


_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment (2^64 / golden ratio, odd)


def _splitmix64(z: int) -> int:
    """SplitMix64's output function of a 64-bit z (Steele, Lea, Flood 2014)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class Generator:
    """A seeded random source (torch.Generator's role)."""

    def __init__(self, seed: "int | str" = 0, device=None) -> None:
        """``Generator(device="cpu")`` as torch (a CUDA device is an error);
        ``seed`` (ctransformer's) defaults to 0."""
        from .tensor import device as _device
        from .tensor._dtypes import _require_cpu

        if isinstance(seed, (str, _device)):  # torch.Generator("cpu")
            seed, device = 0, seed
        if device is not None:
            _require_cpu(device)
        self.device = _device("cpu")
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed)
        self._rng = np.random.Generator(np.random.PCG64(self._seed))
        self._kernel_key = _splitmix64(self._seed & _MASK64)
        self._kernel_draws = 0
        return self

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> dict:
        return {"seed": self._seed, "bit_generator": self._rng.bit_generator.state,
                "kernel_draws": self._kernel_draws}

    def set_state(self, state: dict) -> None:
        self._seed = int(state["seed"])
        self._rng = np.random.Generator(np.random.PCG64())
        self._rng.bit_generator.state = state["bit_generator"]
        self._kernel_key = _splitmix64(self._seed & _MASK64)
        self._kernel_draws = int(state.get("kernel_draws", 0))  # states saved before the count existed: 0

    def next_seed(self) -> int:
        """A fresh 63-bit seed for a counter-based kernel RNG (dropout): the
        n-th since ``manual_seed(s)`` is SplitMix64 of s's key and n, in
        plain Python.  Not drawn from the PCG64 stream: a NumPy call right
        after a kernel had evicted its code and data took ~15 us (20 calls
        a step in a small Transformer), this takes ~1 us; and randn /
        shuffling no longer shift the dropout masks, nor they them."""
        n = self._kernel_draws
        self._kernel_draws = n + 1
        return _splitmix64((self._kernel_key + n * _GAMMA) & _MASK64) >> 1

    def uniform(self, low, high, shape):
        return self._rng.uniform(low, high, shape)

    def normal(self, mean, std, shape):
        return self._rng.normal(mean, std, shape)

    def integers(self, low, high, shape):
        return self._rng.integers(low, high, shape)

    def permutation(self, n):
        return self._rng.permutation(n)

    @property
    def numpy(self) -> np.random.Generator:
        return self._rng


# As torch, an unseeded process starts from a fixed seed (torch's default):
# runs are reproducible until someone calls seed().
default_generator = Generator(67280421310721)


def manual_seed(seed: int) -> Generator:
    """Seed ctransformer's default generator (weights init, randn, dropout, shuffling)."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    s = int(np.random.SeedSequence().entropy % (2**63))
    default_generator.manual_seed(s)
    return s


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state() -> dict:
    return default_generator.get_state()


def set_rng_state(state: dict) -> None:
    default_generator.set_state(state)
