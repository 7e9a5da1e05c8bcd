"""Where the real ATLAS four-lepton files come from, and what they must be.

The files belong to CERN Open Data record 15005, "ATLAS 13 TeV samples
collection at least four leptons (electron or muon), for 2020 Open Data
release" (DOI 10.7483/OPENDATA.ATLAS.2Y1T.TLGL). Each file is pinned with the
size and Adler-32 checksum the record lists, and fetched from, in order:

1. the record's own file address, ``https://opendata.cern.ch/record/15005/files/<file>``;
2. the EOS folder the record lists, ``.../OutreachDatasets/2020-08-19/4lep/MC/``;
3. the superseded ``2020-01-22`` folder, last (it is no longer listed by the
   record; a file there is accepted only if it has the pinned size and checksum).

The host ``atlas-opendata.web.cern.ch`` of earlier versions no longer resolves
and is not used. Nothing is looked up at run time: the addresses, sizes and
checksums are fixed here (and a test compares them with the record).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import settings
from . import cache
from .atlas_schema import RELEASE, SAMPLES, SchemaError, read_events
from .download import DownloadError, NetworkError, NotFoundError, OfflineError, fetch

RECORD = 15005
RECORD_URL = f"https://opendata.cern.ch/record/{RECORD}"
DOI = "10.7483/OPENDATA.ATLAS.2Y1T.TLGL"
TITLE = ("ATLAS 13 TeV samples collection at least four leptons (electron or muon), "
         "for 2020 Open Data release")
LICENCE = "CC0 1.0 (Creative Commons public-domain waiver), as stated on the CERN Open Data portal"
USAGE = ("The ATLAS Open Data are released for educational purposes only and are not suited "
         "for scientific publications.")
CITATION = f"ATLAS Collaboration (2020). {TITLE}. CERN Open Data Portal. DOI:{DOI}"

_EOS = "https://opendata.cern.ch/eos/opendata/atlas/OutreachDatasets/{folder}/4lep/MC/"
LOCATIONS = (
    f"https://opendata.cern.ch/record/{RECORD}/files/",
    _EOS.format(folder="2020-08-19"),
    _EOS.format(folder="2020-01-22"),  # superseded: last, and only with the pinned checksum
)
"""Base addresses tried in order; the file name is appended."""


@dataclass(frozen=True)
class PinnedFile:
    """A file of the record with the size and checksum the record lists."""

    filename: str
    size: int
    adler32: str

    @property
    def urls(self) -> list[str]:
        return [base + self.filename for base in LOCATIONS]


FILES = {
    345060: PinnedFile("mc_345060.ggH125_ZZ4lep.4lep.root", 50_518_236, "1ea0e560"),
    363490: PinnedFile("mc_363490.llll.4lep.root", 179_082_866, "6298e6cb"),
}
"""Pinned files by DSID (sizes and Adler-32 from the record's file list)."""


def real_files(timeout: float = 300.0, verbose: bool = True) -> dict[str, Path]:
    """Paths of the two real files in the cache, downloading what is missing.

    A cached file is used only if it matches its checksum record and the
    record's size and Adler-32; otherwise it is fetched again. Each download
    has ``timeout`` seconds in all, and nothing partial is ever kept.

    Raises
    ------
    OfflineError
        ``GPUCOURSE_OFFLINE`` is set and a file is not cached.
    DownloadError
        A file could not be fetched from any address; the message lists each
        address with its reason.
    """
    folder = cache.folder("atlas-4lep", RELEASE)
    paths = {}
    for key, sample in SAMPLES.items():
        pinned = FILES[sample.dsid]
        dest = folder / pinned.filename
        errors = []
        for url in pinned.urls:
            try:
                if verbose and cache.problem(dest) is not None and not settings.offline():
                    print(f"Downloading {url} ({pinned.size / 1e6:.0f} MB)")
                fetch(url, dest, size=pinned.size, adler32=pinned.adler32, timeout=timeout, progress=verbose)
                read_events(dest, max_events=10)  # opens as ROOT with the branches we need
                paths[key] = dest
                break
            except OfflineError:
                raise
            except NetworkError as exc:  # the other addresses are on the same host
                raise DownloadError(f"could not get {pinned.filename}: {exc}") from exc
            except (NotFoundError, DownloadError, SchemaError) as exc:
                errors.append(f"{url}: {exc}")
        else:
            raise DownloadError(f"could not get {pinned.filename}:\n  " + "\n  ".join(errors))
    return paths
