"""The Taiji instance as arrays, and the two linear programs that solve it.

Everything here works on :class:`Compiled`: dense ``pops x regions`` numpy arrays
built once from a validated :class:`~orchestrator.policy.rebalance.model.SolverInstance`.

Load model (Taiji's appendix): the predicted utilization of region ``d`` is
``u'_d = u_d + k_d * (L'_d - L_d)``, where ``L_d = sum_e t_e x_ed`` is its current
load, ``L'_d`` the load under the new table and ``k_d = u_d / L_d`` the measured
utilization per unit of load, which makes it exactly Taiji's
``u'_d = u_d * (1 + (L'_d - L_d) / L_d)``. A region with no load now (just
restored) or no measurement has no measured slope; it uses ``1 / capacity``. A
region that carries load but reports utilization 0 has no usable measurement
either: its utilization now is taken as ``L_d / capacity`` (not 0, which would
make a loaded region look empty), so ``u'_d = L'_d / capacity``.

Every constraint of a region is a cap on its load: ``L'_d <= load_caps()[d]``
(utilization target scaled by a capacity-fraction override, the per-epoch ramp,
the share cap), except a pinned share (a load test's lever), which is also a
floor: ``L'_d >= load_floors()[d]``. Every constraint of a PoP is a bound on one entry: sticky
sessions are a floor, a region beyond the RTT limit may keep only that floor,
and so may a region that is not active (nothing new goes there). Writing ``z = x' - floor`` leaves a transportation
problem: PoP ``e`` ships its movable share ``mu_e`` to the regions it may use.

Scaling: a region's rows are written in its own utilization (multiplied by
``k_d * total``) whenever the region is smaller than the total demand. In shares
of the total demand, the whole cap of a region with 1e-8 of the demand's
capacity is under HiGHS's feasibility tolerance, and the LP empties or overfills
it at will; scaled, it gets its share of the balance like any other region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from orchestrator.models import RegionStatus
from orchestrator.policy.rebalance.model import SolverInstance

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["Compiled", "compile_instance", "min_latency", "min_max_utilization"]

Array = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]

#: Shares below this are numerical noise from the LP, not traffic.
EPS = 1e-12
#: Utilization slack when a table is compared with a cap or bound (see ``Compiled.load_tol``).
UTIL_TOL = 1e-11


@dataclass(frozen=True)
class Compiled:
    """The instance as arrays; rows are PoPs and columns regions, in instance order."""

    regions: list[str]
    pops: list[str]
    t: Array  # (P,) demand
    x: Array  # (P, R) current fractions
    floor: Array  # (P, R) sticky share that cannot move
    rtt: Array  # (P, R) ms
    active: Mask  # (R,)
    within: Mask  # (P, R) region is within the PoP's RTT limit (True without a limit)
    u: Array  # (R,) measured utilization
    k: Array  # (R,) utilization per unit of load
    load: Array  # (R,) current load
    target_cap: Array  # (R,) utilization cap from the target and capacity fraction
    ramp_cap: Array  # (R,) utilization cap from the per-epoch increase
    share_cap: Array  # (R,) share of total demand; inf when uncapped
    share_floor: Array  # (R,) share of total demand the region must get; 0 when unpinned
    capacity: Array  # (R,) load at utilization 1

    @property
    def total(self) -> float:
        return float(self.t.sum())

    @property
    def allowed(self) -> Mask:
        """Where a PoP may send traffic beyond its floor."""
        return self.within & self.active[None, :]

    @property
    def movable(self) -> Array:
        """Per PoP, the share of its traffic not pinned by sticky sessions."""
        return np.clip(1.0 - self.floor.sum(axis=1), 0.0, 1.0)

    @property
    def row_scale(self) -> Array:
        """Per region, the factor that turns a row in shares of the total demand into
        utilization: ``k_d * total``, or 1 for regions at least as large as the demand."""
        return np.maximum(self.k * self.total, 1.0)

    def load_tol(self, util_tol: float = UTIL_TOL) -> Array:
        """Per region, the load that moves its utilization by ``util_tol`` (at most
        ``util_tol`` of the total demand): a slack that means the same for every size."""
        total = max(self.total, 1e-300)
        with np.errstate(divide="ignore"):
            per_unit = np.where(self.k > 0, 1.0 / self.k, total)
        return util_tol * np.minimum(per_unit, total)

    def max_utilization(self, fractions: Array) -> float:
        """The highest predicted utilization over active regions under ``fractions``."""
        return float(self.predicted(fractions)[self.active].max())

    def predicted(self, fractions: Array) -> Array:
        """Predicted utilization per region under ``fractions`` (Taiji's u'_d)."""
        return self.u + self.k * (self.t @ fractions - self.load)

    def util_to_load(self, cap: Array) -> Array:
        """The load at which each region reaches utilization ``cap``."""
        with np.errstate(divide="ignore", invalid="ignore"):
            out = self.load + (cap - self.u) / self.k
        return np.where(self.k > 0, out, np.inf)

    def load_caps(self, *, target: bool = True, share: bool = True, ramp: bool = True) -> Array:
        """Per region, the most load it may carry; 0 for regions that are not active."""
        caps = np.full(len(self.regions), np.inf)
        if target:
            caps = np.minimum(caps, self.util_to_load(self.target_cap))
        if ramp:
            caps = np.minimum(caps, self.util_to_load(self.ramp_cap))
        if share:
            capped = np.isfinite(self.share_cap)
            caps[capped] = np.minimum(caps[capped], self.share_cap[capped] * self.total)
        return np.where(self.active, np.maximum(caps, 0.0), 0.0)

    def load_floors(self) -> Array:
        """Per region, the least load it must carry (a pinned share of the total demand)."""
        return self.share_floor * self.total


def compile_instance(instance: SolverInstance) -> Compiled:
    regions = instance.region_names()
    col = {name: j for j, name in enumerate(regions)}
    n_pops, n_regions = len(instance.pops), len(regions)
    t = np.array([p.demand for p in instance.pops], dtype=float)
    x = np.zeros((n_pops, n_regions))
    floor = np.zeros((n_pops, n_regions))
    rtt = np.zeros((n_pops, n_regions))
    within = np.ones((n_pops, n_regions), dtype=bool)
    for i, pop in enumerate(instance.pops):
        for name, share in pop.fractions.items():
            x[i, col[name]] = share
        for name, share in pop.sticky.items():
            floor[i, col[name]] = min(share, x[i, col[name]])
        for name, ms in pop.rtt_ms.items():
            rtt[i, col[name]] = ms
        limit = instance.rtt_limit(pop)
        if limit is not None:
            within[i] = rtt[i] <= limit
    x /= x.sum(axis=1, keepdims=True)

    cons = instance.constraints
    active = np.array([r.status is RegionStatus.ACTIVE for r in instance.regions])
    u = np.array([r.utilization for r in instance.regions], dtype=float)
    capacity = np.array([r.capacity for r in instance.regions], dtype=float)
    load = t @ x
    # Taiji's measured slope where there is load and a measurement; else capacity.
    with np.errstate(divide="ignore", invalid="ignore"):
        measured = np.where((load > 0) & (u > 0), u / load, np.nan)
        nominal = np.where(capacity > 0, 1.0 / capacity, 0.0)
    k = np.where(np.isnan(measured), nominal, measured)
    # Load with a reading of 0 is a missing reading, not an empty region.
    u = np.where((load > 0) & (u <= 0), load * nominal, u)
    usable = np.array(
        [1.0 if r.capacity_fraction is None else r.capacity_fraction for r in instance.regions]
    )
    shares = np.array(
        [
            min(
                1.0 if r.max_share is None else r.max_share,
                1.0 if cons.max_share is None else cons.max_share,
            )
            for r in instance.regions
        ]
    )
    # A share cap of 1 constrains nothing; leaving it out keeps the LP smaller.
    share_cap = np.where(shares >= 1.0, np.inf, shares)
    share_floor = np.array(
        [0.0 if r.min_share is None else r.min_share for r in instance.regions], dtype=float
    )
    return Compiled(
        regions=regions,
        pops=[p.name for p in instance.pops],
        t=t,
        x=x,
        floor=floor,
        rtt=rtt,
        active=active,
        within=within,
        u=u,
        k=k,
        load=load,
        target_cap=cons.target_utilization * usable,
        ramp_cap=u + cons.max_utilization_increase,
        share_cap=share_cap,
        share_floor=share_floor,
        capacity=capacity,
    )


def _floor_rows(
    need: Array, d_idx: npt.NDArray[np.intp], coef: Array, width: int, scale: Array
) -> tuple[sp.csr_matrix, Array]:
    """``-sum coef * var <= -need_d`` for every region that still needs load to meet its pin.

    ``need`` is per region in units of total demand (pin minus what sticky floors already
    place there); ``d_idx`` gives each variable's region and ``coef`` its load per unit,
    already multiplied by the region's row ``scale``, which the right-hand side gets here.
    """
    # Imported here: scipy costs ~0.3 s, and importing a contract must not pay it.
    import scipy.sparse as sp

    pinned = np.nonzero(need > 0)[0]
    sel = np.isin(d_idx, pinned)
    rows = sp.csr_matrix(
        (-coef[sel], (np.searchsorted(pinned, d_idx[sel]), np.nonzero(sel)[0])),
        shape=(len(pinned), width),
    )
    return rows, -need[pinned] * scale[pinned]


def _solving_pops(c: Compiled) -> npt.NDArray[np.intp]:
    """PoPs whose split changes some region's load: demand and a movable share."""
    return np.nonzero((c.t > 0) & (c.movable > 1e-12) & c.allowed.any(axis=1))[0]


def min_max_utilization(c: Compiled, caps: Array) -> float | None:
    """Stage 1: the lowest achievable max predicted utilization over active regions.

    PoPs that may use the same set of regions are interchangeable here, so they
    are merged into one supply node: without RTT limits the LP has one row per
    region, not one per PoP. Returns None when no table meets ``caps``.
    """
    # Imported here: scipy costs ~0.3 s, and importing a contract must not pay it.
    import scipy.sparse as sp
    from scipy.optimize import linprog

    total = c.total
    if total <= 0:
        return float(c.predicted(c.x)[c.active].max())
    fixed = c.t @ c.floor / total  # load pinned by floors, in units of total demand
    rows = _solving_pops(c)
    groups: dict[bytes, float] = {}
    masks: dict[bytes, Mask] = {}
    allowed, supply = c.allowed, c.t * c.movable / total
    for i in rows:
        key = allowed[i].tobytes()
        groups[key] = groups.get(key, 0.0) + supply[i]
        masks[key] = allowed[i]
    k_hat = c.k * total
    base = c.u - c.k * c.load  # utilization at zero load
    if not groups:
        util = base + k_hat * fixed
        tol = c.load_tol(1e-9) / total
        on = c.active
        fits = np.all(fixed[on] <= caps[on] / total + tol[on]) and np.all(
            fixed[on] >= c.share_floor[on] - tol[on]
        )
        return float(util[on].max()) if fits else None

    gi, di = [], []
    for g, key in enumerate(groups):
        cols = np.nonzero(masks[key])[0]
        gi.extend([g] * len(cols))
        di.extend(cols.tolist())
    g_idx, d_idx = np.array(gi), np.array(di)
    n = len(g_idx)
    u_col = n  # the epigraph variable U
    act = np.nonzero(c.active)[0]
    # Rows: k_d * (fixed_d + sum_g y_gd) + base_d <= U for active d; load caps.
    obj_rows = sp.csr_matrix(
        (k_hat[d_idx], (np.searchsorted(act, d_idx), np.arange(n))), shape=(len(act), n + 1)
    ).tolil()
    obj_rows[:, u_col] = -1.0
    obj_b = -(base[act] + k_hat[act] * fixed[act])
    # Regions that are not active get no variables; their floors (sticky sessions
    # that stay on a drained region) are fixed load, not a cap to meet.
    finite = np.nonzero(np.isfinite(caps) & c.active)[0]
    scale = c.row_scale
    sel = np.isin(d_idx, finite)
    cap_rows = sp.csr_matrix(
        (scale[d_idx[sel]], (np.searchsorted(finite, d_idx[sel]), np.nonzero(sel)[0])),
        shape=(len(finite), n + 1),
    )
    cap_b = (caps[finite] / total - fixed[finite]) * scale[finite]
    if np.any(cap_b < -1e-9):
        return None
    floor_rows, floor_b = _floor_rows(c.share_floor - fixed, d_idx, scale[d_idx], n + 1, scale)
    a_ub = sp.vstack([obj_rows.tocsr(), cap_rows, floor_rows]).tocsr()
    b_ub = np.concatenate([obj_b, np.maximum(cap_b, 0.0), floor_b])
    a_eq = sp.csr_matrix((np.ones(n), (g_idx, np.arange(n))), shape=(len(groups), n + 1))
    b_eq = np.array(list(groups.values()))
    cost = np.zeros(n + 1)
    cost[u_col] = 1.0
    bounds = np.array([(0.0, None)] * n + [(None, None)], dtype=object)
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method="highs")
    if res.status != 0:
        return None
    return float(res.x[u_col])


def min_latency(
    c: Compiled, caps: Array, max_util: float, *, full: bool = False, k: int | None = None
) -> Array | None:
    """Stage 2: the table of least ``sum x' t RTT^2`` with every region at most ``max_util``.

    Solved by column generation (``taiji_colgen``), which proves the full LP's
    optimum over a fraction of its columns; ``full`` solves the LP over every
    allowed pair instead (the reference the property tests and the benchmark compare with);
    ``k`` overrides the regions per PoP column generation starts from.
    Returns full ``(P, R)`` fractions, or None when HiGHS finds no solution
    (only possible through tolerances, since stage 1 proved one exists).
    """
    # Imported here: scipy costs ~0.3 s, and importing a contract must not pay it.
    import scipy.sparse as sp

    from orchestrator.policy.rebalance.colgen import K_NEAREST, LatencyLP, solve_colgen, solve_full
    from orchestrator.policy.rebalance.stay import least_move

    total = c.total
    out = c.floor.copy()
    rows = _solving_pops(c)
    if total <= 0 or len(rows) == 0:
        return out
    util_caps = np.where(c.active, c.util_to_load(np.full(len(c.regions), max_util)), 0.0)
    region_caps = np.minimum(caps, util_caps) / total - c.t @ c.floor / total
    sub = c.allowed[rows]
    ei_local, di = np.nonzero(sub)
    ei = rows[ei_local]
    n = len(ei)
    t_hat = c.t[ei] / total
    cost = t_hat * c.rtt[ei, di] ** 2 / max(float(c.rtt.max()), 1.0) ** 2
    finite = np.nonzero(np.isfinite(region_caps) & c.active)[0]
    scale = c.row_scale
    sel = np.isin(di, finite)
    cap_rows = sp.csr_matrix(
        (t_hat[sel] * scale[di[sel]], (np.searchsorted(finite, di[sel]), np.nonzero(sel)[0])),
        shape=(len(finite), n),
    )
    floor_rows, floor_b = _floor_rows(
        c.share_floor - c.t @ c.floor / total, di, t_hat * scale[di], n, scale
    )
    lp = LatencyLP(
        cost=cost,
        a_ub=sp.vstack([cap_rows, floor_rows]).tocsc(),
        b_ub=np.concatenate([np.maximum(region_caps[finite] * scale[finite], 0.0), floor_b]),
        a_eq=sp.csc_matrix((np.ones(n), (ei_local, np.arange(n))), shape=(len(rows), n)),
        b_eq=c.movable[rows],
        row=ei_local,
        rtt=c.rtt[ei, di],
        current=c.x[ei, di] > 0,
    )
    solution = solve_full(lp) if full else solve_colgen(lp, K_NEAREST if k is None else k)
    if solution is None:
        return None
    keep = c.x[ei, di] - c.floor[ei, di]
    solution = least_move(lp, solution, keep, t_hat)
    z = np.where(solution > EPS, solution, 0.0)
    np.add.at(out, (ei, di), z)
    # HiGHS meets the row sums to ~1e-9; rescale the movable part so they are exact.
    movable_now = out[rows].sum(axis=1) - c.floor[rows].sum(axis=1)
    factor = np.divide(c.movable[rows], movable_now, out=np.ones(len(rows)), where=movable_now > 0)
    out[rows] = c.floor[rows] + (out[rows] - c.floor[rows]) * factor[:, None]
    return out
