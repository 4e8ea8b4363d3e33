"""`python -m ocr_operator.batch`: run one index of an OcrBatch's Job (see worker.main)."""

import sys

from .worker import main

sys.exit(main())
