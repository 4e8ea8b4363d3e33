"""`python -m ocr_batch_worker`: run one index of an OcrBatch's Job (see worker.main)."""

import sys

from .worker import main

sys.exit(main())
