"""Exercise checks, one module per episode: ``from gpucourse.checks import ep01``."""
