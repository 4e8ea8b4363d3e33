"""The OcrBatch controller: a folder of documents OCR'd by an Indexed Job of workers.

The same shape as the OcrService's, on the same runtime: each reconcile (controller.py) reads the
batch, its Job and its workers' pods from the runtime's cache, decides with pure functions
(decide.py), applies the workers' ConfigMap and Job (render.py) through the runtime's one apply,
and writes one status; the completion callback (callback.py) is a background job of the runtime.
The workers are a program of their own (ocr_batch_worker), which agrees with this controller
only on ocr_batch_worker.contract.
"""
