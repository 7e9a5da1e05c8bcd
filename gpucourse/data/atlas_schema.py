"""What an ATLAS four-lepton file is, and the reader that checks a file against it.

The names here are shared by the three modules of the ATLAS data: ``atlas``
(selection, features, the loader), ``atlas_sources`` (the pinned real files,
each opened with ``read_events`` after download) and ``atlas_standin`` (the
generated files, written in this schema). They import this module and not each
other, so no import circle can form; ``atlas`` re-exports every public name,
so ``atlas.TREE`` and ``atlas.read_events`` keep working.

The events come from the ATLAS Open Data for education, 13 TeV release of
2020 (``2020e-13tev`` in ``atlasopenmagic``), "4lep" skim: ROOT files with a
tree ``mini`` whose lepton branches are per-event (jagged) arrays in MeV.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

RELEASE = "2020e-13tev"
"""The pinned ATLAS Open Data release (name used by ``atlasopenmagic``)."""

SKIM = "4lep"
TREE = "mini"


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

MZ = 91.1876  # GeV, Z-boson mass (PDG)
MEV_PER_GEV = 1000.0
ELECTRON, MUON = 11, 13


class SchemaError(ValueError):
    """A file does not have the tree, branches or units this loader expects."""


def invariant_mass(p4):
    """Invariant mass of four-vectors ``p4`` (..., 4) ordered (E, px, py, pz).

    A slightly negative m² from rounding gives 0, not NaN.
    """
    m2 = p4[..., 0] ** 2 - (p4[..., 1:] ** 2).sum(axis=-1)
    return np.sqrt(np.maximum(m2, 0.0))


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
