"""A generated stand-in for the ATLAS four-lepton files, in the same ROOT schema.

Offline (``GPUCOURSE_OFFLINE=1``), or when the real files cannot be
downloaded, episode 3 runs on events generated here: H → ZZ* → 4ℓ signal and
ZZ → 4ℓ background with the right mass peaks and lepton kinematics, written as
ROOT files with the release's tree, branch names, MeV units and jagged lepton
arrays. The real reader (``atlas_schema.read_events``) then runs unchanged; every
output says the data are a stand-in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import cache
from .atlas_schema import ELECTRON, MEV_PER_GEV, MUON, MZ, SAMPLES, TREE, invariant_mass


def _unit_vectors(rng, n):
    cos = rng.uniform(-1.0, 1.0, n)
    phi = rng.uniform(0.0, 2 * np.pi, n)
    sin = np.sqrt(1.0 - cos**2)
    return np.stack([sin * np.cos(phi), sin * np.sin(phi), cos], axis=-1)


def _two_body(mother, m1, m2):
    m2sum, m2diff = (m1 + m2) ** 2, (m1 - m2) ** 2
    return np.sqrt(np.maximum((mother**2 - m2sum) * (mother**2 - m2diff), 0.0)) / (2 * mother)


def _boost(p4, beta):
    """Boost four-vectors ``p4`` (..., 4) by velocity ``beta`` (..., 3)."""
    b2 = np.clip((beta**2).sum(axis=-1), 0.0, 1 - 1e-12)
    gamma = 1.0 / np.sqrt(1.0 - b2)
    bp = (beta * p4[..., 1:]).sum(axis=-1)
    k = np.where(b2 > 0, (gamma - 1.0) / np.where(b2 > 0, b2, 1.0), 0.0)
    p3 = p4[..., 1:] + (k * bp + gamma * p4[..., 0])[..., None] * beta
    return np.concatenate([(gamma * (p4[..., 0] + bp))[..., None], p3], axis=-1)


def _decay(rng, mother_p4, m1, m2):
    """Isotropic two-body decays in the mother's rest frame, returned in the lab."""
    p = _two_body(invariant_mass(mother_p4), m1, m2)
    direction = _unit_vectors(rng, len(p))
    d1 = np.concatenate([np.sqrt(m1**2 + p**2)[:, None], p[:, None] * direction], axis=1)
    d2 = np.concatenate([np.sqrt(m2**2 + p**2)[:, None], -p[:, None] * direction], axis=1)
    beta = mother_p4[:, 1:] / mother_p4[:, :1]
    return _boost(d1, beta), _boost(d2, beta)


def _breit_wigner(rng, n, mass, width, low, high):
    out = np.empty(0)
    while len(out) < n:
        x = mass + 0.5 * width * np.tan(np.pi * (rng.uniform(size=2 * n) - 0.5))
        out = np.concatenate([out, x[(x > low) & (x < high)]])
    return out[:n]


def _masses(rng, kind, n):
    """(M, mZ1, mZ2) in GeV for ``kind`` 'signal' or 'background'."""
    if kind == "signal":  # H(125) → Z Z*: one on-shell Z, one off-shell
        m = np.full(n, 125.0)
        z1 = _breit_wigner(rng, n, MZ, 2.4952, 50.0, 106.0)
        upper = m - z1 - 1.0
        z2 = 12.0 + (upper - 12.0) * rng.beta(2.2, 1.2, n)
        return m, z1, z2
    parts = rng.choice(3, size=n, p=[0.16, 0.19, 0.65])
    m, z1, z2 = np.empty(n), np.empty(n), np.empty(n)
    single = parts == 0  # Z → 4ℓ: the single-Z peak at m4ℓ ≈ 91 GeV
    k = single.sum()
    m[single] = _breit_wigner(rng, k, MZ, 2.4952, 80.0, 100.0)
    z2[single] = 4.0 + rng.exponential(8.0, k).clip(max=30.0)
    z1[single] = (m[single] - z2[single] - 0.5) * rng.beta(6.0, 1.4, k)
    zg = parts == 1  # Z γ*: a falling continuum between the peaks
    k = zg.sum()
    z1[zg] = _breit_wigner(rng, k, MZ, 2.4952, 60.0, 120.0)
    z2[zg] = 12.0 + rng.exponential(12.0, k)
    m[zg] = z1[zg] + z2[zg] + rng.exponential(25.0, k)
    zz = parts == 2  # on-shell ZZ: the continuum above 2 mZ ≈ 180 GeV
    k = zz.sum()
    z1[zz] = _breit_wigner(rng, k, MZ, 2.4952, 60.0, 120.0)
    z2[zz] = _breit_wigner(rng, k, MZ, 2.4952, 60.0, 120.0)
    m[zz] = z1[zz] + z2[zz] + rng.gamma(1.6, 30.0, k)
    return m, z1, z2


def _generate(rng, kind, n):
    """Leptons of ``n`` events: p4 (n,4,4) GeV, flavour (n,4), charge (n,4)."""
    m, z1, z2 = _masses(rng, kind, n)
    pt = rng.gamma(1.5, 14.0 if kind == "signal" else 10.0, n)
    y = rng.normal(0.0, 1.6 if kind == "signal" else 1.4, n)
    phi = rng.uniform(-np.pi, np.pi, n)
    mt = np.sqrt(m**2 + pt**2)
    mother = np.stack([mt * np.cosh(y), pt * np.cos(phi), pt * np.sin(phi), mt * np.sinh(y)], axis=1)
    za, zb = _decay(rng, mother, z1, z2)
    leptons, flavours = [], []
    for z in (za, zb):
        flav = np.where(rng.uniform(size=n) < 0.5, ELECTRON, MUON)
        ml = np.where(flav == ELECTRON, 0.000511, 0.10566)
        l1, l2 = _decay(rng, z, ml, ml)
        leptons += [l1, l2]
        flavours += [flav, flav]
    p4 = np.stack(leptons, axis=1)
    flavour = np.stack(flavours, axis=1)
    charge = np.tile(np.array([1, -1, 1, -1]), (n, 1))
    swap = rng.uniform(size=(n, 2)) < 0.5  # which lepton of each pair is the ℓ⁺
    charge[:, 0:2] *= np.where(swap[:, :1], -1, 1)
    charge[:, 2:4] *= np.where(swap[:, 1:], -1, 1)
    resolution = np.where(flavour == ELECTRON, 0.02, 0.025)
    scale = 1.0 + resolution * rng.standard_normal((n, 4))
    radiated = rng.uniform(size=n) < 0.1  # final-state radiation: one lepton loses a little energy
    scale[radiated, rng.integers(0, 4, int(radiated.sum()))] *= 1.0 - rng.exponential(0.04, int(radiated.sum())).clip(max=0.5)
    return p4 * scale[..., None], flavour, charge


def _kinematics(p4):
    px, py, pz = p4[..., 1], p4[..., 2], p4[..., 3]
    pt = np.hypot(px, py)
    return pt, np.arcsinh(pz / np.maximum(pt, 1e-9)), np.arctan2(py, px)


def generate_standin_events(kind: str, n_events: int, seed: int = 0) -> dict:
    """Events like those of the 4lep skim, as flat NumPy arrays plus counts.

    ``kind`` is "signal" (m4ℓ peaked at 125 GeV, one on-shell Z) or
    "background" (the single-Z → 4ℓ peak near 91 GeV, a Zγ* continuum and the
    ZZ continuum above about 180 GeV). Leptons pass the skim's acceptance
    (pT > 7 GeV, leading > 25 GeV, |η| < 2.47 for e, 2.7 for μ); a few events
    get a fifth lepton, a mis-measured charge or a mis-identified flavour, so
    that the selection has something to remove.
    """
    if kind not in ("signal", "background"):
        raise ValueError(f"kind must be 'signal' or 'background', got {kind!r}.")
    if n_events < 1:
        raise ValueError(f"n_events must be positive, got {n_events}.")
    rng = np.random.default_rng([seed, 0 if kind == "signal" else 1])
    kept = []
    total = 0
    while total < n_events:
        p4, flavour, charge = _generate(rng, kind, max(2 * (n_events - total), 1000))
        pt, eta, _ = _kinematics(p4)
        eta_max = np.where(flavour == ELECTRON, 2.47, 2.7)
        ok = ((pt > 7.0) & (np.abs(eta) < eta_max)).all(axis=1) & (pt.max(axis=1) > 25.0)
        kept.append((p4[ok], flavour[ok], charge[ok]))
        total += int(ok.sum())
    p4, flavour, charge = (np.concatenate(parts)[:n_events] for parts in zip(*kept))
    n = n_events
    flip_charge = rng.uniform(size=n) < 0.05
    which = rng.integers(0, 4, n)
    charge[flip_charge, which[flip_charge]] *= -1
    flip_flavour = rng.uniform(size=n) < 0.04
    which = rng.integers(0, 4, n)
    idx = np.flatnonzero(flip_flavour)
    flavour[idx, which[idx]] = np.where(flavour[idx, which[idx]] == ELECTRON, MUON, ELECTRON)
    pt, eta, phi = _kinematics(p4)
    energy = p4[..., 0]
    columns = {"pt": pt, "eta": eta, "phi": phi, "E": energy,
               "charge": charge.astype(np.int32), "type": flavour.astype(np.uint32)}
    extra = rng.uniform(size=n) < 0.08  # a fifth, soft lepton
    counts = np.where(extra, 5, 4)
    k = int(extra.sum())
    fifth_pt = rng.uniform(7.0, 20.0, k)
    fifth_eta = rng.uniform(-2.4, 2.4, k)
    fifth = {"pt": fifth_pt, "eta": fifth_eta, "phi": rng.uniform(-np.pi, np.pi, k),
             "E": fifth_pt * np.cosh(fifth_eta), "charge": rng.choice([-1, 1], k).astype(np.int32),
             "type": rng.choice([ELECTRON, MUON], k).astype(np.uint32)}
    pt_padded = np.concatenate([pt, np.zeros((n, 1))], axis=1)
    pt_padded[extra, 4] = fifth_pt
    order = np.argsort(-pt_padded, axis=1, kind="stable")  # by pT; an absent fifth lepton sorts last
    present = np.arange(5)[None, :] < counts[:, None]
    flat = {}
    for name, values in columns.items():
        padded = np.concatenate([values, np.zeros((n, 1), values.dtype)], axis=1)
        padded[extra, 4] = fifth[name]
        flat[name] = np.take_along_axis(padded, order, axis=1)[present]
    for name in ("pt", "E"):
        flat[name] = flat[name] * MEV_PER_GEV
    return {"counts": counts.astype(np.int32), **{f"lep_{k}": v for k, v in flat.items()}}


def write_standin_file(path, kind: str, n_events: int, seed: int = 0) -> Path:
    """Write a stand-in ROOT file with the release's schema (tree ``mini``, MeV, jagged leptons).

    Written to a temporary file and renamed, with a checksum record beside it.
    Call it under ``cache.lock(path)`` when other processes may use the file.
    """
    import awkward as ak
    import uproot

    path = Path(path)
    data = generate_standin_events(kind, n_events, seed)
    counts = data["counts"]
    dtypes = {"pt": np.float32, "eta": np.float32, "phi": np.float32, "E": np.float32,
              "charge": np.int32, "type": np.uint32}
    lep = ak.zip({k: ak.unflatten(data[f"lep_{k}"].astype(dt), counts) for k, dt in dtypes.items()})
    sample = SAMPLES[kind]
    n = len(counts)
    scalars = {
        "eventNumber": np.arange(1, n + 1, dtype=np.int32),
        "channelNumber": np.full(n, sample.dsid, dtype=np.int32),
        "mcWeight": np.ones(n, dtype=np.float32),
        "scaleFactor_PILEUP": np.ones(n, dtype=np.float32),
        "trigE": np.ones(n, dtype=bool),
        "trigM": np.ones(n, dtype=bool),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with cache.temporary(path) as (_, tmp):
        pass  # uproot writes the file by name
    try:
        with uproot.recreate(tmp) as out:
            types = {k: v.dtype for k, v in scalars.items()}
            types["lep"] = lep.type.content
            out.mktree(TREE, types, title="ATLAS Open Data 4lep stand-in (generated, not real data)",
                       counter_name=lambda counted: "lep_n", field_name=lambda outer, inner: f"{outer}_{inner}")
            out[TREE].extend({**scalars, "lep": lep})
        return cache.commit(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)



def standin_files(n_events: int, seed: int = 0, directory=None) -> dict[str, Path]:
    """The two stand-in files (generated once, then reused from the cache)."""
    folder = Path(directory) if directory else cache.folder("atlas-4lep", "standin")
    paths = {}
    for key, sample in SAMPLES.items():
        path = folder / f"n{n_events}-seed{seed}" / sample.filename
        with cache.lock(path):
            problem = cache.problem(path)
            if problem is not None:
                if path.exists():
                    print(f"Cached stand-in {path.name} is not usable ({problem}); writing it again.")
                cache.remove(path)
                write_standin_file(path, key, n_events, seed)
        paths[key] = path
    return paths
