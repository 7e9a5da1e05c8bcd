import json

import pytest

from gpucourse import settings


@pytest.mark.parametrize("value, expected", [("1", True), ("true", True), ("0", False), ("", False)])
def test_quick_flag(monkeypatch, value, expected):
    monkeypatch.setenv("GPUCOURSE_QUICK", value)
    assert settings.quick() is expected


def test_bad_flag_names_variable_and_fix(monkeypatch):
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "maybe")
    with pytest.raises(ValueError, match=r"GPUCOURSE_OFFLINE='maybe'.*use 1"):
        settings.offline()


@pytest.mark.parametrize("quick, gpu, mode", [
    ("1", True, "quick"), ("1", False, "quick"), ("0", True, "full"), ("0", False, "reduced"),
])
def test_run_mode(monkeypatch, quick, gpu, mode):
    monkeypatch.setenv("GPUCOURSE_QUICK", quick)
    assert settings.run_mode(gpu_available=gpu) == mode


def test_describe_mode_rejects_unknown():
    assert "no GPU" in settings.describe_mode("reduced")
    with pytest.raises(ValueError, match="expected one of"):
        settings.describe_mode("huge")


def test_data_dir_env_and_default(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUCOURSE_DATA", str(tmp_path / "cache"))
    assert settings.data_dir() == tmp_path / "cache"
    monkeypatch.delenv("GPUCOURSE_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert settings.data_dir() == tmp_path / "xdg" / "gpucourse"


def test_data_dir_expands_home_and_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("COURSE_DISK", str(tmp_path / "disk"))
    monkeypatch.setenv("GPUCOURSE_DATA", "~/data")
    assert settings.data_dir() == tmp_path / "data"
    monkeypatch.setenv("GPUCOURSE_DATA", "$HOME/x")
    assert settings.data_dir() == tmp_path / "x"
    monkeypatch.setenv("GPUCOURSE_DATA", "${COURSE_DISK}/cache")
    assert settings.data_dir() == tmp_path / "disk" / "cache"


@pytest.mark.parametrize("value, words", [("data", "relative path"), ("./data", "relative path"),
                                          ("$NO_SUCH_VARIABLE_X/data", "not set")])
def test_data_dir_refuses_what_would_differ_per_notebook(monkeypatch, value, words):
    monkeypatch.delenv("NO_SUCH_VARIABLE_X", raising=False)
    monkeypatch.setenv("GPUCOURSE_DATA", value)
    with pytest.raises(ValueError, match=words):
        settings.data_dir()


def test_real_data_required_refuses_every_stand_in(monkeypatch, tmp_path):
    from gpucourse.data import atlas, cifar

    monkeypatch.setenv("GPUCOURSE_DATA", str(tmp_path))
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "1")
    monkeypatch.setenv("GPUCOURSE_REQUIRE_REAL_DATA", "1")
    with pytest.raises(settings.StandInRefused, match="ATLAS Open Data could not be used .*offline"):
        atlas.load_4lep(100)
    with pytest.raises(settings.StandInRefused, match="CIFAR-10 could not be used"):
        cifar.load_cifar10()
    assert not list(tmp_path.rglob("*.root")), "a stand-in was written although it was refused"
    monkeypatch.setenv("GPUCOURSE_REQUIRE_REAL_DATA", "0")
    assert cifar.load_cifar10(stand_in_sizes=(20, 10)).is_stand_in


def test_real_data_required_refuses_the_fallback_after_a_failed_download(monkeypatch, tmp_path):
    from gpucourse.data import atlas
    from gpucourse.data.download import DownloadError

    def no_network(**kwargs):
        raise DownloadError("no network: could not resolve the host")

    monkeypatch.setenv("GPUCOURSE_DATA", str(tmp_path))
    monkeypatch.setenv("GPUCOURSE_OFFLINE", "0")
    monkeypatch.setenv("GPUCOURSE_REQUIRE_REAL_DATA", "1")
    monkeypatch.setattr(atlas.sources, "real_files", no_network)
    with pytest.raises(settings.StandInRefused, match="no network"):
        atlas.load_4lep(100)


# --- sizes: each episode's three rows in gpucourse/sizes/<episode>.json ---------------------

def test_sizes_take_the_row_of_the_run_mode(tmp_path, monkeypatch):
    (tmp_path / "ep99.json").write_text(json.dumps(
        {"full": {"n": 4096}, "reduced": {"n": 512}, "quick": {"n": 16}}))
    monkeypatch.setattr(settings, "SIZES_DIR", tmp_path)
    monkeypatch.setenv("GPUCOURSE_QUICK", "0")
    assert settings.sizes("ep99", gpu_available=True) == {"n": 4096}
    reduced = settings.sizes("ep99", gpu_available=False)
    assert reduced == {"n": 512} and reduced.mode == "reduced"
    assert reduced.describe() == "reduced mode (no CUDA GPU: laptop sizes) · n=512"
    monkeypatch.setenv("GPUCOURSE_QUICK", "1")
    assert settings.sizes("ep99", gpu_available=True).mode == "quick"


def test_sizes_say_which_file_or_row_is_missing(tmp_path, monkeypatch):
    (tmp_path / "ep98.json").write_text(json.dumps({"full": {}, "quick": {}}))
    monkeypatch.setattr(settings, "SIZES_DIR", tmp_path)
    with pytest.raises(ValueError, match="no row for reduced"):
        settings.sizes("ep98", gpu_available=False)
    with pytest.raises(ValueError, match="no sizes for 'ep97'.*known: ep98"):
        settings.sizes("ep97", gpu_available=False)


def test_a_long_description_stays_on_one_line():
    line = settings.Sizes("ep99", "full", {f"size_{i}": 10**i for i in range(12)}).describe()
    assert len(line) <= 88 and line.endswith("…") and "\n" not in line


@pytest.mark.parametrize("path", sorted(settings.SIZES_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_every_sizes_file_has_the_three_rows_with_the_same_names(path):
    table = json.loads(path.read_text())
    assert set(table) == set(settings.MODES), path
    assert table["quick"].keys() == table["reduced"].keys() == table["full"].keys(), path
