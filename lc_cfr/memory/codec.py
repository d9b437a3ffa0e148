"""How reservoir memories store information-state encodings compactly (issue 13).

The encoding (docs/game.md) is 8N + 7C + 5 float32 values, but most of them are card
bits and the rest are small integers times a power of two. A `PackedCodec` stores a row
as bytes: the 0/1 columns packed eight to a byte, then every integer column as the
int16 k with value = k * scale. The default 5-colour encoding (520 values, 1040 bytes
as float16) becomes 61 + 66 = 127 bytes, and `decode(encode(x)) == x` bit for bit, so
what the learner sees is unchanged. Decoding happens inside the jitted training step on
the sampled batch only.

`Float16Codec` is the storage before packing (one float16 per value, exact for every
value of the encoding) and serves any encoding without a known layout.

Both codecs are frozen, hashable dataclasses: jitted functions take them as static
arguments, and the trainer builds one per memory from the rules (`for_rules`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from lc_cfr.game.rules import COUNT_SCALE, DIFF_SCALE, SCORE_SCALE, WAGER_SCALE, Rules

_BIT_WEIGHTS = (1, 2, 4, 8, 16, 32, 64, 128)  # bit j of a byte holds column 8 i + j


@dataclasses.dataclass(frozen=True)
class Float16Codec:
    """One float16 per value: exact for values that are small integers times a power
    of two (the encoding's), half the bytes of float32."""

    size: int  # E, values per decoded row

    @property
    def width(self) -> int:
        """Stored values per row."""
        return self.size

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float16)

    def encode(self, info: jax.Array) -> jax.Array:
        """[B, E] -> [B, E] float16."""
        return jnp.asarray(info).astype(jnp.float16)

    def decode(self, stored: jax.Array) -> jax.Array:
        """[B, E] float16 -> [B, E] float32."""
        return stored.astype(jnp.float32)

    def encode_numpy(self, info: np.ndarray) -> np.ndarray:
        return np.asarray(info).astype(np.float16)

    def decode_numpy(self, stored: np.ndarray) -> np.ndarray:
        return np.asarray(stored).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class PackedCodec:
    """0/1 columns as bits, integer columns as int16 multiples of a power of two.

    Stored row: ceil(len(bit_columns) / 8) bytes of bits, then 2 bytes per integer
    column (int16, little-endian as every platform JAX runs on), dtype uint8. Every
    column of the encoding is in exactly one of the two lists.
    """

    size: int  # E, values per decoded row
    bit_columns: tuple[int, ...]  # columns whose values are 0 or 1
    int_columns: tuple[int, ...]  # columns holding k * scale, k an int16
    int_scales: tuple[float, ...]  # the scale of each integer column (a power of two)

    def __post_init__(self):
        columns = sorted(self.bit_columns + self.int_columns)
        if columns != list(range(self.size)):
            raise ValueError(
                f"PackedCodec columns must cover 0..{self.size - 1} once each, got "
                f"{len(self.bit_columns)} bit and {len(self.int_columns)} integer columns"
            )
        if len(self.int_scales) != len(self.int_columns):
            raise ValueError("PackedCodec needs one scale per integer column")

    @property
    def bit_bytes(self) -> int:
        return -(-len(self.bit_columns) // 8)

    @property
    def width(self) -> int:
        """Stored bytes per row."""
        return self.bit_bytes + 2 * len(self.int_columns)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8)

    @property
    def order(self) -> np.ndarray:
        """[E] int32: decoded column i is column order[i] of (bits, then integers)."""
        order = np.empty(self.size, np.int32)
        order[list(self.bit_columns + self.int_columns)] = np.arange(self.size)
        return order

    @property
    def order_runs(self) -> tuple[tuple[int, int], ...]:
        """`order` as maximal runs of consecutive source columns: ((start, stop), ...)."""
        order = [int(x) for x in self.order]
        runs, start = [], 0
        for i in range(1, len(order) + 1):
            if i == len(order) or order[i] != order[i - 1] + 1:
                runs.append((order[start], order[i - 1] + 1))
                start = i
        return tuple(runs)

    def encode(self, info: jax.Array) -> jax.Array:
        """[B, E] encodings -> [B, W] uint8 (jittable)."""
        info = jnp.asarray(info, jnp.float32)
        rows = info.shape[0]
        bits = info[:, list(self.bit_columns)] != 0
        bits = jnp.pad(bits, ((0, 0), (0, 8 * self.bit_bytes - bits.shape[1])))
        weights = jnp.asarray(_BIT_WEIGHTS, jnp.uint8)
        packed = jnp.sum(
            bits.reshape(rows, self.bit_bytes, 8).astype(jnp.uint8) * weights,
            axis=-1,
            dtype=jnp.uint8,
        )
        scales = jnp.asarray(self.int_scales, jnp.float32)
        codes = jnp.round(info[:, list(self.int_columns)] / scales).astype(jnp.int16)
        code_bytes = jax.lax.bitcast_convert_type(codes, jnp.uint8).reshape(rows, -1)
        return jnp.concatenate([packed, code_bytes], axis=1)

    def decode(self, stored: jax.Array) -> jax.Array:
        """[B, W] uint8 -> [B, E] float32 (jittable), exactly the encoded values."""
        rows = stored.shape[0]
        shifts = jnp.arange(8, dtype=jnp.uint8)
        bits = (stored[:, : self.bit_bytes, None] >> shifts) & jnp.uint8(1)
        bits = bits.reshape(rows, 8 * self.bit_bytes)[:, : len(self.bit_columns)]
        code_bytes = stored[:, self.bit_bytes :].reshape(rows, len(self.int_columns), 2)
        codes = jax.lax.bitcast_convert_type(code_bytes, jnp.int16)
        values = codes.astype(jnp.float32) * jnp.asarray(self.int_scales, jnp.float32)
        joined = jnp.concatenate([bits.astype(jnp.float32), values], axis=1)
        # The column order as a few static slices, not a gather: XLA:CPU lays a column
        # gather's output out transposed ([E, B]), and the first layer's dots on that
        # layout cost about 7% of a training step (docs/performance.md, Learner).
        return jnp.concatenate([joined[:, a:b] for a, b in self.order_runs], axis=1)

    def encode_numpy(self, info: np.ndarray) -> np.ndarray:
        """`encode` in numpy (checkpoints written before packing)."""
        info = np.asarray(info, np.float32)
        packed = np.packbits(info[:, list(self.bit_columns)] != 0, axis=1, bitorder="little")
        scales = np.asarray(self.int_scales, np.float32)
        codes = np.round(info[:, list(self.int_columns)] / scales).astype("<i2")
        return np.concatenate([packed, np.ascontiguousarray(codes).view(np.uint8)], axis=1)

    def decode_numpy(self, stored: np.ndarray) -> np.ndarray:
        """`decode` in numpy."""
        stored = np.ascontiguousarray(stored, np.uint8)
        bits = np.unpackbits(stored[:, : self.bit_bytes], axis=1, bitorder="little")
        bits = bits[:, : len(self.bit_columns)].astype(np.float32)
        codes = np.ascontiguousarray(stored[:, self.bit_bytes :]).view("<i2")
        values = codes.astype(np.float32) * np.asarray(self.int_scales, np.float32)
        return np.concatenate([bits, values], axis=1)[:, self.order]


Codec = Float16Codec | PackedCodec
CODECS = ("packed", "float16")


def for_rules(rules: Rules, *, kind: str = "packed", extra_bits: int = 0) -> Codec:
    """The codec of `rules`' encoding followed by `extra_bits` 0/1 columns (the history
    encoding of the value network appends the opponent's hand, N bits).

    Args:
        rules: the variant; the layout is docs/game.md's table.
        kind: memory.info_storage, 'packed' or 'float16'.
        extra_bits: 0/1 columns after the encoding.

    Raises:
        ValueError: naming memory.info_storage, for an unknown kind.
    """
    if kind not in CODECS:
        raise ValueError(f"memory.info_storage must be one of {list(CODECS)}, got {kind!r}")
    n, c = rules.n_cards, rules.n_colors
    size = rules.encoding_size + extra_bits
    if kind == "float16":
        return Float16Codec(size)
    scalars = 8 * n
    deck = scalars
    phase = list(range(scalars + 1, scalars + 3))
    forbidden = list(range(scalars + 3, scalars + 3 + c))
    blocks = scalars + 3 + c  # own_wagers, opp_wagers, own/opp count, own/opp score
    block_scales = [WAGER_SCALE] * 2 + [COUNT_SCALE] * 2 + [SCORE_SCALE] * 2
    int_columns = [deck]
    int_scales = [rules.deck_scale]
    for b, scale in enumerate(block_scales):
        int_columns += range(blocks + b * c, blocks + (b + 1) * c)
        int_scales += [scale] * c
    diff, turn = blocks + 6 * c, blocks + 6 * c + 1
    int_columns += [diff, turn]
    int_scales += [DIFF_SCALE, rules.turn_scale]
    bits = list(range(8 * n)) + phase + forbidden
    bits += range(rules.encoding_size, size)
    return PackedCodec(
        size=size,
        bit_columns=tuple(bits),
        int_columns=tuple(int_columns),
        int_scales=tuple(float(s) for s in int_scales),
    )


def bytes_per_row(codec: Codec, num_actions: int) -> int:
    """Bytes of one stored sample: info, mask (bool), target (float32), iteration."""
    return codec.width * codec.dtype.itemsize + num_actions * (1 + 4) + 4
