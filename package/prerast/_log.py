"""Log level in nvdiffrast's numbering: 0 info, 1 warning (default), 2 error, 3 fatal."""

import logging

_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.CRITICAL}
logger = logging.getLogger("prerast")
logger.setLevel(logging.WARNING)


def get_log_level():
    """The level of prerast's log messages (the ``prerast`` logger of the logging module).

    Returns:
        int: 0 info, 1 warning (the default), 2 error, 3 fatal, as in nvdiffrast.
    """
    return {v: k for k, v in _LEVELS.items()}.get(logger.level, 1)


def set_log_level(level):
    """Set the level of prerast's log messages (the ``prerast`` logger of the logging module).

    Args:
        level (int): 0 info, 1 warning (the default), 2 error, 3 fatal.

    Raises:
        ValueError: level is not 0, 1, 2 or 3.
    """
    if level not in _LEVELS:
        raise ValueError(f"set_log_level: level must be 0 (info), 1 (warning), 2 (error) or 3 (fatal), got {level!r}")
    logger.setLevel(_LEVELS[level])
