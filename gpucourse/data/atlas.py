"""ATLAS 13 TeV Open Data, four-lepton events: reading, selection, features.

Episode 3 trains a classifier that separates Higgs-boson events
(H → ZZ* → 4ℓ, signal) from the irreducible ZZ → 4ℓ background. The events come
from the ATLAS Open Data for education, 13 TeV release of 2020 (``2020e-13tev``
in ``atlasopenmagic``), "4lep" skim: ROOT files with a tree ``mini`` whose
lepton branches are per-event (jagged) arrays in MeV.

The pipeline, each step a small public function:

``read_events(path)``
    Reads only ``BRANCHES`` from one file with uproot; checks the schema
    (defined in ``atlas_schema``).
``select_four_leptons(events)``
    The standard selection: exactly four leptons, total charge zero, two
    same-flavour opposite-charge (SFOS) pairs. Returns a mask and a cut flow.
``compute_features(events)``
    Per event: the four leptons' pT, η, φ (GeV, ordered by pT), the
    four-lepton mass m4ℓ and the two pair masses mZ1 (the SFOS pair closest to
    the Z mass) and mZ2.
``load_4lep(n_per_class)``
    Everything at once, with the feature table cached: the real files when the
    network allows, otherwise a generated stand-in, announced in the output.

What a file is (release, tree, branches, units, samples) and the reader that
checks it: ``atlas_schema``, re-exported here. Where the real files come from,
pinned with their sizes and checksums: ``atlas_sources``. The offline
stand-in, generated in the same ROOT schema so that the same reader runs:
``atlas_standin``. Each of the three imports ``atlas_schema``, none imports
``atlas``. Every file goes through the course cache (``cache``).
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import settings
from . import cache
from . import atlas_sources as sources
from .atlas_schema import (BRANCHES, ELECTRON, LEPTON_BRANCHES, MEV_PER_GEV, MUON, MZ, RELEASE,  # noqa: F401
                           SAMPLES, SKIM, TREE, Sample, SchemaError, invariant_mass, read_events)
from .atlas_standin import standin_files
from .download import DownloadError

# --- The data set: see atlas_schema (shared with atlas_sources and atlas_standin) ---

FEATURES = tuple(f"lep{i}_{v}" for i in range(1, 5) for v in ("pt", "eta", "phi")) + ("m4l", "mZ1", "mZ2")
"""Feature columns, in order; momenta and masses in GeV."""

_CUTS = ("read", "exactly 4 leptons", "total charge 0", "two SFOS pairs")
_CACHE_VERSION = 1  # bump when the selection or the features change


class NoEventsError(ValueError):
    """No event passed the selection, so there is nothing to learn from."""


# --- Selecting ---------------------------------------------------------------

def select_four_leptons(events):
    """The standard four-lepton selection.

    Returns
    -------
    mask : numpy.ndarray of bool
        True for events with exactly four leptons, total charge zero and two
        same-flavour opposite-charge pairs.
    cutflow : dict
        Events left after each cut, in order.
    """
    import awkward as ak

    n = len(events)
    four = ak.to_numpy(events["lep_n"]) == 4
    charge_ok = np.zeros(n, dtype=bool)
    sfos_ok = np.zeros(n, dtype=bool)
    if four.any():
        sub = events[four]
        charge = ak.to_numpy(sub["lep_charge"]).astype(np.int64)
        flavour = ak.to_numpy(sub["lep_type"]).astype(np.int64)
        q0 = charge.sum(axis=1) == 0
        sfos = q0.copy()
        for f in (ELECTRON, MUON):
            sfos &= (charge * (flavour == f)).sum(axis=1) == 0
        sfos &= np.isin(flavour, (ELECTRON, MUON)).all(axis=1)
        charge_ok[four] = q0
        sfos_ok[four] = sfos
    cutflow = dict(zip(_CUTS, (n, int(four.sum()), int(charge_ok.sum()), int(sfos_ok.sum()))))
    return sfos_ok, cutflow


def _four_vectors(events):
    """(n, 4, 4) array of (E, px, py, pz) in GeV, leptons ordered by pT."""
    import awkward as ak

    pt = ak.to_numpy(events["lep_pt"]).astype(np.float64) / MEV_PER_GEV
    eta = ak.to_numpy(events["lep_eta"]).astype(np.float64)
    phi = ak.to_numpy(events["lep_phi"]).astype(np.float64)
    energy = ak.to_numpy(events["lep_E"]).astype(np.float64) / MEV_PER_GEV
    charge = ak.to_numpy(events["lep_charge"]).astype(np.int64)
    flavour = ak.to_numpy(events["lep_type"]).astype(np.int64)
    order = np.argsort(-pt, axis=1, kind="stable")
    take = lambda a: np.take_along_axis(a, order, axis=1)  # noqa: E731
    pt, eta, phi, energy, charge, flavour = map(take, (pt, eta, phi, energy, charge, flavour))
    p4 = np.stack([energy, pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta)], axis=-1)
    return p4, pt, eta, phi, charge, flavour


_PAIRINGS = ((0, 1, 2, 3), (0, 2, 1, 3), (0, 3, 1, 2))


def compute_features(events):
    """Feature table of selected four-lepton events.

    Parameters
    ----------
    events : awkward.Array
        Events that passed ``select_four_leptons`` (exactly four leptons each).

    Returns
    -------
    numpy.ndarray, shape (n_events, 15), float32
        Columns ``FEATURES``: lepton pT, η, φ (ordered by pT), m4ℓ, mZ1, mZ2;
        GeV. mZ1 is the SFOS pair mass closest to the Z mass over all valid
        pairings; mZ2 is the mass of the other pair.
    """
    if len(events) == 0:
        return np.zeros((0, len(FEATURES)), dtype=np.float32)
    p4, pt, eta, phi, charge, flavour = _four_vectors(events)
    m4l = invariant_mass(p4.sum(axis=1))
    best = np.full(len(pt), np.inf)
    mz1 = np.full(len(pt), np.nan)
    mz2 = np.full(len(pt), np.nan)
    for a, b, c, d in _PAIRINGS:
        valid = ((flavour[:, a] == flavour[:, b]) & (charge[:, a] + charge[:, b] == 0)
                 & (flavour[:, c] == flavour[:, d]) & (charge[:, c] + charge[:, d] == 0))
        m_ab = invariant_mass(p4[:, a] + p4[:, b])
        m_cd = invariant_mass(p4[:, c] + p4[:, d])
        ab_first = np.abs(m_ab - MZ) <= np.abs(m_cd - MZ)
        z1 = np.where(ab_first, m_ab, m_cd)
        z2 = np.where(ab_first, m_cd, m_ab)
        score = np.where(valid, np.abs(z1 - MZ), np.inf)
        better = score < best
        best = np.where(better, score, best)
        mz1 = np.where(better, z1, mz1)
        mz2 = np.where(better, z2, mz2)
    if not np.isfinite(best).all():
        raise ValueError("compute_features needs events with two SFOS pairs; "
                         "apply select_four_leptons first.")
    columns = []
    for i in range(4):
        columns += [pt[:, i], eta[:, i], phi[:, i]]
    columns += [m4l, mz1, mz2]
    return np.stack(columns, axis=1).astype(np.float32)


def features_from_file(path, max_events: int | None = None):
    """Read, select and compute features for one file.

    Returns
    -------
    X : numpy.ndarray (n_selected, 15)
    cutflow : dict

    Raises
    ------
    NoEventsError
        If no event passes the selection.
    """
    events = read_events(path, max_events)
    mask, cutflow = select_four_leptons(events)
    if not mask.any():
        raise NoEventsError(
            f"No event in {Path(path).name} passed the four-lepton selection "
            f"(cut flow: {_format_cutflow(cutflow)}). There is nothing to train on: check that "
            f"this is a 4-lepton file of release {RELEASE}.")
    return compute_features(events[mask]), cutflow


def _format_cutflow(cutflow: dict) -> str:
    return " → ".join(f"{k}: {v}" for k, v in cutflow.items())


# --- The feature table, cached -------------------------------------------------

def cached_features(path, verbose: bool = True):
    """``features_from_file(path)``, cached in the course cache under a key of the file's SHA-256.

    A cached table that does not match its checksum record (truncated,
    corrupt) is detected, reported and rebuilt.
    """
    path = Path(path)
    try:
        digest = str(json.loads(cache.record_path(path).read_text())["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        digest = cache.sha256(path)
    table_path = cache.folder("atlas-4lep", "features") / f"{path.stem}.{digest[:16]}.v{_CACHE_VERSION}.npz"
    with cache.lock(table_path):
        problem = cache.problem(table_path)
        if problem is None:
            try:
                with np.load(table_path) as table:
                    return table["X"], json.loads(str(table["cutflow"]))
            except Exception as exc:
                problem = f"unreadable ({type(exc).__name__})"
        if table_path.exists():
            print(f"Cached feature table {table_path.name} is not usable ({problem}); rebuilding it.")
        cache.remove(table_path)
        X, cutflow = features_from_file(path)
        buffer = io.BytesIO()
        np.savez(buffer, X=X, cutflow=np.array(json.dumps(cutflow)))
        cache.write_bytes(table_path, buffer.getvalue())
    return X, cutflow


# --- Everything at once ----------------------------------------------------------

@dataclass
class FourLeptonData:
    """Features and labels of selected four-lepton events."""

    X: np.ndarray
    y: np.ndarray
    feature_names: tuple = FEATURES
    standin: bool = False
    files: dict = field(default_factory=dict)
    cutflow: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def source(self) -> str:
        if self.standin:
            return "generated stand-in with the ATLAS Open Data schema (NOT real ATLAS data)"
        return f"ATLAS Open Data, release {RELEASE}, {SKIM} skim ({sources.RECORD_URL})"

    def summary(self) -> str:
        lines = [f"Source: {self.source}"]
        if not self.standin:
            lines.append(f"{sources.USAGE} Licence: {sources.LICENCE}.")
            lines.append(f"Cite: {sources.CITATION}")
        for key, path in self.files.items():
            size = Path(path).stat().st_size / 1e6
            lines.append(f"  {key:<10} {Path(path).name}  {size:.1f} MB  cut flow: "
                         f"{_format_cutflow(self.cutflow[key])}")
        n_sig = int(self.y.sum())
        lines.append(f"Events used: {len(self.y)} ({n_sig} signal, {len(self.y) - n_sig} background), "
                     f"{self.X.shape[1]} features; prepared in {self.seconds:.1f} s.")
        return "\n".join(lines)


def load_4lep(n_per_class: int | None = None, *, source: str = "auto", timeout: float = 30.0,
              seed: int = 0, verbose: bool = True) -> FourLeptonData:
    """Selected four-lepton events with features, balanced between the classes.

    Parameters
    ----------
    n_per_class : int, optional
        Take this many events of each class (fewer if fewer pass); None takes
        as many as the smaller class has.
    source : {"auto", "atlas", "standin"}
        "auto" uses the real files unless ``GPUCOURSE_OFFLINE`` is set or the
        download fails, and then the stand-in, saying so. "atlas" raises
        instead of falling back; "standin" never touches the network.
    timeout : float
        Seconds a URL lookup or a stalled download may take before giving up.
    seed : int
        Seeds the stand-in generator and the choice of events.

    Returns
    -------
    FourLeptonData
        ``X`` (float32, shape (n, 15), GeV) and ``y`` (float32, 1 = signal).
    """
    if source not in ("auto", "atlas", "standin"):
        raise ValueError(f"source must be 'auto', 'atlas' or 'standin', got {source!r}.")
    if n_per_class is not None and n_per_class < 1:
        raise ValueError(f"n_per_class must be a positive number of events, got {n_per_class}.")
    start = time.perf_counter()
    files, standin = None, source == "standin"
    if source in ("auto", "atlas"):
        if settings.offline() and source == "auto":
            settings.allow_stand_in("ATLAS Open Data", "offline mode, GPUCOURSE_OFFLINE=1")
            print("Offline mode (GPUCOURSE_OFFLINE=1): using the generated stand-in, not real ATLAS data.")
            standin = True
        else:
            try:
                files = sources.real_files(timeout=timeout, verbose=verbose)
            except DownloadError as exc:
                if source == "atlas":
                    raise
                settings.allow_stand_in("ATLAS Open Data", str(exc))
                print(f"Could not get the ATLAS Open Data files ({exc}).\n"
                      "Using the generated stand-in instead (same schema, NOT real ATLAS data).")
                standin = True
    if standin:
        n_generate = 50_000 if n_per_class is None else int(np.ceil(n_per_class / 0.8 / 1000) * 1000)
        files = standin_files(n_generate, seed)
    tables, cutflow = {}, {}
    for key, path in files.items():
        tables[key], cutflow[key] = cached_features(path, verbose=verbose)
    n = min(len(t) for t in tables.values())
    if n_per_class is not None:
        n = min(n, n_per_class)
    rng = np.random.default_rng(seed)
    X, y = [], []
    for key, table in tables.items():
        pick = np.sort(rng.choice(len(table), size=n, replace=False))
        X.append(table[pick])
        y.append(np.full(n, SAMPLES[key].label, dtype=np.float32))
    data = FourLeptonData(np.concatenate(X), np.concatenate(y), FEATURES, standin, files, cutflow,
                          time.perf_counter() - start)
    return data

