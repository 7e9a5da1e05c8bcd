"""The ATLAS four-lepton loader, on generated files: schema, selection, features, caching, faults."""

from __future__ import annotations

import sys
import threading
import zlib
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot

from gpucourse.data import atlas, atlas_sources, atlas_standin, cache, download


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test gets its own empty cache, offline unless it says otherwise."""
    monkeypatch.setenv("GPUCOURSE_DATA", str(tmp_path / "cache"))
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")
    return tmp_path / "cache"


def lepton(pt_gev, eta, phi, mass_gev=0.0):
    """(pt, eta, phi, E) in MeV for a lepton."""
    p = pt_gev * np.cosh(eta)
    return pt_gev * 1e3, eta, phi, np.sqrt(p**2 + mass_gev**2) * 1e3


def make_events(rows):
    """awkward events from rows of [(pt, eta, phi, E, charge, type), ...] per event (MeV)."""
    records = []
    for leptons in rows:
        cols = list(zip(*leptons)) if leptons else [[]] * 6
        records.append({
            "lep_n": len(leptons),
            "lep_pt": [float(v) for v in cols[0]], "lep_eta": [float(v) for v in cols[1]],
            "lep_phi": [float(v) for v in cols[2]], "lep_E": [float(v) for v in cols[3]],
            "lep_charge": [int(v) for v in cols[4]], "lep_type": [int(v) for v in cols[5]],
        })
    return ak.Array(records)


def write_tree(path, branches):
    """Write ``branches`` (name -> array) as tree ``mini``."""
    with uproot.recreate(path) as f:
        f["mini"] = branches
    return path


# A 2e2μ event: an e⁺e⁻ pair back to back along x (m = 91.2 GeV) and a μ⁺μ⁻ pair along y (m = 30 GeV).
E1, E2 = 45.6, 15.0
GOOD = [(*lepton(E1, 0.0, 0.0), +1, 11), (*lepton(E1, 0.0, np.pi), -1, 11),
        (*lepton(E2, 0.0, np.pi / 2), +1, 13), (*lepton(E2, 0.0, -np.pi / 2), -1, 13)]


# --- schema of the stand-in ---------------------------------------------------------

def test_standin_file_has_the_release_schema(tmp_path):
    path = atlas_standin.write_standin_file(tmp_path / "s.root", "signal", 500, seed=1)
    with uproot.open(path) as f:
        assert atlas.TREE in f
        tree = f[atlas.TREE]
        for name in atlas.BRANCHES:
            assert name in tree.keys()
        events = tree.arrays(list(atlas.BRANCHES))
    assert str(ak.type(events["lep_pt"])).endswith("var * float32")
    assert str(ak.type(events["lep_type"])).endswith("var * uint32")
    assert ak.all(ak.num(events["lep_pt"]) == events["lep_n"])
    assert set(np.unique(ak.to_numpy(ak.flatten(events["lep_type"])))) <= {11, 13}
    leading = ak.to_numpy(ak.max(events["lep_pt"], axis=1))
    assert leading.min() > 25_000  # MeV, like the release's 4lep skim
    assert ak.all(events["lep_n"] >= 4)
    assert cache.problem(path) is None  # written with a checksum record


def test_standin_physics():
    sig = atlas_standin.generate_standin_events("signal", 4000, seed=3)
    bkg = atlas_standin.generate_standin_events("background", 4000, seed=3)
    assert len(sig["counts"]) == 4000 and sig["lep_pt"].size == sig["counts"].sum()
    feats = {}
    for name, data in (("signal", sig), ("background", bkg)):
        events = make_events([
            list(zip(*(data[f"lep_{k}"][start:start + n] for k in ("pt", "eta", "phi", "E", "charge", "type"))))
            for start, n in zip(np.concatenate([[0], np.cumsum(data["counts"])[:-1]]), data["counts"])])
        mask, _ = atlas.select_four_leptons(events)
        feats[name] = atlas.compute_features(events[mask])
    m4l = atlas.FEATURES.index("m4l")
    mz1, mz2 = atlas.FEATURES.index("mZ1"), atlas.FEATURES.index("mZ2")
    assert abs(np.median(feats["signal"][:, m4l]) - 125.0) < 1.0
    assert abs(np.median(feats["signal"][:, mz1]) - atlas.MZ) < 3.0
    assert np.median(feats["signal"][:, mz2]) < 40.0
    b = feats["background"][:, m4l]
    assert np.mean(b > 180.0) > 0.5                         # the ZZ continuum
    peak, side = np.mean((b > 85.0) & (b < 97.0)), np.mean((b > 100.0) & (b < 112.0))
    assert peak > 0.02 and peak > 1.5 * side                 # the single-Z → 4ℓ peak


def test_standin_is_reproducible():
    a = atlas_standin.generate_standin_events("background", 300, seed=7)
    b = atlas_standin.generate_standin_events("background", 300, seed=7)
    assert all(np.array_equal(a[k], b[k]) for k in a)


# --- selection ---------------------------------------------------------------------

def test_selection_and_cutflow():
    five = GOOD + [(*lepton(9.0, 1.0, 0.3), -1, 13)]
    charged = [GOOD[0], GOOD[1], GOOD[2], (*GOOD[3][:4], +1, 13)]            # total charge +2
    same_sign = [(*GOOD[0][:4], +1, 11), (*GOOD[1][:4], +1, 11),
                 (*GOOD[2][:4], -1, 13), (*GOOD[3][:4], -1, 13)]             # charge 0, no SFOS pair
    three_e = [GOOD[0], GOOD[1], (*GOOD[2][:4], +1, 11), GOOD[3]]            # e⁺e⁻e⁺μ⁻
    four_mu = [(*lep[:4], lep[4], 13) for lep in GOOD]
    events = make_events([GOOD, five, charged, same_sign, three_e, four_mu, GOOD[:3]])
    mask, cutflow = atlas.select_four_leptons(events)
    assert mask.tolist() == [True, False, False, False, False, True, False]
    assert cutflow == {"read": 7, "exactly 4 leptons": 5, "total charge 0": 4, "two SFOS pairs": 2}


# --- features ----------------------------------------------------------------------

def test_features_of_a_known_event_in_gev():
    X = atlas.compute_features(make_events([GOOD]))
    assert X.shape == (1, len(atlas.FEATURES)) and X.dtype == np.float32
    row = dict(zip(atlas.FEATURES, X[0]))
    assert row["m4l"] == pytest.approx(2 * E1 + 2 * E2, rel=1e-5)   # at rest: m4ℓ is the total energy
    assert row["mZ1"] == pytest.approx(2 * E1, rel=1e-5)
    assert row["mZ2"] == pytest.approx(2 * E2, rel=1e-5)
    assert [row[f"lep{i}_pt"] for i in range(1, 5)] == pytest.approx([E1, E1, E2, E2], rel=1e-6)


def test_features_order_leptons_by_pt_and_pick_pair_nearest_z():
    # Four muons in shuffled order; pairing (0,1)(2,3) gives 91.2 and 30 GeV.
    shuffled = [(*GOOD[i][:4], GOOD[i][4], 13) for i in (2, 0, 3, 1)]
    row = dict(zip(atlas.FEATURES, atlas.compute_features(make_events([shuffled]))[0]))
    assert row["lep1_pt"] >= row["lep2_pt"] >= row["lep3_pt"] >= row["lep4_pt"]
    assert row["mZ1"] == pytest.approx(2 * E1, rel=1e-5)


def test_features_refuse_unselected_events():
    same_sign = [(*GOOD[0][:4], +1, 11), (*GOOD[1][:4], +1, 11),
                 (*GOOD[2][:4], -1, 13), (*GOOD[3][:4], -1, 13)]
    with pytest.raises(ValueError, match="select_four_leptons"):
        atlas.compute_features(make_events([same_sign]))


# --- schema errors -----------------------------------------------------------------------

def _branches(events, drop=()):
    out = {name: events[name] for name in atlas.BRANCHES if name not in drop and name != "lep_n"}
    return out


def test_missing_branch_is_named_with_the_file(tmp_path):
    events = make_events([GOOD] * 3)
    path = write_tree(tmp_path / "nocharge.root", {**_branches(events, drop=("lep_charge",)),
                                                   "lep_n": ak.to_numpy(events["lep_n"]).astype(np.int32)})
    with pytest.raises(atlas.SchemaError) as err:
        atlas.read_events(path)
    assert "lep_charge" in str(err.value) and "nocharge.root" in str(err.value)


def test_missing_tree_and_not_root(tmp_path):
    path = tmp_path / "other.root"
    with uproot.recreate(path) as f:
        f["events"] = {"x": np.arange(3)}
    with pytest.raises(atlas.SchemaError, match="no tree 'mini'"):
        atlas.read_events(path)
    junk = tmp_path / "junk.root"
    junk.write_bytes(b"<html>not found</html>")
    with pytest.raises(atlas.SchemaError, match="could not be opened as a ROOT file"):
        atlas.read_events(junk)


def test_gev_file_is_rejected_with_units_in_the_message(tmp_path):
    path = atlas_standin.write_standin_file(tmp_path / "s.root", "signal", 200)
    events = atlas.read_events(path)
    gev = {name: events[name] for name in atlas.BRANCHES if name != "lep_n"}
    gev["lep_pt"] = events["lep_pt"] / 1000.0
    gev["lep_n"] = ak.to_numpy(events["lep_n"])
    out = write_tree(tmp_path / "gev.root", gev)
    with pytest.raises(atlas.SchemaError, match="MeV"):
        atlas.read_events(out)


def test_no_events_passing_is_a_clear_error(tmp_path):
    three = make_events([GOOD[:3]] * 5)
    branches = {**_branches(three), "lep_n": ak.to_numpy(three["lep_n"]).astype(np.int32)}
    path = write_tree(tmp_path / "three.root", branches)
    with pytest.raises(atlas.NoEventsError, match="No event in three.root passed"):
        atlas.features_from_file(path)


def test_truncated_root_file_is_a_schema_error(tmp_path):
    path = atlas_standin.write_standin_file(tmp_path / "s.root", "signal", 2000)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(atlas.SchemaError):
        atlas.read_events(path)


# --- caching -------------------------------------------------------------------------------

def test_feature_table_is_cached(tmp_path, monkeypatch, private_cache):
    path = atlas_standin.write_standin_file(tmp_path / "s.root", "signal", 800)
    X1, cut1 = atlas.cached_features(path)
    cached = list((private_cache / "atlas-4lep" / "features").glob("*.npz"))
    assert len(cached) == 1

    def no_reading(*args, **kwargs):
        raise AssertionError("the cached table should have been used")

    monkeypatch.setattr(atlas, "features_from_file", no_reading)
    X2, cut2 = atlas.cached_features(path)
    assert np.array_equal(X1, X2) and cut1 == cut2


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupt_feature_cache_is_detected_and_rebuilt(tmp_path, capsys, private_cache, damage):
    path = atlas_standin.write_standin_file(tmp_path / "s.root", "signal", 800)
    X1, _ = atlas.cached_features(path)
    (table,) = (private_cache / "atlas-4lep" / "features").glob("*.npz")
    data = bytearray(table.read_bytes())
    if damage == "truncate":
        table.write_bytes(bytes(data[: len(data) // 3]))
    else:
        data[len(data) // 2] ^= 0xFF
        table.write_bytes(bytes(data))
    X2, _ = atlas.cached_features(path)
    assert "not usable" in capsys.readouterr().out
    assert np.array_equal(X1, X2)
    assert cache.problem(table) is None


def test_corrupt_standin_is_rewritten(capsys):
    paths = atlas_standin.standin_files(1000, seed=0)
    signal = paths["signal"]
    good = atlas.read_events(signal)
    signal.write_bytes(signal.read_bytes()[:1000])
    again = atlas_standin.standin_files(1000, seed=0)
    assert "not usable" in capsys.readouterr().out
    assert ak.array_equal(atlas.read_events(again["signal"]), good)


# --- load_4lep, offline and online faults -----------------------------------------------------

def test_load_offline_uses_the_standin_and_says_so(capsys):
    data = atlas.load_4lep(600)
    out = capsys.readouterr().out
    assert "stand-in" in out and "GPUCOURSE_OFFLINE" in out
    assert data.standin and "NOT real" in data.summary()
    assert data.X.shape == (1200, len(atlas.FEATURES)) and data.X.dtype == np.float32
    assert data.y.sum() == 600
    assert set(data.cutflow) == {"signal", "background"}


def test_second_load_reads_only_the_cache(monkeypatch):
    first = atlas.load_4lep(300)
    monkeypatch.setattr(atlas, "read_events", lambda *a, **k: pytest.fail("read the ROOT file again"))
    second = atlas.load_4lep(300)
    assert np.array_equal(first.X, second.X)


def test_bad_arguments():
    with pytest.raises(ValueError, match="source"):
        atlas.load_4lep(10, source="cern")
    with pytest.raises(ValueError, match="positive"):
        atlas.load_4lep(0)


def test_offline_and_atlas_only_raises():
    with pytest.raises(download.OfflineError, match="GPUCOURSE_OFFLINE"):
        atlas.load_4lep(10, source="atlas")


@pytest.fixture
def fake_record(tmp_path, monkeypatch):
    """Stand-in files posing as the record's files: pinned sizes and Adler-32 of these bytes."""
    bodies, pins = {}, {}
    for key, sample in atlas.SAMPLES.items():
        path = atlas_standin.write_standin_file(tmp_path / "record" / sample.filename, key, 700)
        body = path.read_bytes()
        bodies[sample.filename] = body
        pins[sample.dsid] = atlas_sources.PinnedFile(sample.filename, len(body),
                                                     f"{zlib.adler32(body) & 0xFFFFFFFF:08x}")
    monkeypatch.setattr(atlas_sources, "FILES", pins)
    return bodies


def test_cached_real_files_need_no_network(private_cache, fake_record):
    folder = private_cache / "atlas-4lep" / atlas.RELEASE
    for name, body in fake_record.items():  # as a previous run left them
        with cache.lock(folder / name):
            cache.write_bytes(folder / name, body)
    data = atlas.load_4lep(200, source="atlas")  # offline, yet it works
    summary = data.summary()
    assert not data.standin and "ATLAS Open Data" in summary and "CC0" in summary
    assert atlas_sources.DOI in summary and "educational purposes" in summary


def test_truncated_download_in_cache_is_detected(private_cache, fake_record, capsys):
    folder = private_cache / "atlas-4lep" / atlas.RELEASE
    for name, body in fake_record.items():
        with cache.lock(folder / name):
            cache.write_bytes(folder / name, body)
    victim = folder / atlas.SAMPLES["signal"].filename
    victim.write_bytes(victim.read_bytes()[:5000])
    with pytest.raises(download.OfflineError):
        atlas_sources.real_files()
    assert "not usable" in capsys.readouterr().out
    assert not victim.exists()  # the damaged copy is gone, not used


def test_a_file_that_differs_from_the_record_is_refused(private_cache, fake_record, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "0")
    served = []

    def fake_fetch(url, dest, **expected):  # every address serves an older version of the file
        served.append(url)
        raise download.DownloadError(f"downloaded {url}, but 1,000 bytes instead of {expected['size']:,}")

    monkeypatch.setattr(atlas_sources, "fetch", fake_fetch)
    with pytest.raises(download.DownloadError, match=r"(?s)could not get .*instead of"):
        atlas_sources.real_files(verbose=False)
    assert len(served) == len(atlas_sources.LOCATIONS)  # each address was tried, in order
    assert served[0].startswith("https://opendata.cern.ch/record/15005/files/")


def test_no_network_stops_at_the_first_address(private_cache, monkeypatch):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "0")
    served = []

    def offline_host(url, dest, **expected):
        served.append(url)
        raise download.NetworkError("no network: the name opendata.cern.ch could not be looked up.")

    monkeypatch.setattr(atlas_sources, "fetch", offline_host)
    with pytest.raises(download.DownloadError, match="no network"):
        atlas_sources.real_files(verbose=False)
    assert len(served) == 1, "the other addresses are on the same host: trying them only costs time"


def test_download_failure_falls_back_to_standin(monkeypatch, capsys, private_cache):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "0")

    def offline_host(url, dest, **expected):
        raise download.NetworkError("no network: the name opendata.cern.ch could not be looked up.")

    monkeypatch.setattr(atlas_sources, "fetch", offline_host)
    data = atlas.load_4lep(200)
    out = capsys.readouterr().out
    assert "Could not get the ATLAS Open Data files" in out and "stand-in" in out and "no network" in out
    assert data.standin
    real = private_cache / "atlas-4lep" / atlas.RELEASE
    assert not real.exists() or not [p for p in real.iterdir() if not p.name.endswith(".lock")]


def test_real_files_download_verify_and_cache(private_cache, fake_record, monkeypatch, tmp_path):
    """Through the real fetch, from a local HTTPS server standing in for the portal."""
    from faultserver import FaultServer

    monkeypatch.setenv("GPUCOURSE_OFFLINE", "0")
    with FaultServer(tmp_path) as server:
        server.files.update(fake_record)
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(server.ca_file))
        base = server.url("ok", "")
        monkeypatch.setattr(atlas_sources, "LOCATIONS", (server.url("missing", ""), base))
        paths = atlas_sources.real_files(timeout=30, verbose=False)
        assert all(cache.problem(p) is None for p in paths.values())
        assert [r.split("/")[1] for r in server.requests] == ["missing", "ok", "missing", "ok"]
        again = atlas_sources.real_files(timeout=30, verbose=False)
        assert again == paths and len(server.requests) == 4  # the cache was used


def test_pinned_files_match_record_15005():
    """The addresses, sizes and Adler-32 checksums the record lists (CERN Open Data, record 15005)."""
    sig, bkg = atlas.SAMPLES["signal"], atlas.SAMPLES["background"]
    assert (sig.dsid, sig.name, sig.label) == (345060, "ggH125_ZZ4lep", 1)
    assert (bkg.dsid, bkg.name, bkg.label) == (363490, "llll", 0)
    assert atlas_sources.FILES[345060] == atlas_sources.PinnedFile(
        "mc_345060.ggH125_ZZ4lep.4lep.root", 50_518_236, "1ea0e560")
    assert atlas_sources.FILES[363490] == atlas_sources.PinnedFile(
        "mc_363490.llll.4lep.root", 179_082_866, "6298e6cb")
    assert atlas_sources.FILES[345060].urls == [
        "https://opendata.cern.ch/record/15005/files/mc_345060.ggH125_ZZ4lep.4lep.root",
        "https://opendata.cern.ch/eos/opendata/atlas/OutreachDatasets/2020-08-19/4lep/MC/mc_345060.ggH125_ZZ4lep.4lep.root",
        "https://opendata.cern.ch/eos/opendata/atlas/OutreachDatasets/2020-01-22/4lep/MC/mc_345060.ggH125_ZZ4lep.4lep.root",
    ]
    assert atlas_sources.DOI == "10.7483/OPENDATA.ATLAS.2Y1T.TLGL"
    assert not any("atlas-opendata.web.cern.ch" in u for f in atlas_sources.FILES.values() for u in f.urls)


def _python_steps(fn, *args) -> int:
    """How many Python lines and calls run inside ``fn(*args)``, in every thread it starts."""
    count = [0]

    def trace(frame, event, arg):
        count[0] += 1
        return trace
    sys.settrace(trace)
    threading.settrace(trace)
    try:
        fn(*args)
    finally:
        sys.settrace(None)
        threading.settrace(None)
    return count[0]


def test_reader_is_vectorised_on_standin(tmp_path):
    """Reading and selecting are vectorised: ten times the events cost no more Python steps (a loop over
    events would add at least one per event). Counted, not timed, so that no load can change the verdict."""
    small = atlas_standin.write_standin_file(tmp_path / "small.root", "background", 2_000)
    large = atlas_standin.write_standin_file(tmp_path / "large.root", "background", 20_000)
    atlas.features_from_file(small)                 # imports and first-call set-up, not counted
    steps_small = _python_steps(atlas.features_from_file, small)
    steps_large = _python_steps(atlas.features_from_file, large)
    assert steps_large - steps_small < 2_000, (steps_small, steps_large)
    assert atlas.features_from_file(large)[1]["read"] == 20_000
    assert Path(large).stat().st_size < 3e6
