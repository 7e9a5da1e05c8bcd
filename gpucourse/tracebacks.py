"""Reading the error of a child process from its stderr: one line a learner can act on."""

import re


def last_exception(stderr: str, limit: int = 240) -> str:
    """The last exception of a traceback, its class without the module path, on one line."""
    lines = stderr.strip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        match = re.match(r"([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(:.*)?$", lines[i])
        if match:
            text = " ".join([match.group(1).rsplit(".", 1)[-1] + (match.group(2) or "")]
                            + [line.strip() for line in lines[i + 1:]])
            text = re.sub(r"\s+", " ", text).rstrip(" :")
            return text if len(text) <= limit else text[:limit - 1] + "…"
    return ""
