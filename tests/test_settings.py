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
    assert settings.data_dir() == tmp_path / "cache" and (tmp_path / "cache").is_dir()
    monkeypatch.delenv("GPUCOURSE_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert settings.data_dir() == tmp_path / "xdg" / "gpucourse"
