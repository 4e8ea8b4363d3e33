"""`python -m ocr_server.convert SRC DST`: an official checkpoint -> the transformers-native layout
(engines/transformers/convert.py)."""

from .engines.transformers.convert import main

if __name__ == "__main__":
    raise SystemExit(main())
