"""The OcrBatch worker: one index of an Indexed Job that OCRs its shard of a folder of documents.

Run as `python -m ocr_operator.batch` in the operator image. The decisions are pure modules
(shards: which documents this index owns; results: what is written for a document; retry: what
to do with an answer; progress: when to report), the I/O thin ones (storage: the input and output
folders; client: the OcrService's HTTP API; worker: the loop that joins them).
"""
