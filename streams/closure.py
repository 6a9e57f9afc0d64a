"""Transitive closure of revealed similarity knowledge (footnote 1 of the OAHU paper).

The knowledge revealed by seed constraints is kept as a union-find over items (a component is a
set of items known to be pairwise similar) plus dissimilar links between components. Footnote 1's
rules then say exactly which facts are derivable:

* similar(x, y)     iff x and y are in the same component;
* dissimilar(x, z)  iff the components of x and z are linked.

A triplet (x, x+, x-) is derivable iff similar(x, x+), x != x+, and dissimilar(x, x-).

Every revealed seed can make many facts derivable at once (merging two components of 40 items
creates 1,600 similar pairs). They are never materialised: each seed produces one
:class:`Revelation` — the constraints that became derivable at that moment, described as a few
Cartesian blocks over *snapshots* of component member lists — and constraints are drawn from it
lazily, in a seeded uniformly random order (constraints created at the same moment have no
chronological order among themselves). A snapshot is a member list plus its length at the time:
member lists only ever grow by appending, so the prefix is the component as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

# Below this many constraints a revelation's draw order is one materialised permutation.
_MATERIALISE_BELOW = 1 << 16
#: The kinds the paper's protocol derives from class labels (seeds and their transitive
#: closure); quadruplets come from a label hierarchy instead (streams.hierarchy).
PROTOCOL_KINDS: tuple[str, ...] = ("triplet", "pair")


@dataclass(frozen=True)
class _Snapshot:
    """A component's members as they were: the first ``size`` entries of a growing list."""

    members: list[int]
    size: int

    def __getitem__(self, i: int) -> int:
        return self.members[i]


@dataclass(frozen=True)
class _Block:
    """The constraints ``(first[i], second[j], third[k])`` of a Cartesian product of snapshots.

    ``second is None`` means "the ordered pairs of distinct items of ``first``" (the anchor and
    positive of a triplet drawn from one component). ``third is None`` means pair constraints.
    """

    first: _Snapshot
    second: _Snapshot | None
    third: _Snapshot | None

    @property
    def n_pairs(self) -> int:
        n = self.first.size
        return n * (n - 1) if self.second is None else n * self.second.size

    @property
    def size(self) -> int:
        return self.n_pairs * (1 if self.third is None else self.third.size)

    def constraint(self, k: int) -> tuple[int, ...]:
        """The ``k``-th constraint of the block (0 <= k < size)."""
        pair_k, third_k = (k, 0) if self.third is None else divmod(k, self.third.size)
        if self.second is None:
            i, j = divmod(pair_k, self.first.size - 1)
            j += j >= i  # skip the diagonal: an item is not its own positive
            pair = (self.first[i], self.first[j])
        else:
            i, j = divmod(pair_k, self.second.size)
            pair = (self.first[i], self.second[j])
        return pair if self.third is None else (*pair, self.third[third_k])


class Revelation:
    """The constraints that became derivable when one seed was revealed, drawn lazily.

    Iterating yields every constraint of the blocks exactly once, in an order drawn from ``rng``
    (uniform over the union of blocks), without materialising large blocks.
    """

    def __init__(self, blocks: list[_Block], similar: list[bool], rng: np.random.Generator):
        self.blocks = [b for b in blocks if b.size > 0]
        self.similar = [s for b, s in zip(blocks, similar, strict=True) if b.size > 0]
        self._ends = np.cumsum([b.size for b in self.blocks], dtype=np.int64)
        self._rng = rng

    @property
    def size(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def __iter__(self) -> Iterator[tuple[tuple[int, ...], bool]]:
        """Yield ``(constraint, similar)``; ``similar`` matters for pairs only."""
        for k in self._draw_order():
            b = int(np.searchsorted(self._ends, k, side="right"))
            start = int(self._ends[b - 1]) if b else 0
            yield self.blocks[b].constraint(k - start), self.similar[b]

    def _draw_order(self) -> Iterator[int]:
        total = self.size
        if total < _MATERIALISE_BELOW:
            yield from self._rng.permutation(total).tolist()
            return
        # Huge revelation: a stream only ever takes a few thousand constraints from it, so
        # rejection sampling wastes little; past half of it, finish with an explicit permutation.
        drawn: set[int] = set()
        while len(drawn) < total // 2:
            k = int(self._rng.integers(total))
            if k not in drawn:
                drawn.add(k)
                yield k
        rest = np.setdiff1d(np.arange(total), np.fromiter(drawn, np.int64, len(drawn)))
        yield from self._rng.permutation(rest).tolist()


class ClosureKnowledge:
    """Similar components (union-find) and dissimilar links revealed so far.

    ``reveal_similar`` / ``reveal_dissimilar`` add one fact and return the :class:`Revelation` of
    the constraints it made derivable (``None`` when it made none), as triplets
    (``kind="triplet"``) or as labelled pairs (``kind="pair"``).

    >>> k = ClosureKnowledge(n_items=4, kind="pair", rng=np.random.default_rng(0))
    >>> k.reveal_similar(0, 1) is None  # the pair itself, nothing else
    False
    >>> sorted(c for c, _ in k.reveal_similar(0, 1) or [])  # already known: nothing new
    []
    >>> sorted(k.reveal_dissimilar(1, 2))  # (0, 2) now follows: 0~1 and 1!~2
    [((0, 2), False), ((1, 2), False)]
    """

    def __init__(self, n_items: int, kind: str, rng: np.random.Generator) -> None:
        if kind not in PROTOCOL_KINDS:
            expected = " or ".join(map(repr, PROTOCOL_KINDS))
            raise ValueError(f"kind: expected {expected}, got {kind!r}")
        self.kind = kind
        self._rng = rng
        self._parent = list(range(n_items))
        self._members: dict[int, list[int]] = {}
        self._links: dict[int, set[int]] = {}

    def find(self, x: int) -> int:
        """The root of ``x``'s component (with path halving)."""
        parent = self._parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def similar(self, x: int, y: int) -> bool:
        return self.find(x) == self.find(y)

    def dissimilar(self, x: int, y: int) -> bool:
        return self.find(y) in self._links.get(self.find(x), ())

    def _snapshot(self, root: int) -> _Snapshot:
        members = self._members.setdefault(root, [root])
        return _Snapshot(members, len(members))

    def reveal_similar(self, x: int, y: int, record: bool = True) -> Revelation | None:
        """Add similar(x, y); ``record=False`` updates the knowledge but builds no revelation."""
        a, b = self.find(x), self.find(y)
        if a == b:
            return None
        if b in self._links.get(a, ()):
            raise ValueError(f"similar({x}, {y}) contradicts the revealed dissimilar({x}, {y})")
        if not record:
            self._union(a, b)
            return None
        links_a, links_b = self._links.get(a, set()), self._links.get(b, set())
        snap_a, snap_b = self._snapshot(a), self._snapshot(b)
        only_a = {d: self._snapshot(d) for d in sorted(links_a - links_b)}
        only_b = {d: self._snapshot(d) for d in sorted(links_b - links_a)}
        shared = [self._snapshot(d) for d in sorted(links_a & links_b)]
        if self.kind == "pair":
            # New: every a-b pair is similar; a's side meets b's dissimilar partners and back.
            blocks = [_Block(snap_a, snap_b, None)]
            blocks += [_Block(snap_a, d, None) for d in only_b.values()]
            blocks += [_Block(snap_b, d, None) for d in only_a.values()]
            similar = [True] + [False] * (len(blocks) - 1)
        else:
            # New triplets: cross anchor/positive pairs against every negative component; same-side
            # pairs against the negatives only the other side knew; and those negatives' own
            # pairs against the side they were not yet linked to.
            blocks = []
            for d in [*shared, *only_a.values(), *only_b.values()]:
                blocks += [_Block(snap_a, snap_b, d), _Block(snap_b, snap_a, d)]
            blocks += [_Block(snap_a, None, d) for d in only_b.values()]
            blocks += [_Block(snap_b, None, d) for d in only_a.values()]
            blocks += [_Block(d, None, snap_b) for d in only_a.values()]
            blocks += [_Block(d, None, snap_a) for d in only_b.values()]
            similar = [False] * len(blocks)
        self._union(a, b)
        return self._revelation(blocks, similar)

    def reveal_dissimilar(self, x: int, y: int, record: bool = True) -> Revelation | None:
        """Add dissimilar(x, y); ``record=False`` updates the knowledge but builds no revelation."""
        a, b = self.find(x), self.find(y)
        if a == b:
            raise ValueError(f"dissimilar({x}, {y}) contradicts the revealed similar({x}, {y})")
        if b in self._links.get(a, ()):
            return None
        self._links.setdefault(a, set()).add(b)
        self._links.setdefault(b, set()).add(a)
        if not record:
            return None
        snap_a, snap_b = self._snapshot(a), self._snapshot(b)
        if self.kind == "pair":
            blocks = [_Block(snap_a, snap_b, None)]
        else:
            blocks = [_Block(snap_a, None, snap_b), _Block(snap_b, None, snap_a)]
        return self._revelation(blocks, [False] * len(blocks))

    def _revelation(self, blocks: list[_Block], similar: list[bool]) -> Revelation | None:
        revelation = Revelation(blocks, similar, self._rng)
        return revelation if revelation.size else None

    def _union(self, a: int, b: int) -> None:
        members_a, members_b = self._snapshot(a).members, self._snapshot(b).members
        if len(members_a) < len(members_b):
            a, b, members_a, members_b = b, a, members_b, members_a
        # b joins a. b's member list is left as it is: snapshots taken earlier still read it.
        self._parent[b] = a
        members_a.extend(members_b)
        del self._members[b]
        links_b = self._links.pop(b, set())
        for d in links_b:
            self._links[d].discard(b)
            self._links[d].add(a)
        if links_b:
            self._links.setdefault(a, set()).update(links_b)
