"""ATLAS 13 TeV Open Data, four-lepton events: download, selection, features.

Episode 3 trains a classifier that separates Higgs-boson events
(H → ZZ* → 4ℓ, signal) from the irreducible ZZ → 4ℓ background. The events come
from the ATLAS Open Data for education, 13 TeV release of 2020 (``2020e-13tev``
in ``atlasopenmagic``), "4lep" skim: ROOT files with a tree ``mini`` whose
lepton branches are per-event (jagged) arrays in MeV.

The pipeline, each step a small public function:

``read_events(path)``
    Reads only ``BRANCHES`` from one file with uproot; checks the schema.
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

``write_standin(directory)`` writes physics-motivated events in the same ROOT
schema (tree name, branch names, MeV, jagged lepton arrays), so the same reader
runs offline.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import settings
from .download import DownloadError, atomic_write_bytes, fetch, sha256

# --- The data set ----------------------------------------------------------

RELEASE = "2020e-13tev"
"""The pinned ATLAS Open Data release (name used by ``atlasopenmagic``)."""

SKIM = "4lep"
TREE = "mini"
RECORD_URL = "https://opendata.cern.ch/record/15005"
LICENCE = "CC0 1.0 (Creative Commons public-domain waiver), as ATLAS Open Data on the CERN Open Data portal"
CITATION = ("ATLAS Collaboration, ATLAS 13 TeV Open Data for education (2020), 4-lepton samples, "
            "CERN Open Data portal, " + RECORD_URL + "; documentation: ATL-OREACH-PUB-2020-001")

_EOS_DIR = "eos/opendata/atlas/OutreachDatasets/2020-01-22/4lep/MC/"
MIRRORS = (
    "https://opendata.cern.ch/" + _EOS_DIR,
    "https://atlas-opendata.web.cern.ch/atlas-opendata/samples/2020/4lep/MC/",
)
"""Pinned HTTPS locations of the release's 4lep MC files, tried in order after
the URL ``atlasopenmagic`` reports."""


@dataclass(frozen=True)
class Sample:
    """One Monte Carlo sample of the release."""

    key: str
    dsid: int
    name: str
    label: int
    description: str

    @property
    def filename(self) -> str:
        return f"mc_{self.dsid}.{self.name}.{SKIM}.root"


SAMPLES = {
    "signal": Sample("signal", 345060, "ggH125_ZZ4lep", 1,
                     "gluon-fusion Higgs boson, m_H = 125 GeV, H → ZZ* → 4ℓ (Powheg+Pythia8)"),
    "background": Sample("background", 363490, "llll", 0,
                         "non-resonant ZZ*/Zγ* → 4ℓ (Sherpa)"),
}

BRANCHES = ("lep_n", "lep_pt", "lep_eta", "lep_phi", "lep_E", "lep_charge", "lep_type")
"""The only branches read (the files have more than 80)."""

LEPTON_BRANCHES = BRANCHES[1:]
FEATURES = tuple(f"lep{i}_{v}" for i in range(1, 5) for v in ("pt", "eta", "phi")) + ("m4l", "mZ1", "mZ2")
"""Feature columns, in order; momenta and masses in GeV."""

MZ = 91.1876  # GeV, Z-boson mass (PDG)
MEV_PER_GEV = 1000.0
ELECTRON, MUON = 11, 13
_CUTS = ("read", "exactly 4 leptons", "total charge 0", "two SFOS pairs")
_CACHE_VERSION = 1  # bump when the selection or the features change


class SchemaError(ValueError):
    """A file does not have the tree, branches or units this loader expects."""


class NoEventsError(ValueError):
    """No event passed the selection, so there is nothing to learn from."""


# --- Reading and selecting ---------------------------------------------------

def read_events(path, max_events: int | None = None):
    """Read the lepton branches of one file.

    Parameters
    ----------
    path : str or Path
        A ROOT file with the ``mini`` tree of the 2020 13 TeV release.
    max_events : int, optional
        Read at most this many events (from the start).

    Returns
    -------
    awkward.Array
        One record per event with fields ``BRANCHES``.

    Raises
    ------
    SchemaError
        If the file cannot be read as ROOT, lacks the tree or a branch (the
        message names the branch and the file), or its pT does not look like MeV.
    """
    import awkward as ak
    import uproot

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist.")
    try:
        handle = uproot.open(path)
    except Exception as exc:  # not ROOT, truncated, ...
        raise SchemaError(f"{path} could not be opened as a ROOT file ({type(exc).__name__}: {exc}). "
                          "It may be truncated or not a ROOT file at all.") from exc
    with handle:
        if TREE not in handle:
            found = ", ".join(k.split(";")[0] for k in handle.keys()) or "nothing"
            raise SchemaError(f"{path.name} has no tree {TREE!r} (it holds: {found}); "
                              f"expected a file of ATLAS Open Data release {RELEASE}.")
        tree = handle[TREE]
        present = set(tree.keys())
        missing = [b for b in BRANCHES if b not in present]
        if missing:
            raise SchemaError(f"{path.name} (at {path}) is missing branch(es) {', '.join(missing)} "
                              f"in tree {TREE!r}; the loader needs {', '.join(BRANCHES)}.")
        try:
            events = tree.arrays(list(BRANCHES), entry_stop=max_events, library="ak")
        except Exception as exc:
            raise SchemaError(f"{path.name}: reading branches {', '.join(BRANCHES)} failed "
                              f"({type(exc).__name__}: {exc}); the file may be truncated.") from exc
    for name in LEPTON_BRANCHES:
        if events[name].ndim != 2:
            raise SchemaError(f"{path.name}: branch {name} should hold one value per lepton "
                              f"(a jagged array), but it has one value per event.")
    if len(events) and not ak.all(ak.num(events["lep_pt"]) == events["lep_n"]):
        raise SchemaError(f"{path.name}: lep_n does not match the length of lep_pt in some events.")
    if len(events):
        leading = ak.to_numpy(ak.max(events["lep_pt"], axis=1, mask_identity=False))
        if np.median(leading) < 1000.0:
            raise SchemaError(f"{path.name}: the leading lepton pT has median {np.median(leading):.3g}; "
                              "this loader expects MeV (tens of thousands), as in release "
                              f"{RELEASE}. Is this a file in GeV from another release?")
    return events


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


def _mass(p4):
    m2 = p4[..., 0] ** 2 - (p4[..., 1:] ** 2).sum(axis=-1)
    return np.sqrt(np.maximum(m2, 0.0))


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
    m4l = _mass(p4.sum(axis=1))
    best = np.full(len(pt), np.inf)
    mz1 = np.full(len(pt), np.nan)
    mz2 = np.full(len(pt), np.nan)
    for a, b, c, d in _PAIRINGS:
        valid = ((flavour[:, a] == flavour[:, b]) & (charge[:, a] + charge[:, b] == 0)
                 & (flavour[:, c] == flavour[:, d]) & (charge[:, c] + charge[:, d] == 0))
        m_ab = _mass(p4[:, a] + p4[:, b])
        m_cd = _mass(p4[:, c] + p4[:, d])
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


# --- Verified cache files ----------------------------------------------------

def _manifest(path: Path) -> Path:
    return path.with_name(path.name + ".sha256.json")


def _write_manifest(path: Path) -> None:
    record = {"size": path.stat().st_size, "sha256": sha256(path)}
    atomic_write_bytes(_manifest(path), json.dumps(record).encode())


def _cache_problem(path: Path) -> str | None:
    """None if ``path`` matches its manifest (size and SHA-256), else why not."""
    if not path.is_file():
        return "missing"
    try:
        record = json.loads(_manifest(path).read_text())
        size, digest = int(record["size"]), str(record["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return "no valid checksum record"
    actual = path.stat().st_size
    if actual != size:
        return f"{actual} bytes instead of {size} (truncated or corrupt)"
    if sha256(path) != digest:
        return "SHA-256 checksum does not match (corrupt)"
    return None


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)
    _manifest(path).unlink(missing_ok=True)


def _atomic_replace(tmp: Path, dest: Path) -> None:
    os.replace(tmp, dest)
    _write_manifest(dest)


# --- Getting the real files -------------------------------------------------

def _call_with_deadline(fn, timeout: float):
    """Run ``fn()`` in a daemon thread; raise TimeoutError after ``timeout`` s."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # passed to the caller
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TimeoutError(f"no answer within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _https(url: str) -> str:
    """An EOS ``root://`` URL of the portal as the equivalent HTTPS URL."""
    url = url.replace("simplecache::", "")
    for prefix in ("root://eospublic.cern.ch:1094//", "root://eospublic.cern.ch//",
                   "root://eospublic.cern.ch:1094/", "root://eospublic.cern.ch/"):
        if url.startswith(prefix):
            return "https://opendata.cern.ch/" + url[len(prefix):].lstrip("/")
    return url


def lookup_urls(sample: Sample, timeout: float = 20.0) -> list[str] | None:
    """HTTPS URLs of ``sample``'s file as ``atlasopenmagic`` lists them; None if the lookup fails.

    The lookup (one request to the ATLAS Open Data metadata service) is given
    at most ``timeout`` seconds.
    """

    def lookup():
        import atlasopenmagic as atom

        atom.set_verbosity("error")
        if atom.get_current_release() != RELEASE:
            atom.set_release(RELEASE)
        return atom.get_urls(str(sample.dsid), skim=SKIM, protocol="https", cache=False)

    try:
        found = [_https(u) for u in _call_with_deadline(lookup, timeout)]
    except Exception as exc:  # no network, API change, timeout: the pinned URLs still work
        print(f"atlasopenmagic lookup for DSID {sample.dsid} failed ({type(exc).__name__}: {exc}); "
              "using the pinned URLs.")
        return None
    return [u for u in found if u.startswith("https://") and u.endswith("/" + sample.filename)]


def release_urls(sample: Sample, timeout: float = 20.0, lookup: bool = True) -> list[str]:
    """HTTPS URLs to try for ``sample``'s file: ``atlasopenmagic``'s first, then the pinned mirrors."""
    pinned = [m + sample.filename for m in MIRRORS]
    found = (lookup_urls(sample, timeout) or []) if lookup else []
    return list(dict.fromkeys(found + pinned))


def _validate_root(path: Path) -> None:
    """Raise SchemaError unless ``path`` opens and has the branches we need."""
    read_events(path, max_events=10)


def real_files(timeout: float = 30.0, verbose: bool = True) -> dict[str, Path]:
    """Paths of the two real files in the cache, downloading what is missing.

    A cached file is used only if it matches the size and SHA-256 recorded when
    it was downloaded; otherwise it is fetched again. Downloads go through
    ``gpucourse.data.download.fetch`` (HTTPS, temporary file, atomic rename):
    a download that stalls for ``timeout`` seconds fails, and no partial file is
    left in the cache.

    Raises
    ------
    DownloadError
        If a file cannot be fetched from any URL (``OfflineError`` when
        ``GPUCOURSE_OFFLINE`` is set).
    """
    from .download import OfflineError

    folder = settings.data_dir() / "atlas-4lep" / RELEASE
    paths = {}
    lookup_works = True
    for key, sample in SAMPLES.items():
        dest = folder / sample.filename
        problem = _cache_problem(dest)
        if problem is None:
            paths[key] = dest
            continue
        if dest.exists():
            print(f"Cached {dest.name} is not usable ({problem}); downloading it again.")
            _remove(dest)
        if settings.offline():
            raise OfflineError(f"Offline mode (GPUCOURSE_OFFLINE=1): {sample.filename} is not in the cache.")
        errors = []
        found = lookup_urls(sample, timeout) if lookup_works else None
        lookup_works = found is not None
        urls = list(dict.fromkeys((found or []) + [m + sample.filename for m in MIRRORS]))
        for url in urls:
            try:
                if verbose:
                    print(f"Downloading {url}")
                fetch(url, dest, timeout=timeout, progress=verbose)
                _validate_root(dest)
                _write_manifest(dest)
                paths[key] = dest
                break
            except Exception as exc:
                errors.append(f"{url}: {exc}")
                _remove(dest)
        else:
            raise DownloadError(f"Could not get {sample.filename}:\n  " + "\n  ".join(errors))
    return paths


# --- The offline stand-in ----------------------------------------------------

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
    p = _two_body(_mass(mother_p4), m1, m2)
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
    fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".part", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with uproot.recreate(tmp) as out:
            types = {k: v.dtype for k, v in scalars.items()}
            types["lep"] = lep.type.content
            out.mktree(TREE, types, title="ATLAS Open Data 4lep stand-in (generated, not real data)",
                       counter_name=lambda counted: "lep_n", field_name=lambda outer, inner: f"{outer}_{inner}")
            out[TREE].extend({**scalars, "lep": lep})
        _atomic_replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def standin_files(n_events: int, seed: int = 0, directory=None) -> dict[str, Path]:
    """The two stand-in files (generated once, then reused from the cache)."""
    folder = Path(directory) if directory else settings.data_dir() / "atlas-4lep" / "standin"
    paths = {}
    for key, sample in SAMPLES.items():
        path = folder / f"n{n_events}-seed{seed}" / sample.filename
        problem = _cache_problem(path)
        if problem is not None:
            if path.exists():
                print(f"Cached stand-in {path.name} is not usable ({problem}); writing it again.")
            _remove(path)
            write_standin_file(path, key, n_events, seed)
        paths[key] = path
    return paths


# --- The feature table, cached -------------------------------------------------

def cached_features(path, verbose: bool = True):
    """``features_from_file(path)``, cached in ``data_dir()`` under a key of the file's SHA-256.

    A cached table that does not match its checksum record (truncated,
    corrupt) is detected, reported and rebuilt.
    """
    path = Path(path)
    try:
        digest = str(json.loads(_manifest(path).read_text())["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        digest = sha256(path)
    cache = (settings.data_dir() / "atlas-4lep" / "features"
             / f"{path.stem}.{digest[:16]}.v{_CACHE_VERSION}.npz")
    problem = _cache_problem(cache)
    if problem is None:
        try:
            with np.load(cache) as table:
                return table["X"], json.loads(str(table["cutflow"]))
        except Exception as exc:
            problem = f"unreadable ({type(exc).__name__})"
    if cache.exists():
        print(f"Cached feature table {cache.name} is not usable ({problem}); rebuilding it.")
    _remove(cache)
    X, cutflow = features_from_file(path)
    buffer = io.BytesIO()
    np.savez(buffer, X=X, cutflow=np.array(json.dumps(cutflow)))
    atomic_write_bytes(cache, buffer.getvalue())
    _write_manifest(cache)
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
        return f"ATLAS Open Data, release {RELEASE}, {SKIM} skim ({RECORD_URL})"

    def summary(self) -> str:
        lines = [f"Source: {self.source}"]
        if not self.standin:
            lines.append(f"Licence: {LICENCE}. Cite: {CITATION}.")
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
            print("Offline mode (GPUCOURSE_OFFLINE=1): using the generated stand-in, not real ATLAS data.")
            standin = True
        else:
            try:
                files = real_files(timeout=timeout, verbose=verbose)
            except DownloadError as exc:
                if source == "atlas":
                    raise
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

