"""What the stream has revealed about which items are similar, and triplets mined from it (ours).

Every triplet (x, x+, x−) says that x and x+ are similar and that x and x− are not. Similarity is
transitive and "dissimilar" carries over to whole groups of similar items (footnote 1 of the OAHU
paper), so the constraints seen so far reveal far more than themselves: a union-find over items
(a *component* is a set of items known to be pairwise similar) with *links* between components
known to be dissimilar. :class:`ConstraintGraph` keeps that knowledge for the ``knowledge`` most
recently mentioned items (a long stream's first items are forgotten first), holds a reservoir of
``capacity`` of them with their preprocessed rows and latest embeddings, and mines triplets among
the held ones (docs/algorithms.md, "Mining"):

* an anchor drawn uniformly from the reservoir;
* its *nearest* known-similar item (an easy positive: pulling a class's far-apart members together
  is what over-fits a metric to the few items it has seen, while kNN only needs the near ones);
* the nearest of ``candidates`` items drawn from the components known to be dissimilar to it (a
  hard negative: an impostor among its neighbours, the constraint kNN error is made of).

Items are recognised by their feature vectors: two constraints that mention the same row mean the
same item (the learner sees features, not ids). Knowledge that contradicts what is already known
(a pair declared similar whose components are linked, or dissimilar within one component, as a
noisy annotator would produce) is not applied and is counted in ``contradictions``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from oahu.checks import check_int
from oahu.learners.oahu.graph_mining import GraphMining
from oahu.learners.oahu.item_keys import row_keys

_NO_COMPONENT = -1
# Up to this many held mentions per block are written one by one, in stream order.
_WRITE_IN_ORDER = 12
# Blocks of at least this many triplets are observed phase by phase (_observe_block); a strict
# step's one triplet costs less in order.
_OBSERVE_AS_BLOCK = 4


class ConstraintGraph(GraphMining):
    """Revealed similarity knowledge about up to ``knowledge`` items, a reservoir of ``capacity``
    of them, and mining among those.

    Parameters
    ----------
    capacity : items held with their rows and embeddings (reservoir sampling over every item
        the stream mentions); mining draws from them.
    n_features : width of the (preprocessed) rows.
    n_depths, embedding_dim : shape of each item's cached embeddings, which mining ranks by.
    rng : the learner's generator (one seeded sequence of draws per learner).
    knowledge : items whose component is remembered (the least recently mentioned forgotten
        first), so that similarity carries over through items that are not held.
    held : items held at first (``capacity`` if None); :meth:`hold_up_to` raises it, up to
        ``capacity``, whose slots are allocated from the start.

    Mining ranks by the embeddings' inner products, which orders them by distance because they
    have unit norm (OAHU's do).

    >>> rng = np.random.default_rng(0)
    >>> graph = ConstraintGraph(capacity=8, n_features=1, n_depths=1, embedding_dim=1, rng=rng)
    >>> rows = np.array([[[0.0], [0.1], [5.0]], [[0.1], [0.2], [5.1]]], dtype=np.float32)
    >>> graph.observe(rows, embeddings=np.ones((1, 3, 2, 1), np.float32)).tolist()  # slots
    [0, 1, 2, 1, 3, 4]
    >>> graph.size, graph.n_components, graph.n_links  # {0, 0.1, 0.2}, {5}, {5.1}
    (5, 3, 2)
    >>> triplets, slots = graph.mine(4, alpha=np.ones(1), candidates=8)
    >>> [float(v) < 1 for v in triplets[0, :, 0]]  # anchor, positive similar; negative not
    [True, True, False]
    """

    def __init__(
        self,
        capacity: int,
        n_features: int,
        n_depths: int,
        embedding_dim: int,
        rng: np.random.Generator,
        knowledge: int = 200_000,
        held: int | None = None,
    ) -> None:
        # Held items stay known, and a triplet's three items must fit beside them: with less
        # room, remembering one of them forgets another before it is linked.
        if capacity < 1 or knowledge < capacity + 3:
            raise ValueError(
                f"capacity: must be >= 1 and at most knowledge - 3 ({knowledge - 3}), "
                f"got {capacity}"
            )
        self.capacity = capacity
        # Items held now (reservoir sampling's k), at most ``capacity``: it only grows
        # (:meth:`hold_up_to`), into slots allocated from the start.
        self.held_limit = capacity if held is None else min(check_int(held, "held"), capacity)
        self.knowledge = knowledge
        self.rng = rng
        # Knowledge: item key -> component id (resolved through ``parent``), oldest first.
        self.known: dict[int, int] = {}
        self.parent: dict[int, int] = {}  # union-find over component ids (roots absent)
        self.count: dict[int, int] = {}  # root -> known items in it
        self.links: dict[int, set[int]] = {}  # root -> roots known to be dissimilar
        self.next_component = 0
        self.contradictions = 0
        # The held reservoir: rows, embeddings, and the root of each held item's component.
        self.keys = np.zeros(capacity, dtype=np.int64)
        self.component = np.full(capacity, _NO_COMPONENT, dtype=np.int64)
        self.rows = np.zeros((capacity, n_features), dtype=np.float32)
        # Item-major, (capacity, n_depths, E): mining gathers whole items, one contiguous row each.
        self.embeddings = np.zeros((capacity, n_depths, embedding_dim), dtype=np.float32)
        self.slot_of: dict[int, int] = {}
        self.members: dict[int, int] = {}  # root -> held items in it
        # root -> the roots linked to it that have held items, for every root with held items:
        # the links mining can use, without scanning the links to items no longer held.
        self.held_links: dict[int, set[int]] = {}
        self.size = 0  # items held
        self.seen = 0  # distinct items offered to the reservoir while not held
        # Changes to what mining scans: held items' components, links between held components.
        self.held_revision = 0
        super().__init__()
        self.restores = 0  # times set_state replaced everything (a copy elsewhere is stale)

    # ------------------------------------------------------------------ knowledge
    @property
    def n_components(self) -> int:
        """Components with at least one held item."""
        return len(self.members)

    @property
    def n_links(self) -> int:
        """Pairs of components known to be dissimilar."""
        return sum(len(v) for v in self.links.values()) // 2

    def observe(
        self, triplets: np.ndarray, embeddings: np.ndarray, keys: np.ndarray | None = None
    ) -> np.ndarray:
        """Learn what triplets (n, 3, d) reveal, in order, and hold their items (with their
        embeddings, (n_depths, 3, n, E)) as reservoir sampling decides; returns the slots whose
        row and embedding it wrote (a slot once per write).

        ``keys`` (n, 3) say which item each row is, by default :func:`row_keys` of the rows
        themselves. A learner that preprocesses its rows passes the keys of the rows it was
        given: a block's projection rounds a row differently by how many rows it projects at
        once, so the same item would come back as another one from a block of another size.
        """
        keys = row_keys(triplets) if keys is None else keys
        if len(keys) >= _OBSERVE_AS_BLOCK and self._block_forgets_nothing(len(keys)):
            held = self._observe_block(keys.ravel().tolist())
        else:
            held = self._observe_in_order(keys)
        if not held:
            return np.zeros(0, np.int64)
        self._store(held, triplets, embeddings)
        return np.fromiter((slot for slot, _, _ in held), np.int64, len(held))

    def _observe_in_order(self, keys: np.ndarray) -> list[tuple[int, int, int]]:
        """:meth:`observe` one triplet after the other (item keys (n, 3)): the (slot, triplet,
        role) of each held mention. Correct everywhere, including where old items are forgotten
        or components renumbered along the way."""
        held: list[tuple[int, int, int]] = []
        # The hot loop of a strict step: bound names and the common cases (an item already
        # held, a component that is its own root) inline.
        known, parent, slot_of, mention = self.known, self.parent, self.slot_of, self._mention
        for i, (ka, kp, kn) in enumerate(keys.tolist()):
            mention(ka)  # may forget old items and renumber components
            mention(kp)
            mention(kn)
            if known is not self.known:  # renumbered: the maps were rebuilt
                known, parent = self.known, self.parent
            a, p, n = known[ka], known[kp], known[kn]
            if a in parent:
                a = self._find(a)
            if p in parent:
                p = self._find(p)
            a = self._merge(a, p)
            # similar(x, x+) and dissimilar(x, x−) give dissimilar(x+, x−) and more: the link
            # joins whole components.
            self._link(a, self._find(n) if n in parent else n)
            for role, key in enumerate((ka, kp, kn)):
                slot = slot_of.get(key)
                if slot is None:
                    slot = self._place(key)
                if slot is not None:
                    held.append((slot, i, role))
        return held

    def _block_forgets_nothing(self, n: int) -> bool:
        """Whether ``n`` triplets can be learned without forgetting an item or renumbering the
        components on the way: then the order of mentions, unions and holds within the block
        changes no outcome, and :meth:`_observe_block` may take them phase by phase."""
        return (
            len(self.known) + 3 * n <= self.knowledge
            and len(self.parent) + n <= 2 * self.knowledge  # a triplet adds one parent at most
        )

    def _observe_block(self, flat: list[int]) -> list[tuple[int, int, int]]:
        """:meth:`observe` for a block that forgets nothing (item keys, three per triplet, in
        stream order), in three phases of plain loops instead of one pass of method calls per
        triplet. It ends in the state :meth:`_observe_in_order` would reach:

        * mentions: each item moves to the end of the recency order in the order of its last
          mention, and new items are numbered in the order of their first;
        * unions and links, triplet by triplet (their order decides which contradict);
        * holds, mention by mention (reservoir sampling's draws follow the mentions of items
          not held). A hold records its item's root after the block's unions, which is where
          the unions would have moved it.
        """
        known, count = self.known, self.count
        ids: dict[int, int] = {}
        for key in dict.fromkeys(flat):  # distinct, in order of first mention
            component = known.pop(key, None)
            if component is None:
                component = self.next_component
                self.next_component += 1
                count[component] = 1
            ids[key] = component
        known.update((key, ids[key]) for key in reversed(dict.fromkeys(reversed(flat))))

        parent, links, find = self.parent, self.links, self._find
        merge, link = self._merge, self._link
        components = iter([ids[key] for key in flat])
        for a, p, n in zip(components, components, components, strict=True):
            if a in parent:
                a = find(a)
            if p in parent:
                p = find(p)
            if a != p:
                a = merge(a, p)
            if n in parent:
                n = find(n)
            if n not in links.get(a, ()):  # known already: nothing to add
                link(a, n)
        return self._hold_block(flat)

    def _hold_block(self, flat: list[int]) -> list[tuple[int, int, int]]:
        """The holds of :meth:`_observe_block`: (slot, triplet, role) of each held mention. Once
        the reservoir is full every item not held draws a slot; those draws are made for the
        whole block at once and the generator is then moved on by the draws used, which leaves
        it where one draw per item would (``Generator.integers`` with an array of bounds draws
        as one call per bound does)."""
        rng, slot_of, limit = self.rng, self.slot_of, self.held_limit
        draws: list[int] = []
        if self.size == limit:
            state = rng.bit_generator.state
            bounds = np.arange(self.seen + 1, self.seen + 1 + len(flat))
            draws = rng.integers(0, bounds).tolist()
            rng.bit_generator.state = state
        used = 0
        held: list[tuple[int, int, int]] = []
        for position, key in enumerate(flat):
            slot = slot_of.get(key)
            if slot is None:
                if draws:
                    self.seen += 1
                    slot = draws[used]
                    used += 1
                    if slot >= limit:
                        continue
                    self._release(slot)
                    self._hold(key, slot)
                else:
                    slot = self._place(key)
                    if slot is None:
                        continue
            held.append((slot, position // 3, position % 3))
        if used:
            rng.integers(0, bounds[:used])
        return held

    def _store(
        self, held: list[tuple[int, int, int]], triplets: np.ndarray, embeddings: np.ndarray
    ) -> None:
        """Write the rows and embeddings of the held mentions ``held`` ((slot, triplet, role)
        each), for a micro-batch in one step per array: a slot mentioned more than once gets
        its last mention, as writing them one by one in stream order would (a slot's item
        changes only when a newer mention takes it, and every mention of an item has the same
        row)."""
        if len(held) <= _WRITE_IN_ORDER:  # a strict step's few rows: sorting costs more
            for slot, i, role in held:
                self.rows[slot] = triplets[i, role]
                self.embeddings[slot] = embeddings[:, role, i]
            return
        mentions = np.asarray(held, dtype=np.int64)
        _, from_end = np.unique(mentions[::-1, 0], return_index=True)
        last = mentions[len(mentions) - 1 - from_end]
        self.rows[last[:, 0]] = triplets[last[:, 1], last[:, 2]]
        self.embeddings[last[:, 0]] = embeddings[:, last[:, 2], last[:, 1]].swapaxes(0, 1)

    def _find(self, component: int) -> int:
        parent = self.parent
        root = component
        while root in parent:
            root = parent[root]
        while component != root:  # path compression
            parent[component], component = root, parent[component]
        return root

    def _mention(self, key: int) -> None:
        """Remember the item as the most recently mentioned (as a component of its own if it is
        new), forgetting the least recently mentioned one if need be."""
        component = self.known.pop(key, None)
        if component is None:
            component = self.next_component
            self.next_component += 1
            self.count[component] = 1
        self.known[key] = component  # (re)inserted last
        while len(self.known) > self.knowledge:
            self._forget_oldest()
        if len(self.parent) > 2 * self.knowledge:
            self._compact()

    def _forget_oldest(self) -> None:
        key = next(iter(self.known))
        component = self.known.pop(key)
        if key in self.slot_of:  # held items stay known: mention it again instead
            self.known[key] = component
            return
        root = self._find(component)
        self.count[root] -= 1
        if not self.count[root]:
            del self.count[root]
            for other in self.links.pop(root, ()):
                self._unlink_one(other, root)

    def _compact(self) -> None:
        """Point every known item at its root and renumber the roots 0.. (amortised O(1))."""
        roots = {key: self._find(c) for key, c in self.known.items()}
        renumber = {root: i for i, root in enumerate(dict.fromkeys(roots.values()))}
        self.known = {key: renumber[root] for key, root in roots.items()}
        self.count = {renumber[r]: n for r, n in self.count.items()}
        self.links = {
            renumber[r]: {renumber[o] for o in linked} for r, linked in self.links.items()
        }
        self.members = {renumber[r]: n for r, n in self.members.items()}
        self.held_links = {
            renumber[r]: {renumber[o] for o in linked} for r, linked in self.held_links.items()
        }
        held = self.component[: self.size]
        held[:] = [renumber[r] for r in held.tolist()]
        self.parent = {}
        self.next_component = len(renumber)
        self.held_revision += 1

    def hold_up_to(self, limit: int) -> None:
        """Hold up to ``limit`` items (at most ``capacity``) from now on; the reservoir never
        shrinks. Reservoir sampling goes on with the larger k: the next items not held fill the
        free slots, then each one seen is held with probability k / (items seen).

        >>> graph = ConstraintGraph(4, 1, 1, 1, np.random.default_rng(0), held=2)
        >>> graph.hold_up_to(3); graph.held_limit
        3
        >>> graph.hold_up_to(9); graph.hold_up_to(2); graph.held_limit
        4
        """
        self.held_limit = max(self.held_limit, min(int(limit), self.capacity))

    def _place(self, key: int) -> int | None:
        """Hold an item not held yet if reservoir sampling says so: its slot, or None. The
        caller writes the slot's row and embedding."""
        self.seen += 1
        if self.size < self.held_limit:
            slot = self.size
            self.size += 1
        else:
            slot = int(self.rng.integers(0, self.seen))
            if slot >= self.held_limit:
                return None
            self._release(slot)
        self._hold(key, slot)
        return slot

    def _hold(self, key: int, slot: int) -> None:
        """Put the item in the free ``slot``."""
        root = self._find(self.known[key])
        self.keys[slot] = key
        self.component[slot] = root
        self.held_revision += 1
        if root not in self.members:
            self._start_holding(root)
        self.members[root] = self.members.get(root, 0) + 1
        self.slot_of[key] = slot

    def _start_holding(self, root: int) -> None:
        """``root`` gets its first held item: its links to held roots become usable by mining."""
        members, held_links = self.members, self.held_links
        linked = {other for other in self.links.get(root, ()) if other in members}
        held_links[root] = linked
        for other in linked:
            held_links[other].add(root)

    def _stop_holding(self, root: int) -> None:
        """``root`` has no held item any more."""
        del self.members[root]
        held_links = self.held_links
        for other in held_links.pop(root):
            held_links[other].discard(root)

    def _release(self, slot: int) -> None:
        """Stop holding the item in ``slot`` (it stays known)."""
        del self.slot_of[int(self.keys[slot])]
        root = int(self.component[slot])
        self.component[slot] = _NO_COMPONENT
        self.held_revision += 1
        self.members[root] -= 1
        if not self.members[root]:
            self._stop_holding(root)

    def _unlink_one(self, component: int, other: int) -> None:
        linked = self.links[component]
        linked.discard(other)
        if not linked:
            del self.links[component]

    def _merge(self, a: int, b: int) -> int:
        """Join the components of roots ``a`` and ``b``; returns the joint root."""
        if a == b:
            return a
        if b in self.links.get(a, ()):
            self.contradictions += 1  # known dissimilar: keep what was known first
            return a
        if self.count[a] < self.count[b]:
            a, b = b, a
        self.parent[b] = a
        self.count[a] += self.count.pop(b)
        if b in self.members:
            held = self.component[: self.size]
            held[held == b] = a
            self.held_revision += 1
            n_held = self.members[b]
            self._stop_holding(b)
            if a not in self.members:
                self._start_holding(a)
                self.members[a] = 0
            self.members[a] += n_held
        # b's links become a's; _link makes those between held roots usable by mining.
        for other in self.links.pop(b, ()):
            self._unlink_one(other, b)
            self._link(a, other)
        return a

    def _link(self, a: int, b: int) -> None:
        if a == b:
            self.contradictions += 1  # known similar: keep what was known first
            return
        self.links.setdefault(a, set()).add(b)
        self.links.setdefault(b, set()).add(a)
        if a in self.members and b in self.members and b not in self.held_links[a]:
            self.held_links[a].add(b)
            self.held_links[b].add(a)
            self.held_revision += 1

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, Any]:
        self._compact()  # plain arrays: every known item at its root, roots numbered 0..
        n = self.size
        pairs = [(a, b) for a, linked in self.links.items() for b in linked if a < b]
        return {
            "known": torch.tensor(list(self.known.items()), dtype=torch.int64).reshape(-1, 2),
            "links": torch.tensor(sorted(pairs), dtype=torch.int64).reshape(-1, 2),
            "keys": torch.from_numpy(self.keys[:n].copy()),
            "rows": torch.from_numpy(self.rows[:n].copy()),
            "embeddings": torch.from_numpy(self.embeddings[:n].swapaxes(0, 1).copy()),
            "counters": [self.seen, self.contradictions],
            "held_limit": self.held_limit,
            "waiting": torch.from_numpy(np.stack([self.waiting, self.waiting_keys], 1)),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        n = len(state["keys"])
        if n > self.capacity or tuple(state["rows"].shape[1:]) != self.rows.shape[1:]:
            raise ValueError(
                f"constraint graph: expected at most {self.capacity} items of width "
                f"{self.rows.shape[1]}, got {tuple(state['rows'].shape)}"
            )
        self.restores += 1
        self.held_revision += 1
        self.known = {int(key): int(root) for key, root in state["known"].tolist()}
        self.parent = {}
        roots = list(self.known.values())
        self.count = {}
        for root in roots:
            self.count[root] = self.count.get(root, 0) + 1
        self.next_component = max(roots, default=-1) + 1
        self.links = {}
        self.members, self.held_links = {}, {}  # rebuilt below, once the links are in
        for a, b in state["links"].tolist():
            self._link(a, b)
        self.size = n
        self.keys[:n] = state["keys"].numpy()
        self.rows[:n] = state["rows"].numpy()
        self.embeddings[:n] = state["embeddings"].numpy().swapaxes(0, 1)
        self.slot_of = {int(key): slot for slot, key in enumerate(self.keys[:n].tolist())}
        self.component[:n] = [self.known[key] for key in self.keys[:n].tolist()]
        ids, counts = np.unique(self.component[:n], return_counts=True)
        for root, n_held in zip(ids.tolist(), counts.tolist(), strict=True):
            self._start_holding(root)
            self.members[root] = n_held
        self.seen, self.contradictions = (int(v) for v in state["counters"])
        # Graphs saved before the reservoir could grow held their capacity throughout.
        self.held_limit = min(int(state.get("held_limit", self.capacity)), self.capacity)
        # Graphs saved before mining ahead have none waiting.
        waiting = state.get("waiting", torch.zeros((0, 2, 3), dtype=torch.int64)).numpy()
        self.waiting, self.waiting_keys = waiting[:, 0].copy(), waiting[:, 1].copy()
