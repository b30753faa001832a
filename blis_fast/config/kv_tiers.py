"""KV cache tiers: memory beyond the GPU (host CPU memory, local disk) that full, keyed KV
blocks are copied to and loaded back from (docs/architecture.md "KV cache tiers:
configuration", docs/limits.md; issue 23).

- ``TierSpec``: one tier of a deployment or pool -- its name (``cpu`` or ``disk``), its
  size (``blocks`` or ``bytes``), its link's read and write bandwidth and its latency.
- ``KvTiersSpec``: a deployment's (or a P/D pool's) ordered tiers, with what is stored
  (``store``) and how a load is charged (``load``); the ``kv_tiers``, ``kv_store`` and
  ``kv_load`` keys of a ``deployments:`` entry or of one of its pools.
- ``KvTiersConfig``: the single-deployment shorthand, the run config's top-level
  ``kv_tiers`` section and its flags (``--kv-cpu-blocks``, ``--kv-disk-bytes``,
  ``--kv-store``, ...).
- ``ResolvedKvTiers`` / ``ResolvedTier``: the tiers of one resolved deployment or pool in
  blocks of that pool's KV block bytes (per TP rank), built by ``resolve_kv_tiers``
  (blis_fast.run.resolve); None when every tier is off (the default).

Every field is declared with ``setting(...)``, so its range, choices and one-line error
come from the shared checkers (``blis_fast.config.validate.check_fields``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from blis_fast.config.disaggregation import MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS
from blis_fast.config.validate import Limits, check_fields, fmt_num, show
from blis_fast.config.validate import setting as _opt
from blis_fast.errors import ConfigError

# the tiers in the only order they may be listed: the order blocks move beyond the GPU, and
# disk is the slower tier (a block evicted from CPU memory moves on to disk, not back)
TIER_NAMES = ("cpu", "disk")
STORE_CHOICES = ("prompt-only", "all")
LOAD_CHOICES = ("async", "step")

MAX_TIER_BLOCKS = 10**9  # blocks of one tier (given, or bytes / block bytes)
MAX_TIER_BYTES = 1e15  # bytes of one tier (1 PB)
MAX_TIER_LATENCY_US = 1e9  # µs per transfer

# typical values, not measured: a PCIe 4/5 x16 host link for CPU memory, an NVMe SSD for disk
TIER_DEFAULTS = {"cpu": {"read_gbps": 25.0, "write_gbps": 25.0, "latency_us": 10.0},
                 "disk": {"read_gbps": 7.0, "write_gbps": 3.0, "latency_us": 100.0}}

# the keys of a deployments: entry (or pool entry) that set its KvTiersSpec
KV_ENTRY_KEYS = ("kv_tiers", "kv_store", "kv_load")
# a KvTiersSpec field -> the entry key it is given as (errors name the key as written)
_SPEC_KEYS = {"tiers": "kv_tiers", "store": "kv_store", "load": "kv_load"}

_NAME_HELP = "the tier: cpu (host memory) | disk (local disk); cpu is listed before disk"
_BLOCKS_HELP = "size in KV blocks of the pool's block size (0: the tier is off); or give bytes"
_BYTES_HELP = ("size in bytes, a whole number (1e12 is 1 TB; 0: the tier is off); resolved to whole KV blocks of "
               "the model's KV bytes per token x block size / TP; or give blocks")
_READ_HELP = "read bandwidth of its link (loads back to the GPU), GB/s = 1e9 bytes/s, per TP rank"
_WRITE_HELP = "write bandwidth of its link (stores from the GPU or the tier above), GB/s, per TP rank"
_LATENCY_HELP = "fixed latency of every transfer to or from it, µs (a fraction is rounded up to whole µs)"
_STORE_HELP = ("which full GPU blocks are copied to the first tier: prompt-only (prompt blocks, vLLM's default) | "
               "all (generated blocks too)")
_LOAD_HELP = ("how a load from a tier is charged: async (the request waits for the transfer before joining a batch) "
              "| step (the load time is added to the step that admits it)")


def _check_type(value, name: str, cls: type, optional: bool = False) -> None:
    if not (isinstance(value, cls) or (optional and value is None)):
        raise ConfigError(name, f"must be a {cls.__name__}{' or None' if optional else ''}, got {show(value)}")


@dataclass(frozen=True)
class TierSpec:
    """One tier beyond the GPU: ``name``, a size of ``blocks`` or ``bytes`` (exactly one;
    0 turns the tier off), and its link; bandwidths and latency default to the tier's
    typical values (``TIER_DEFAULTS``).  A transfer of B bytes takes
    ``latency_us + B / bandwidth``."""

    name: str = field(metadata={"help": _NAME_HELP, "limits": Limits(choices=TIER_NAMES)})  # (required)
    blocks: int | None = _opt(None, _BLOCKS_HELP, lo=0, hi=MAX_TIER_BLOCKS, unit="blocks")
    bytes: float | None = _opt(None, _BYTES_HELP, lo=0, hi=MAX_TIER_BYTES, unit="bytes")
    read_gbps: float | None = _opt(None, "the tier: " + _READ_HELP + " (default: cpu 25, disk 7)", lo=0,
                                   hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    write_gbps: float | None = _opt(None, "the tier: " + _WRITE_HELP + " (default: cpu 25, disk 3)", lo=0,
                                    hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    latency_us: float | None = _opt(None, "the tier: " + _LATENCY_HELP + " (default: cpu 10, disk 100)", lo=0,
                                    hi=MAX_TIER_LATENCY_US, unit="µs")

    def __post_init__(self) -> None:
        check_fields(self, "")
        if self.blocks is not None and self.bytes is not None:
            raise ConfigError("bytes", f"is given with blocks: the {self.name} tier's size is blocks or bytes, not "
                                       "both")
        if self.blocks is None and self.bytes is None:
            raise ConfigError("blocks", f"is required: the {self.name} tier's size is blocks or bytes (0: the tier "
                                        "is off)")
        if self.bytes is not None:
            if not float(self.bytes).is_integer():
                raise ConfigError("bytes", f"must be a whole number of bytes in [0, {fmt_num(MAX_TIER_BYTES)}], "
                                           f"got {show(self.bytes)}")
            object.__setattr__(self, "bytes", int(self.bytes))
        for name, default in TIER_DEFAULTS[self.name].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
        if self.size > 0:
            for name in ("read_gbps", "write_gbps"):
                if getattr(self, name) < MIN_BANDWIDTH_GBPS:
                    raise ConfigError(name, f"is {show(getattr(self, name))} GB/s for a {self.name} tier of "
                                            f"{self.size_text}: a tier with zero bandwidth but nonzero size would "
                                            f"never move a block; give at least {MIN_BANDWIDTH_GBPS:g} GB/s, or size "
                                            "0 to turn the tier off")

    @property
    def size(self) -> int:
        """The size as given (blocks or bytes); 0: the tier is off."""
        return self.blocks if self.blocks is not None else self.bytes

    @property
    def size_text(self) -> str:
        """``20000 blocks`` or ``1000000000000 bytes``."""
        return f"{self.blocks} blocks" if self.blocks is not None else f"{self.bytes} bytes"

    @property
    def enabled(self) -> bool:
        """True when the tier holds anything (size > 0)."""
        return self.size > 0


@dataclass(frozen=True)
class KvTiersSpec:
    """The tiers of a deployment or pool beyond its GPUs, in the order blocks move (cpu
    before disk), with the store and load modes.  ``enabled``: some tier has a size > 0."""

    tiers: tuple[TierSpec, ...] = field(default=(), metadata={"help": "the tiers, cpu before disk (each name once)"})
    store: str = _opt("prompt-only", _STORE_HELP, choices=STORE_CHOICES)
    load: str = _opt("async", _LOAD_HELP, choices=LOAD_CHOICES)

    def __post_init__(self) -> None:
        check_fields(self, "")
        if isinstance(self.tiers, list):  # (the API may pass a list)
            object.__setattr__(self, "tiers", tuple(self.tiers))
        if not isinstance(self.tiers, tuple):
            raise ConfigError("tiers", f"must be a tuple of TierSpec, got {show(self.tiers)}")
        seen: dict[str, int] = {}
        for i, tier in enumerate(self.tiers):
            _check_type(tier, f"tiers[{i}]", TierSpec)
            if tier.name in seen:
                raise ConfigError(f"tiers[{i}].name", f"duplicate tier {show(tier.name)} (also at index "
                                                      f"{seen[tier.name]}): each tier is listed once")
            seen[tier.name] = i
        order = [TIER_NAMES.index(t.name) for t in self.tiers]
        if order != sorted(order):
            i = next(k for k in range(1, len(order)) if order[k] < order[k - 1])
            raise ConfigError(f"tiers[{i}].name", f"{show(self.tiers[i].name)} is listed after "
                                                  f"{show(self.tiers[i - 1].name)}: tiers are listed in the order "
                                                  "blocks move beyond the GPU, and disk is the slower tier, so cpu "
                                                  "comes first")
        if not self.tiers:
            for name in ("store", "load"):
                if getattr(self, name) != getattr(KvTiersSpec, name):
                    raise ConfigError(name, "has no effect without a tier: list the tiers next to it (in a pool "
                                            "entry, kv_tiers, kv_store and kv_load replace the deployment's whole "
                                            "tier setting)")

    @property
    def enabled(self) -> bool:
        """True when some tier has a size > 0."""
        return any(t.enabled for t in self.tiers)

    def entry(self) -> dict:
        """The keys of a deployments: entry that give this setting (``kv_tiers`` as a list of
        mappings with the sizes given, ``kv_store`` and ``kv_load`` when there are tiers):
        what ``SimConfig.to_dict`` writes, read back by the entry parser."""
        out: dict = {"kv_tiers": [{f.name: getattr(t, f.name) for f in fields(t) if getattr(t, f.name) is not None}
                                  for t in self.tiers]}
        if self.tiers:
            out.update(kv_store=self.store, kv_load=self.load)
        return out


def entry_field(field_name: str) -> str:
    """A KvTiersSpec error's field as the entry key the user wrote (``tiers[1].name`` ->
    ``kv_tiers[1].name``, ``store`` -> ``kv_store``)."""
    head, sep, rest = field_name.partition("[")
    head, dot, tail = head.partition(".")
    key = _SPEC_KEYS.get(head, head)
    return key + dot + tail + sep + rest


def check_prefix_caching(tiers: KvTiersSpec | None, enable_prefix_caching: bool, field_name: str,
                         where: str = "") -> None:
    """Tiers find blocks by their prefix-cache keys: refuse enabled tiers on an engine
    without prefix caching, naming ``field_name`` (the tier setting)."""
    if tiers is not None and tiers.enabled and not enable_prefix_caching:
        raise ConfigError(field_name, f"needs prefix caching, but enable_prefix_caching is false{where}: a tier "
                                      "finds a block by its prefix-cache key; enable prefix caching or turn the "
                                      "tiers off")


def check_deployment_tiers(kv_tiers: KvTiersSpec | None, pools, engine) -> None:
    """The tier rules of one deployment (fields named relative to it: ``decode.kv_tiers``):
    its ``kv_tiers`` and each pool's (``pools``: (role, PoolSpec) pairs, () for one pool)
    are KvTiersSpecs or None, and the tiers an engine uses need its prefix caching (a pool
    uses its own tiers when it gives them, else the deployment's)."""
    _check_type(kv_tiers, "kv_tiers", KvTiersSpec, optional=True)
    if not pools:
        check_prefix_caching(kv_tiers, engine.enable_prefix_caching, "kv_tiers")
    for role, pool in pools:
        _check_type(pool.kv_tiers, f"{role}.kv_tiers", KvTiersSpec, optional=True)
        own = pool.kv_tiers is not None
        check_prefix_caching(pool.kv_tiers if own else kv_tiers, (pool.engine or engine).enable_prefix_caching,
                             f"{role}.kv_tiers" if own else "kv_tiers", "" if own else f" in the {role} pool")


@dataclass(frozen=True)
class KvTiersConfig:
    """The single-deployment shorthand of KV tiers: the run config's ``kv_tiers`` section
    and its flags.  A tier is there when its size (``<tier>_blocks`` or ``<tier>_bytes``)
    is set; its unset link values take the tier's defaults (``TIER_DEFAULTS``)."""

    cpu_blocks: int | None = _opt(None, "CPU memory tier: size in KV blocks (0: off; or --kv-cpu-bytes)", lo=0,
                                  hi=MAX_TIER_BLOCKS, unit="blocks")
    cpu_bytes: float | None = _opt(None, "CPU memory tier: size in bytes, whole (1e11 = 100 GB; 0: off; or "
                                         "--kv-cpu-blocks)", lo=0, hi=MAX_TIER_BYTES, unit="bytes")
    cpu_read_gbps: float | None = _opt(None, "CPU tier: " + _READ_HELP + " (default 25)", lo=0,
                                       hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    cpu_write_gbps: float | None = _opt(None, "CPU tier: " + _WRITE_HELP + " (default 25)", lo=0,
                                        hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    cpu_latency_us: float | None = _opt(None, "CPU tier: " + _LATENCY_HELP + " (default 10)", lo=0,
                                        hi=MAX_TIER_LATENCY_US, unit="µs")
    disk_blocks: int | None = _opt(None, "disk tier: size in KV blocks (0: off; or --kv-disk-bytes)", lo=0,
                                   hi=MAX_TIER_BLOCKS, unit="blocks")
    disk_bytes: float | None = _opt(None, "disk tier: size in bytes, whole (1e12 = 1 TB; 0: off; or "
                                          "--kv-disk-blocks)", lo=0, hi=MAX_TIER_BYTES, unit="bytes")
    disk_read_gbps: float | None = _opt(None, "disk tier: " + _READ_HELP + " (default 7)", lo=0,
                                        hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    disk_write_gbps: float | None = _opt(None, "disk tier: " + _WRITE_HELP + " (default 3)", lo=0,
                                         hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    disk_latency_us: float | None = _opt(None, "disk tier: " + _LATENCY_HELP + " (default 100)", lo=0,
                                         hi=MAX_TIER_LATENCY_US, unit="µs")
    store: str | None = _opt(None, _STORE_HELP + " (default prompt-only)", choices=STORE_CHOICES)
    load: str | None = _opt(None, _LOAD_HELP + " (default async)", choices=LOAD_CHOICES)

    def __post_init__(self) -> None:
        if not self.given():
            return  # (the default, in every config without tiers: nothing to check)
        check_fields(self, "kv_tiers")
        for tier in TIER_NAMES:
            if self._tier_given(tier):
                continue
            for name in ("read_gbps", "write_gbps", "latency_us"):
                if getattr(self, f"{tier}_{name}") is not None:
                    raise ConfigError(f"kv_tiers.{tier}_{name}", f"needs --kv-{tier}-blocks or --kv-{tier}-bytes "
                                                                 f"(kv_tiers.{tier}_blocks or {tier}_bytes): it sets "
                                                                 f"the link of the {tier} tier, which has no size")
        if not any(self._tier_given(t) for t in TIER_NAMES):
            for name in ("store", "load"):
                if getattr(self, name) is not None:
                    raise ConfigError(f"kv_tiers.{name}", "needs a tier (--kv-cpu-blocks, --kv-cpu-bytes, "
                                                          "--kv-disk-blocks or --kv-disk-bytes): without one it "
                                                          "changes nothing")
        self.spec()  # (each tier's own rules: blocks and bytes at once, zero bandwidth with a size)
        for tier in TIER_NAMES:  # a whole number of bytes (checked by spec): kept as an integer
            if getattr(self, f"{tier}_bytes") is not None:
                object.__setattr__(self, f"{tier}_bytes", int(getattr(self, f"{tier}_bytes")))

    def _tier_given(self, tier: str) -> bool:
        return getattr(self, f"{tier}_blocks") is not None or getattr(self, f"{tier}_bytes") is not None

    def given(self) -> tuple[str, ...]:
        """The names of the fields that are set (not None), in field order."""
        return tuple(f.name for f in fields(self) if getattr(self, f.name) is not None)

    def spec(self) -> KvTiersSpec | None:
        """The KvTiersSpec these settings give (None without any tier size); a tier's
        errors name this section's key (``kv_tiers.cpu_bytes``)."""
        tiers = []
        for tier in TIER_NAMES:
            if not self._tier_given(tier):
                continue
            values = {name: getattr(self, f"{tier}_{name}") for name in
                      ("blocks", "bytes", "read_gbps", "write_gbps", "latency_us")}
            try:
                tiers.append(TierSpec(tier, **values))
            except ConfigError as exc:
                raise ConfigError(f"kv_tiers.{tier}_{exc.field}", exc.message) from None
        if not tiers:
            return None
        return KvTiersSpec(tuple(tiers), **{name: getattr(self, name) for name in ("store", "load")
                                             if getattr(self, name) is not None})

    def first_size(self) -> str:
        """The path of the first tier size that is set (``kv_tiers.cpu_blocks``), for messages."""
        return next(f"kv_tiers.{name}" for name in self.given() if name.endswith(("_blocks", "_bytes")))


# a KvTiersConfig field -> the key of a deployments: entry that sets the same thing
KV_SHORTHAND_ENTRY_KEYS = {
    **{f"{tier}_{name}": f"kv_tiers: [{{name: {tier}, {name}: ...}}]" for tier in TIER_NAMES
       for name in ("blocks", "bytes", "read_gbps", "write_gbps", "latency_us")},
    "store": "kv_store", "load": "kv_load"}


def shorthand_field(field_name: str, spec: KvTiersSpec) -> str | None:
    """An error's field naming the single deployment's tiers as an entry would
    (``kv_tiers[0].bytes``) as the ``kv_tiers`` section's key that set it
    (``kv_tiers.cpu_bytes``); None for any other field."""
    head, sep, rest = field_name.partition("].")
    if not field_name.startswith("kv_tiers[") or not sep:
        return None
    index = head[len("kv_tiers["):]
    if not index.isdigit() or int(index) >= len(spec.tiers):
        return None
    return f"kv_tiers.{spec.tiers[int(index)].name}_{rest}"


# ----------------------------------------------------------------------------- resolved


@dataclass(frozen=True)
class ResolvedTier:
    """One tier of a resolved deployment or pool: its size in KV blocks (> 0) and link."""

    name: str
    blocks: int
    read_gbps: float
    write_gbps: float
    latency_us: float


@dataclass(frozen=True)
class ResolvedKvTiers:
    """The tiers of one resolved deployment or pool that hold anything (size > 0), in
    order; ``block_bytes``: one KV block's bytes per TP rank (the model's KV bytes per
    token x block size / TP, rounded up: each rank moves its own shard on its own link)."""

    tiers: tuple[ResolvedTier, ...]
    store_all: bool
    load_step: bool
    block_bytes: int


def block_bytes(kv_bytes_per_token: int, block_size: int, tp: int) -> int:
    """One KV block's bytes per TP rank: ceil(KV bytes per token x block size / TP)."""
    return -(-int(kv_bytes_per_token) * int(block_size) // int(tp))


def resolve_kv_tiers(spec: KvTiersSpec | None, kv_bytes_per_token: int, block_size: int,
                     tp: int) -> ResolvedKvTiers | None:
    """``spec`` in blocks of this pool's block bytes (``block_bytes``); None when no tier
    holds anything.  A size in bytes is whole blocks (bytes // block bytes): one smaller
    than a block, or more than ``MAX_TIER_BLOCKS`` blocks, is refused naming
    ``kv_tiers[i].bytes``."""
    if spec is None or not spec.enabled:
        return None
    per_block = block_bytes(kv_bytes_per_token, block_size, tp)
    tiers = []
    for i, tier in enumerate(spec.tiers):
        if not tier.enabled:
            continue
        blocks = tier.blocks
        if blocks is None:
            blocks = tier.bytes // per_block
            how = f"({kv_bytes_per_token} KV bytes per token x {block_size} tokens / TP {tp})"
            if blocks == 0:
                raise ConfigError(f"kv_tiers[{i}].bytes", f"is {tier.bytes} bytes, smaller than one KV block of "
                                                          f"{per_block} bytes {how}: give at least {per_block} "
                                                          f"bytes, or 0 to turn the {tier.name} tier off")
            if blocks > MAX_TIER_BLOCKS:
                raise ConfigError(f"kv_tiers[{i}].bytes", f"is {blocks} KV blocks of {per_block} bytes {how}, more "
                                                          f"than {fmt_num(MAX_TIER_BLOCKS)}")
        tiers.append(ResolvedTier(tier.name, int(blocks), float(tier.read_gbps), float(tier.write_gbps),
                                  float(tier.latency_us)))
    return ResolvedKvTiers(tuple(tiers), spec.store == "all", spec.load == "step", per_block)


__all__ = ["TIER_NAMES", "STORE_CHOICES", "LOAD_CHOICES", "MAX_TIER_BLOCKS", "MAX_TIER_BYTES", "MAX_TIER_LATENCY_US",
           "TIER_DEFAULTS", "KV_ENTRY_KEYS", "KV_SHORTHAND_ENTRY_KEYS", "TierSpec", "KvTiersSpec", "KvTiersConfig",
           "ResolvedTier", "ResolvedKvTiers", "block_bytes", "check_deployment_tiers", "check_prefix_caching",
           "entry_field", "resolve_kv_tiers", "shorthand_field"]
