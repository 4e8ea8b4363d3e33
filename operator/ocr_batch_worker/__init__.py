"""The OcrBatch worker: one index of an Indexed Job that OCRs its shard of a folder of documents.

A program of its own, run as `python -m ocr_batch_worker` in the operator's image; it imports no
controller (an import-linter contract) and agrees with the OcrBatch controller only on
contract.py. The decisions are pure modules (shards: which documents this index owns; results:
what is written for a document; retry: what to do with an answer; progress: when to report), the
I/O thin ones (storage, s3: the input and output folders; client: the OcrService's HTTP API;
worker: the loop that joins them).
"""
