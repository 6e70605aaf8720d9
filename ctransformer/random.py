"""Random numbers: one seeded generator, as torch.manual_seed expects.

The default generator is NumPy's PCG64 seeded by ``manual_seed``.  Kernels
that need randomness (dropout) take a 64-bit seed drawn from it and then use
their own counter-based generator, so results do not depend on threads."""
from __future__ import annotations


import numpy as np


class Generator:
    """A seeded random source (torch.Generator's role)."""

    def __init__(self, seed: "int | str" = 0, device=None) -> None:
        """``Generator(device="cpu")`` as torch (a CUDA device is an error);
        ``seed`` (ctransformer's) defaults to 0."""
        from .tensor import device as _device

        if isinstance(seed, (str, _device)):  # torch.Generator("cpu")
            seed, device = 0, seed
        if device is not None:
            _device(device)
        self.device = _device("cpu")
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed)
        self._rng = np.random.Generator(np.random.PCG64(self._seed))
        return self

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> dict:
        return {"seed": self._seed, "bit_generator": self._rng.bit_generator.state}

    def set_state(self, state: dict) -> None:
        self._seed = int(state["seed"])
        self._rng = np.random.Generator(np.random.PCG64())
        self._rng.bit_generator.state = state["bit_generator"]

    def next_seed(self) -> int:
        """A fresh 63-bit seed for a counter-based kernel RNG."""
        return int(self._rng.integers(0, 2**63 - 1))

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
