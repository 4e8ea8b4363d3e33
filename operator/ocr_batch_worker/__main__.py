"""`python -m ocr_batch_worker`: run one index of an OcrBatch's Job (see program.main)."""

import sys

from .program import main

sys.exit(main())
