"""`python -m ocr_server.fetch`: the model-fetch init container (see the package's docstring)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import FETCH_FAILED, FetchError
from .fetcher import Fetch
from .report import TERMINATION_LOG, Reporter
from .settings import from_env


def main() -> int:
    # FETCH_TERMINATION_LOG: another file for the termination message (a test's), "" for none.
    path = os.environ.get("FETCH_TERMINATION_LOG")
    reporter = Reporter(termination_log=TERMINATION_LOG if path is None else Path(path) if path else None)
    try:
        settings = from_env()
        reporter.every = settings.progress_seconds
        Fetch(settings, reporter).run()
    except FetchError as exc:
        reporter.failed(exc.reason, str(exc))
        sys.stdout.flush()
        os._exit(1)  # not waiting for transfer threads that may hang on a stalled store
    except Exception as exc:  # noqa: BLE001 - any other failure is still a named reason
        reporter.failed(FETCH_FAILED, f"{type(exc).__name__}: {exc}")
        sys.stdout.flush()
        os._exit(1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
