"""Small sizing arithmetic shared by the State builders."""


def next_pow2(x: int) -> int:
    """The smallest power of two >= max(x, 2)."""
    return 1 << max(int(x) - 1, 1).bit_length()
