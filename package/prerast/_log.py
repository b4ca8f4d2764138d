"""Log level in nvdiffrast's numbering: 0 info, 1 warning (default), 2 error, 3 fatal."""
import logging

_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.CRITICAL}
logger = logging.getLogger("prerast")
logger.setLevel(logging.WARNING)


def get_log_level():
    return {v: k for k, v in _LEVELS.items()}.get(logger.level, 1)


def set_log_level(level):
    if level not in _LEVELS:
        raise ValueError(f"set_log_level: level must be 0 (info), 1 (warning), 2 (error) or 3 (fatal), got {level!r}")
    logger.setLevel(_LEVELS[level])
